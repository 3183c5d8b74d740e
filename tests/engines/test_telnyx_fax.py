"""send-fax, receive-fax, send-sms and call through the gate on ``kind = "telnyx"``,
against a loopback fake of Telnyx's API (tests/fakes/fake_telnyx.py) that fetches the hosted
PDF, answers JSON under Bearer auth and sends Ed25519-signed webhooks."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from aiosmtpd.controller import Controller
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pypdf import PdfReader

from satsgate.appkeys import FAXES, HELD_REQUESTS
from satsgate.config.settings import Settings
from satsgate.engines import EngineConfigError, EngineDeps
from satsgate.engines.config import parse_providers
from satsgate.engines.delivery import WebhookRequest
from satsgate.engines.local import pdf
from satsgate.engines.providers.telnyx import TelnyxProvider
from satsgate.engines.providers.telnyx_parsing import public_key_from, verify_signature
from tests.conftest import (
    ThreadedServer,
    free_port,
    http_client,
    make_settings,
    paid_l402_auth,
)
from tests.documents_inputs import text_layer_pdf
from tests.engines.test_email_smtp import Mailbox, Smtp
from tests.fakes.fake_telnyx import (
    API_KEY,
    OPTED_OUT_NUMBER,
    CallScript,
    FakeTelnyx,
    FaxScript,
    event,
    public_key_b64,
    signed_headers,
)
from tests.ledger_check import assert_ledger_balances
from tests.mcp_client import tool_result
from tests.payments.test_gateway import assert_envelope
from tests.payments.test_payment_proof import hop_forgeries
from tests.pg_cluster import PgCluster
from tests.store_access import store_value

FAX_FROM = "+13125550100"
INBOUND_US = "+13125550101"
INBOUND_US_2 = "+13125550102"
INBOUND_GB = "+442071838750"
TO = "+14155550123"


@pytest.fixture(scope="module")
def telnyx() -> Iterator[FakeTelnyx]:
    fake = FakeTelnyx()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def smtp() -> Iterator[Smtp]:
    box = Smtp(Mailbox(), free_port())
    controller = Controller(box.mailbox, hostname="127.0.0.1", port=box.port)
    controller.start()
    yield box
    controller.stop()


def telnyx_settings(
    data_dir: Path, fake: FakeTelnyx, smtp: Smtp | None = None, status_poll_s: float = 0.5
) -> Settings:
    providers: dict[str, Any] = {
        "tx": {
            "kind": "telnyx",
            "base_url": f"{fake.url}/v2",
            "api_key": API_KEY,
            "public_key": fake.public_key,
            "fax_connection_id": "fax-app-1",
            "from_number": FAX_FROM,
            "inbound_fax_numbers": [INBOUND_US, INBOUND_US_2, INBOUND_GB],
            "status_poll_s": status_poll_s,
            "timeout_s": 5,
            "messaging_profile_id": "mp-1",
            "call_connection_id": "cc-app-1",
            "voices": {"de-de": "male"},
        }
    }
    engines = {"fax": "tx", "sms": "tx", "voice": "tx"}
    if smtp is not None:
        providers["mail"] = {"kind": "smtp", "host": "127.0.0.1", "port": smtp.port,
                             "from_address": "node@example.com", "starttls": False}  # fmt: skip
        engines["email"] = "mail"
    return make_settings(data_dir, providers=providers, engines=engines)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, telnyx: FakeTelnyx, smtp: Smtp
) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(telnyx_settings(tmp_path_factory.mktemp("telnyx"), telnyx, smtp))
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(server):
        yield c


@pytest.fixture(autouse=True)
def fresh_script(telnyx: FakeTelnyx) -> None:
    telnyx.script = FaxScript()
    telnyx.call_script = CallScript()


@pytest.fixture(scope="module")
def letter() -> bytes:
    return text_layer_pdf("Invoice 4711 for Alice", "Second page: thank you")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def paid(
    client: httpx.AsyncClient, slug: str, body: dict[str, Any]
) -> tuple[httpx.Response, str]:
    auth = await paid_l402_auth(client, slug, body)
    resp = await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})
    return resp, auth


async def until_final(
    client: httpx.AsyncClient, fax_id: str, auth: str = ""
) -> list[dict[str, Any]]:
    """Poll the free fax status until it is final (and settled); every answer seen."""
    seen: list[dict[str, Any]] = []
    headers = {"Authorization": auth} if auth else {}
    for _ in range(300):
        resp = await client.get("/api/l402/send-fax", params={"faxId": fax_id}, headers=headers)
        assert resp.status_code == 200, resp.text
        seen.append(resp.json())
        if seen[-1]["final"] and (seen[-1]["status"] == "delivered" or "refund" in seen[-1]):
            return seen
        await asyncio.sleep(0.02)
    raise AssertionError("the fax never ended")


async def sent_fax(client: httpx.AsyncClient, letter: bytes) -> tuple[dict[str, Any], str]:
    resp, auth = await paid(client, "send-fax", {"faxNumber": TO, "documentBase64": b64(letter)})
    assert resp.status_code == 200, resp.text
    return dict(resp.json()), auth


def webhook_url(server: ThreadedServer) -> str:
    return f"{server.url}/api/webhooks/telnyx/tx"


# -- send-fax ----------------------------------------------------------------------------------


async def test_send_fax_delivered(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, letter: bytes
) -> None:
    answer, _ = await sent_fax(client, letter)
    assert answer["success"] is True and answer["status"] == "queued"
    fax_id = answer["faxId"]
    assert answer["status_url"].endswith(f"/api/l402/send-fax?faxId={fax_id}")
    seen = await until_final(client, fax_id)
    statuses = [s["status"] for s in seen]
    assert statuses[-1] == "delivered"
    assert set(statuses) <= {"queued", "sending", "delivered"}
    assert seen[-1]["faxId"] == fax_id and seen[-1]["pages"] == 2
    assert "refund" not in seen[-1]
    # Telnyx got the caller's PDF itself, from a signed URL of the node, and our numbers.
    fax = list(telnyx.faxes.values())[-1]
    assert fax.media == letter
    assert fax.body["to"] == TO and fax.body["from"] == FAX_FROM
    assert fax.body["connection_id"] == "fax-app-1"
    assert "/api/files/" in fax.body["media_url"] and "sig=" in fax.body["media_url"]
    assert fax.body["webhook_url"].endswith(f"/api/webhooks/telnyx/tx?ref={fax_id}")
    assert "telnyx" not in json.dumps(seen).lower()


async def test_send_fax_failure_is_refunded(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, letter: bytes, server: ThreadedServer
) -> None:
    telnyx.script.outcome = "failed"
    telnyx.script.failure_reason = "receiver_call_dropped"
    answer, auth = await sent_fax(client, letter)
    fax_id = answer["faxId"]
    seen = await until_final(client, fax_id, auth)
    last = seen[-1]
    assert last["status"] == "failed"
    assert "receiver call dropped" in last["error"]
    assert last["refund"]["amount_sats"] == 500 and last["refund"]["lnurl_withdraw"]
    # Without the payer's credential, no refund secret.
    anonymous = (await client.get("/api/l402/send-fax", params={"faxId": fax_id})).json()
    assert anonymous["status"] == "failed" and "lnurl_withdraw" not in json.dumps(anonymous)
    # Nor with what a routing node knows (hash and preimage) in a credential it forged.
    preimage = auth.rsplit(":", 1)[1]
    payment_hash = hashlib.sha256(bytes.fromhex(preimage)).hexdigest()
    for forged in await hop_forgeries(client, payment_hash, preimage):
        hop = await client.get(
            "/api/l402/send-fax", params={"faxId": fax_id}, headers={"Authorization": forged}
        )
        assert hop.json()["status"] == "failed" and "lnurl_withdraw" not in hop.text, forged
    # Settled once: a late duplicate report changes nothing, no second refund.
    fax = list(telnyx.faxes.values())[-1]
    body = event("fax.failed", telnyx._payload(fax, "failed"))
    headers = signed_headers(telnyx.key, body)
    async with httpx.AsyncClient(timeout=10) as raw:
        resp = await raw.post(webhook_url(server), content=body, headers=headers)
        assert resp.status_code == 200
    await asyncio.sleep(0.2)
    payment_id = _payment_of(server, fax_id)
    refunds = server.call(lambda: server.store.refunds.for_payment(payment_id))
    assert len(refunds) == 1


async def test_a_fax_whose_instance_is_gone_is_followed_to_its_refund_by_another(
    telnyx: FakeTelnyx, letter: bytes, tmp_path: Path, pg_cluster: PgCluster
) -> None:
    """Two instances on one store: A sends a fax and goes away for good before it ends
    (its reports reach nobody). B, already running, follows it to its end at its next
    look and refunds the failed fax, as A would have."""
    telnyx.script.outcome, telnyx.script.step_s = "failed", 0.3
    store_url = pg_cluster.new_database()
    data = tmp_path / "data"  # one data directory (server secret, files) for both
    b = ThreadedServer(replace(telnyx_settings(data, telnyx), store_url=store_url))
    a = ThreadedServer(replace(telnyx_settings(data, telnyx), store_url=store_url))
    try:
        async for client in http_client(a):
            answer, _ = await sent_fax(client, letter)
        a.stop()
        assert b.call(b.app[FAXES].follow_unsettled) == 1
        async for client in http_client(b):
            last = (await until_final(client, answer["faxId"]))[-1]
        assert last["status"] == "failed" and last["refund"]["amount_sats"] == 500
    finally:
        b.stop()


@pytest.mark.parametrize(
    "answer_after_webhooks_s",
    # None: the reports come while A follows the fax. 0.5: every report, and B's
    # announcements of them, reach A before Telnyx's answer to the send does.
    [None, 0.5],
    ids=["while-the-follow-runs", "before-the-send-answer"],
)
async def test_a_fax_report_heard_by_another_instance_ends_the_follow_where_it_runs(
    telnyx: FakeTelnyx,
    letter: bytes,
    tmp_path: Path,
    pg_cluster: PgCluster,
    answer_after_webhooks_s: float | None,
) -> None:
    """Two instances on one store, each asking Telnyx about a fax once a minute: A sends
    and follows the fax, its reports reach B (the load balancer's choice). B announces
    them, and A asks Telnyx at once: the failed fax is refunded within seconds."""
    telnyx.script.outcome = "failed"
    telnyx.script.answer_after_webhooks_s = answer_after_webhooks_s
    store_url = pg_cluster.new_database()
    data = tmp_path / "data"  # one data directory (server secret, files) for both
    a, b = (
        ThreadedServer(
            replace(telnyx_settings(data, telnyx, status_poll_s=60), store_url=store_url)
        )
        for _ in range(2)
    )
    telnyx.webhook_answers.clear()
    telnyx.webhook_origin = b.url
    try:
        started = time.monotonic()
        async for client in http_client(a):
            answer, auth = await sent_fax(client, letter)
            last = (await until_final(client, answer["faxId"], auth))[-1]
        assert time.monotonic() - started < 10  # not the minute's poll
        assert last["status"] == "failed" and last["refund"]["amount_sats"] == 500
        assert telnyx.webhook_answers == [200] * 4  # queued, processed, sending, failed: at B
        assert_ledger_balances(a)
    finally:
        telnyx.webhook_origin = None
        a.stop()
        b.stop()


def _payment_of(server: ThreadedServer, fax_id: str) -> str:
    fax = server.call(lambda: server.store.faxes.get_send(fax_id))
    return str(fax.payment_id)


async def test_provider_refusal_is_refunded_and_not_repeated(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, letter: bytes
) -> None:
    before = len(telnyx.creates)
    telnyx.script.create_errors = [500]
    resp, _ = await paid(client, "send-fax", {"faxNumber": TO, "documentBase64": b64(letter)})
    body = assert_envelope(resp, "L402_UPSTREAM_FAILED", 502)
    assert body["refund"]["amount_sats"] == 500
    assert "telnyx" not in json.dumps(body).lower()
    # A 500 after a POST may have sent the fax: never sent again.
    assert telnyx.creates[before:] == [500]


async def test_rate_limited_create_is_retried(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, letter: bytes
) -> None:
    before = len(telnyx.creates)
    telnyx.script.create_errors = [429]
    answer, _ = await sent_fax(client, letter)
    seen = await until_final(client, answer["faxId"])
    assert seen[-1]["status"] == "delivered"
    assert telnyx.creates[before:] == [429, 202]


async def test_forged_and_stale_webhooks_change_nothing(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, server: ThreadedServer, letter: bytes
) -> None:
    telnyx.script.outcome = "never"  # the fax stays "sending" unless a webhook says more
    answer, _ = await sent_fax(client, letter)
    fax_id = answer["faxId"]
    for _ in range(200):
        state = (await client.get("/api/l402/send-fax", params={"faxId": fax_id})).json()
        if state["status"] == "sending":
            break
        await asyncio.sleep(0.02)
    assert state["status"] == "sending"
    fax = list(telnyx.faxes.values())[-1]
    payload = {"fax_id": fax.id, "direction": "outbound", "status": "failed",
               "failure_reason": "user_busy", "to": TO, "from": FAX_FROM}  # fmt: skip
    url = webhook_url(server)
    body = event("fax.failed", payload)
    forged = signed_headers(Ed25519PrivateKey.generate(), body)
    stale = signed_headers(telnyx.key, body, stamp=int(time.time()) - 301)
    tampered = signed_headers(telnyx.key, body)
    async with httpx.AsyncClient(timeout=10) as raw:
        assert (await raw.post(url, content=body, headers=forged)).status_code == 403
        assert (await raw.post(url, content=body, headers=stale)).status_code == 403
        other = body.replace(b"user_busy", b"no_answer")
        assert (await raw.post(url, content=other, headers=tampered)).status_code == 403
        for stamp in ("\u00b2".encode(), b"9" * 5000):  # a digit to str.isdigit; too long
            signed = {k.encode(): v.encode() for k, v in signed_headers(telnyx.key, body).items()}
            odd = {**signed, b"telnyx-timestamp": stamp}
            assert (await raw.post(url, content=body, headers=odd)).status_code == 403
        unsigned = {"content-type": "application/json"}
        assert (await raw.post(url, content=body, headers=unsigned)).status_code == 403
        assert (await raw.post(f"{server.url}/api/webhooks/telnyx/nope", content=body,
                               headers=tampered)).status_code == 404  # fmt: skip
        await asyncio.sleep(0.3)
        state = (await client.get("/api/l402/send-fax", params={"faxId": fax_id})).json()
        assert state["status"] == "sending"
        # The genuine one ends it (failed: refunded).
        assert (await raw.post(url, content=body, headers=tampered)).status_code == 200
    seen = await until_final(client, fax_id)
    assert seen[-1]["status"] == "failed" and "user busy" in seen[-1]["error"]


async def test_a_scam_fax_is_held_by_its_text_layer_and_sent_on_release(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, server: ThreadedServer
) -> None:
    """The screen reads the PDF's text: a credential-phishing fax is held, not sent; the
    operator's release sends it (the handler runs again from the stored request)."""
    scam = text_layer_pdf(
        "This is your bank. Your account is suspended.",
        "Confirm your password and the verification code now or your account will be closed.",
    )
    before = len(telnyx.creates)
    resp, _ = await paid(client, "send-fax", {"faxNumber": TO, "documentBase64": b64(scam)})
    held = assert_envelope(resp, "CONTENT_POLICY_HELD", resp.status_code)
    assert held["held"] is True and "refund" not in held
    assert len(telnyx.creates) == before  # nothing reached the provider
    outcome = server.call(lambda: server.app[HELD_REQUESTS].release(held["hold_id"]))
    assert outcome.status == "released", outcome
    assert len(telnyx.creates) == before + 1
    assert list(telnyx.faxes.values())[-1].media == scam
    seen = await until_final(client, outcome.result["faxId"])
    assert seen[-1]["status"] == "delivered"


def bank_letterhead_pdf() -> bytes:
    """A one-page letter on a bank's letterhead (no "this is" anywhere) asking the reader
    to fax back their online banking password and a 6-digit code: the screen reads it from
    the PDF's text layer, as the fax provider's recipient would."""
    html = (
        "<html><body style='font-family: sans-serif'>"
        "<header style='border-bottom: 2px solid #003366'><h1>NORTHBRIDGE BANK</h1>"
        "<p>Fraud Prevention Department &middot; 1 Harbour Street, London</p></header>"
        "<p>Dear customer,</p><p>We detected unusual activity on your account. To keep it "
        "open, complete this form and fax it back to 0800 555 0199 within 24 hours.</p>"
        "<table><tr><td>Full name</td><td>__________</td></tr>"
        "<tr><td>Online banking password</td><td>__________</td></tr>"
        "<tr><td>6-digit verification code sent to your phone</td><td>______</td></tr>"
        "</table><p>Yours faithfully,<br>M. Carter, Head of Security</p></body></html>"
    )
    return pdf.html_to_pdf(html).data


async def test_a_bank_letterhead_asking_to_fax_back_a_password_is_held_never_sent(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, server: ThreadedServer
) -> None:
    """Issue 35: the letterhead names the bank, the ask is "fax it back", the secrets sit
    lines away from the ask. Held (451), nothing reaches the fax provider, and the payment
    is neither spent nor refunded: it waits for the operator (or the 24-hour refund)."""
    letter = bank_letterhead_pdf()
    assert "fax it back" in " ".join(PdfReader(io.BytesIO(letter)).pages[0].extract_text().split())
    creates, faxes = len(telnyx.creates), len(telnyx.faxes)
    resp, _ = await paid(client, "send-fax", {"faxNumber": TO, "documentBase64": b64(letter)})
    held = assert_envelope(resp, "CONTENT_POLICY_HELD", 451)
    assert held["held"] is True and "refund" not in held and held["appeal_sats"] == 1
    assert (len(telnyx.creates), len(telnyx.faxes)) == (creates, faxes)  # never sent
    hold = server.call(lambda: server.app[HELD_REQUESTS].get(held["hold_id"]))
    assert hold.status == "held"
    assert {"credential:code", "impersonation:authority"} <= set(hold.reasons)
    pid, at = held["payment_id"], server.settings
    status = store_value(at, "SELECT status FROM payments WHERE payment_id = ?", pid)
    refunds = store_value(at, "SELECT COUNT(*) FROM refunds WHERE payment_id = ?", pid)
    assert (status, refunds) == ("serving", 0)  # held: neither answered nor refunded
    assert_ledger_balances(server)


async def test_stop_reply_refuses_later_faxes_and_sms_before_any_invoice(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, server: ThreadedServer, letter: bytes
) -> None:
    number = "+14155550999"
    answer = await asyncio.to_thread(
        telnyx.inbound_sms, webhook_url(server), number, FAX_FROM, "STOP"
    )
    assert answer == 200
    assert server.call(lambda: server.store.do_not_contact.opted_out([number]))
    for slug, body in (
        ("send-fax", {"faxNumber": number, "documentBase64": b64(letter)}),
        ("send-sms", {"phone_number": number, "message": "Hi"}),
    ):
        resp = await client.post(f"/api/l402/{slug}", json=body)
        assert_envelope(resp, "RECIPIENT_OPTED_OUT", 403)
        assert "www-authenticate" not in resp.headers
    # An ordinary reply opts nobody out.
    other = "+14155550998"
    await asyncio.to_thread(telnyx.inbound_sms, webhook_url(server), other, FAX_FROM, "Thanks!")
    assert not server.call(lambda: server.store.do_not_contact.opted_out([other]))


async def test_send_fax_refuses_bad_input_before_any_invoice(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/api/l402/send-fax", json={"faxNumber": TO, "documentBase64": b64(b"not a pdf")}
    )
    assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    unknown = await client.get("/api/l402/send-fax", params={"faxId": "nosuchfax123"})
    assert_envelope(unknown, "NOT_FOUND", 404)


# -- receive-fax -------------------------------------------------------------------------------


async def test_receive_fax_delivers_to_the_payer(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, server: ThreadedServer, smtp: Smtp
) -> None:
    resp, _ = await paid(client, "receive-fax", {"country": "GB", "forwardEmail": "me@example.org"})
    assert resp.status_code == 200, resp.text
    inbox = resp.json()
    assert inbox["faxNumber"] == INBOUND_GB and inbox["faxes"] == [] and inbox["active"]
    assert inbox["poll_url"].endswith(f"inboxId={inbox['inboxId']}")
    # A fax to a number nobody leased is not even fetched.
    stray = telnyx.serve(text_layer_pdf("Not for anyone"))
    assert telnyx.inbound_fax(webhook_url(server), INBOUND_US_2, TO, stray) == 200
    # A forged fax to the leased number is refused and stored nowhere.
    forged_url = telnyx.serve(text_layer_pdf("Forged"))
    status = telnyx.inbound_fax(
        webhook_url(server), INBOUND_GB, TO, forged_url, key=Ed25519PrivateKey.generate()
    )
    assert status == 403
    # The genuine fax: fetched, stored, listed for the payer with a link to the PDF.
    document = text_layer_pdf("Contract for Bob", "Page two of the contract")
    media = telnyx.serve(document)
    assert telnyx.inbound_fax(webhook_url(server), INBOUND_GB.lstrip("+"), TO, media, 2) == 200
    faxes: list[dict[str, Any]] = []
    for _ in range(200):
        faxes = (await client.get(inbox["poll_url"])).json()["faxes"]
        if faxes:
            break
        await asyncio.sleep(0.02)
    assert len(faxes) == 1, faxes
    got = faxes[0]
    assert got["status"] == "received" and got["pages"] == 2 and got["from"] == TO
    pdf = (await client.get(got["url"])).content
    assert pdf == document
    text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    assert "Contract for Bob" in text and "Page two" in text
    # E-mailed to forwardEmail too: a link to the same document.
    for _ in range(200):
        if smtp.mailbox.received:
            break
        await asyncio.sleep(0.02)
    envelope, mail = smtp.mailbox.received[-1]
    assert envelope.rcpt_tos == ["me@example.org"] and INBOUND_GB in str(mail["Subject"])
    text = mail.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    link = next(line for line in text.splitlines() if "/api/files/" in line).strip()
    assert (await client.get(link)).content == document
    stray_name = stray.rsplit("/", 1)[1]
    forged_name = forged_url.rsplit("/", 1)[1]
    assert stray_name not in telnyx.media_gets and forged_name not in telnyx.media_gets
    # Over MCP too (free tool).
    arguments = {"inboxId": inbox["inboxId"]}
    answer = await tool_result(client, "check_fax_inbox", arguments)
    listed = answer["structuredContent"]
    assert answer["isError"] is False, listed
    assert listed["faxNumber"] == INBOUND_GB and [f["faxId"] for f in listed["faxes"]] == [
        got["faxId"]
    ]


async def test_inbound_fax_only_from_the_providers_host(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, server: ThreadedServer
) -> None:
    resp, _ = await paid(client, "receive-fax", {"country": "US"})
    inbox = resp.json()
    elsewhere = "http://localhost:9/fax.pdf"  # not the provider's host
    assert telnyx.inbound_fax(webhook_url(server), inbox["faxNumber"], TO, elsewhere) == 200
    deadline = time.monotonic() + 15  # the webhook is handled after its 200
    while True:
        faxes = (await client.get(inbox["poll_url"])).json()["faxes"]
        if faxes or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert faxes and faxes[0]["status"] == "unavailable" and "url" not in faxes[0]


async def test_receive_fax_refuses_a_country_without_numbers(client: httpx.AsyncClient) -> None:
    resp = await client.post("/api/l402/receive-fax", json={"country": "DE"})
    body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert "DE" in body["error"] and "invoice" not in resp.headers.get("WWW-Authenticate", "")
    unknown = await client.get("/api/l402/receive-fax", params={"inboxId": "nosuchinbox1"})
    assert_envelope(unknown, "NOT_FOUND", 404)


async def test_mcp_fax_status(client: httpx.AsyncClient, letter: bytes) -> None:
    answer, _ = await sent_fax(client, letter)
    fax_id = answer["faxId"]
    await until_final(client, fax_id)
    answer = await tool_result(client, "get_fax_status", {"faxId": fax_id}, id=2)
    record = answer["structuredContent"]
    assert record["faxId"] == fax_id and record["status"] == "delivered" and record["pages"] == 2


# -- SMS and calls on the twilio branch's Protocols ----------------------------------------------


async def until_status(
    client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The status read once final (a call's: once settled, with its billing)."""
    for _ in range(300):
        body = (await client.get(url, headers=headers or {})).json()
        if body.get("final") and ("call_id" not in body or "charged_sats" in body):
            return dict(body)
        await asyncio.sleep(0.02)
    raise AssertionError(f"no final status at {url}")


async def test_sms_through_the_sms_engine(client: httpx.AsyncClient, telnyx: FakeTelnyx) -> None:
    resp, _ = await paid(client, "send-sms", {"phone_number": TO, "message": "Table at 8pm"})
    assert resp.status_code == 200, resp.text
    message_id = resp.headers["X-Message-Id"]
    sent = list(telnyx.messages.values())[-1]
    assert sent["text"] == "Table at 8pm" and sent["to"][0]["phone_number"] == TO
    assert sent["from"]["phone_number"] == FAX_FROM and sent["messaging_profile_id"] == "mp-1"
    assert sent["webhook_url"].endswith(f"/api/webhooks/telnyx/tx?ref={message_id}")
    status = await until_status(client, resp.headers["X-Status-Url"])
    assert status["status"] == "delivered" and status["message_id"] == message_id
    assert "telnyx" not in json.dumps(status).lower()


async def test_sms_to_a_refused_number_is_refunded(client: httpx.AsyncClient) -> None:
    resp, _ = await paid(client, "send-sms", {"phone_number": "+15005550009", "message": "Hi"})
    body = assert_envelope(resp, "INVALID_INPUT", 400)
    assert body["refund"]["amount_sats"] > 0
    assert "telnyx" not in json.dumps(body).lower()


async def test_sms_refused_as_opted_out_by_the_carrier_is_refunded_and_listed(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    """Telnyx refuses the send (40300: the recipient sent STOP to the carrier, not to this
    node): the payer is refunded, the number goes on the do-not-contact list, and the
    next send to it is refused before any invoice."""
    body = {"phone_number": OPTED_OUT_NUMBER, "message": "Hi"}
    resp, _ = await paid(client, "send-sms", body)
    error = assert_envelope(resp, "RECIPIENT_OPTED_OUT", 403)
    assert error["refund"]["amount_sats"] > 0
    assert "telnyx" not in json.dumps(error).lower()
    assert server.call(lambda: server.store.do_not_contact.opted_out([OPTED_OUT_NUMBER]))
    again = await client.post("/api/l402/send-sms", json=body)
    assert_envelope(again, "RECIPIENT_OPTED_OUT", 403)
    assert "www-authenticate" not in again.headers


async def test_call_speaks_the_message_and_bills_connected_minutes(
    client: httpx.AsyncClient, telnyx: FakeTelnyx
) -> None:
    body = {"phone_number": TO, "message": "Your table is ready", "repeat": 2,
            "duration_minutes": 3, "language": "de-DE"}  # fmt: skip
    resp, auth = await paid(client, "call", body)
    assert resp.status_code == 200, resp.text
    placed = resp.json()
    status = await until_status(client, placed["status_url"], headers={"Authorization": auth})
    assert status["status"] == "completed" and status["billed_minutes"] == 1
    call = list(telnyx.calls.values())[-1]
    assert call.body["connection_id"] == "cc-app-1" and call.body["to"] == TO
    assert call.body["time_limit_secs"] == 180
    actions = [action for action, _ in call.commands]
    assert actions == ["speak", "speak", "hangup"]
    speak = call.commands[0][1]
    assert speak["payload"] == "Your table is ready"
    assert speak["voice"] == "male" and speak["language"] == "de-DE"
    # One minute billed of the three paid: the other two refunded.
    assert status["refund"]["amount_sats"] == round(status["charged_sats"] * 2)


async def test_a_calls_events_go_to_the_instance_that_dialed_it(
    telnyx: FakeTelnyx, tmp_path: Path
) -> None:
    """With several instances, a call's events need the call the dialing instance keeps
    in memory (what to say, how often): its webhook is that instance's own address
    (instance_base_url). Elsewhere the answered call would be hung up unspoken."""
    shared = telnyx_settings(tmp_path, telnyx)
    own = f"http://localhost:{shared.port}"  # the same server, by another name
    server = ThreadedServer(replace(shared, instance_base_url=own))
    try:
        async for client in http_client(server):
            resp, auth = await paid(client, "call", {"phone_number": TO, "message": "Hi"})
            assert resp.status_code == 200, resp.text
            placed = resp.json()
            status = await until_status(
                client, placed["status_url"], headers={"Authorization": auth}
            )
            assert status["status"] == "completed", status
        call = list(telnyx.calls.values())[-1]
        assert call.body["webhook_url"].startswith(f"{own}/api/webhooks/telnyx/tx?")
        assert [action for action, _ in call.commands] == ["speak", "hangup"]
    finally:
        server.stop()


async def test_busy_call_is_refunded_in_full(client: httpx.AsyncClient, telnyx: FakeTelnyx) -> None:
    telnyx.call_script.outcome = "busy"
    resp, auth = await paid(client, "call", {"phone_number": TO, "message": "Hello"})
    status = await until_status(client, resp.json()["status_url"], headers={"Authorization": auth})
    assert status["status"] == "busy" and status["charged_sats"] == 0
    assert status["refund"]["amount_sats"] > 0
    assert list(telnyx.calls.values())[-1].commands == []  # nothing spoken, nothing to end


class ListOptOuts:
    """An in-memory do-not-contact list (the store's is holds'; the adapter only adds)."""

    def __init__(self) -> None:
        self.added: list[tuple[str, str]] = []

    async def add(self, address: str, source: str, now: int | None = None) -> bool:
        self.added.append((address, source))
        return True

    async def opted_out(self, addresses: Sequence[str]) -> list[str]:
        return [a for a in addresses if any(a == added for added, _ in self.added)]


async def test_stop_reply_opts_the_sender_out(telnyx: FakeTelnyx, tmp_path: Path) -> None:
    opt_outs = ListOptOuts()
    settings = telnyx_settings(tmp_path, telnyx)
    config = parse_providers(settings.providers)["tx"]
    deps = EngineDeps(settings, cast(Any, None), opt_outs=opt_outs)
    provider = TelnyxProvider(config, deps)
    try:
        url = f"{settings.public_base_url}/api/webhooks/telnyx/tx"

        def received(text: str, sender: str) -> bytes:
            payload = {"id": "m-" + text, "direction": "inbound", "text": text,
                       "from": {"phone_number": sender},
                       "to": [{"phone_number": FAX_FROM}]}  # fmt: skip
            return event("message.received", payload)

        hello = received("Hello there", "+14155550111")
        answer = await provider.receive_events(
            WebhookRequest(url, "POST", signed_headers(telnyx.key, hello), hello)
        )
        assert answer.status == 200 and answer.inbound[0].text == "Hello there"
        stop = received("STOP", "+14155550112")
        forged = signed_headers(Ed25519PrivateKey.generate(), stop)
        assert (
            await provider.receive_events(WebhookRequest(url, "POST", forged, stop))
        ).status == 403
        assert opt_outs.added == []
        answer = await provider.receive_events(
            WebhookRequest(url, "POST", signed_headers(telnyx.key, stop), stop)
        )
        assert answer.status == 200
        assert opt_outs.added == [("+14155550112", "sms-stop")]
    finally:
        await provider.aclose()


async def test_received_documents_are_deleted_after_12_hours(
    client: httpx.AsyncClient, telnyx: FakeTelnyx, server: ThreadedServer
) -> None:
    resp, _ = await paid(client, "receive-fax", {"country": "US"})
    inbox = resp.json()
    media = telnyx.serve(text_layer_pdf("Kept for twelve hours"))
    assert telnyx.inbound_fax(webhook_url(server), inbox["faxNumber"], TO, media) == 200
    for _ in range(200):
        faxes = (await client.get(inbox["poll_url"])).json()["faxes"]
        if faxes:
            break
        await asyncio.sleep(0.02)
    link = faxes[0]["url"]
    assert (await client.get(link)).status_code == 200
    desk = server.app[FAXES]
    server.call(lambda: desk.clean(now=time.time() + 11 * 3600))
    assert (await client.get(link)).status_code == 200  # not yet
    server.call(lambda: desk.clean(now=time.time() + 12 * 3600 + 60))
    assert (await client.get(link)).status_code == 404
    after = (await client.get(inbox["poll_url"])).json()["faxes"]
    assert after[0]["status"] == "deleted" and "url" not in after[0] and "from" not in after[0]


async def test_a_restart_follows_the_fax_it_sent(
    telnyx: FakeTelnyx, tmp_path: Path, letter: bytes
) -> None:
    """A fax in flight when satsgate stops is followed again after the start: its end
    settles it (here: refunded), and it is never sent twice."""
    telnyx.script.outcome = "never"
    settings = telnyx_settings(tmp_path / "node", telnyx)
    first = ThreadedServer(settings)
    try:
        async for client in http_client(first):
            answer, auth = await sent_fax(client, letter)
    finally:
        first.stop()
    creates = len(telnyx.creates)
    fax = list(telnyx.faxes.values())[-1]
    second = ThreadedServer(settings)
    try:
        url = f"{second.url}/api/webhooks/telnyx/tx"
        body = event(
            "fax.failed", {**telnyx._payload(fax, "failed"), "failure_reason": "user_busy"}
        )
        async with httpx.AsyncClient(timeout=10) as raw:
            resp = await raw.post(url, content=body, headers=signed_headers(telnyx.key, body))
            assert resp.status_code == 200
        async for client in http_client(second):
            seen = await until_final(client, answer["faxId"], auth)
        assert seen[-1]["status"] == "failed" and seen[-1]["refund"]["amount_sats"] == 500
        assert len(telnyx.creates) == creates
    finally:
        second.stop()


def test_signature_rule_and_configuration_errors(telnyx: FakeTelnyx, tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    public = public_key_from(public_key_b64(key), "[providers.tx]")
    body = b'{"data":{}}'
    now = 1_800_000_000
    for age, ok in ((0, True), (300, True), (-300, True), (301, False), (-301, False)):
        headers = {k.lower(): v for k, v in signed_headers(key, body, now - age).items()}
        assert verify_signature(public, headers, body, now=now) is ok, age
    headers = {k.lower(): v for k, v in signed_headers(key, body, now).items()}
    assert not verify_signature(public, headers, body + b" ", now=now)
    settings = telnyx_settings(tmp_path, telnyx)
    base = dict(settings.providers["tx"])
    deps = EngineDeps(settings, cast(Any, None))
    for change, words in (
        ({"public_key": None}, "public_key"),
        ({"public_key": "bm90IGEga2V5"}, "public_key"),
        ({"fax_conection_id": "x"}, "unknown keys fax_conection_id"),
        ({"api_key": ""}, "API key"),
        ({"from_number": "555-0100"}, "from_number"),
    ):
        table = {k: v for k, v in {**base, **change}.items() if v is not None}
        config = parse_providers({"tx": table})["tx"]
        with pytest.raises(EngineConfigError, match=words):
            TelnyxProvider(config, deps)
