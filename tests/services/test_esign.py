"""e-signature on Documenso, end to end: a loopback fake of Documenso's v2 API
(tests/fakes/fake_documenso.py) and a real SMTP server (aiosmtpd) on loopback. Through the
gate: the request is created with the signers and their fields and sent; the verified
DOCUMENT_COMPLETED webhook (or, when it is lost, the poll) makes satsgate fetch the
signed PDF and e-mail it to customerEmail as an attachment, exactly once; a forged
webhook changes nothing; a provider failure before the request went out is refunded;
bad input is refused before any invoice; the service needs the e-mail engine too."""

from __future__ import annotations

import asyncio
import base64
import email.message
import io
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from pypdf import PdfReader, PdfWriter

from satsgate.engines import (
    Binding,
    EngineConfigError,
    EngineDeps,
    Engines,
    ProviderConfig,
    build_engines,
)
from satsgate.engines.cpu_jobs import CpuRunner
from satsgate.engines.esign import Signer, SigningRequest
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.engines.providers.documenso import DocumensoProvider
from satsgate.services.documents.e_signature import E_SIGNATURE
from satsgate.services.documents.esign_desk import DELIVERY_LEASE_S, RETRY_DELAYS_S, ESignDesk
from satsgate.services.registry import ENGINE_NAMES
from satsgate.store import Store
from tests.conftest import ThreadedServer, free_port, http_client, make_settings, paid_l402_auth
from tests.engines.test_email_smtp import Mailbox
from tests.fakes.fake_documenso import API_KEY, WEBHOOK_SECRET, FakeDocumenso
from tests.mcp_client import tool_result

FROM = "node@example.com"
CUSTOMER = "customer@example.org"
SIGNERS = [
    {"name": "Alice Example", "email": "alice@example.org"},
    {"name": "Bob Example", "email": "bob@example.org"},
]
NOTE = "Please sign the lease for flat 3 by Friday."


def pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=595, height=842)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


PDF2 = pdf(2)
_DEPS = EngineDeps(make_settings(Path("/nonexistent")), CpuRunner(None, 10))  # type: ignore[arg-type]


def request_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "documentBase64": base64.b64encode(PDF2).decode(),
        "signers": SIGNERS,
        "customerEmail": CUSTOMER,
        "note": NOTE,
    }
    body.update(overrides)
    return body


@pytest.fixture(scope="module")
def smtp() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


@pytest.fixture(scope="module")
def documenso() -> Iterator[FakeDocumenso]:
    fake = FakeDocumenso()
    yield fake
    fake.stop()


def _providers(
    fake: FakeDocumenso, smtp_port: int, poll_s: int, api_version: int = 2
) -> dict[str, Any]:
    return {
        "sign": {
            "kind": "documenso",
            "base_url": fake.api if api_version == 2 else f"{fake.url}/api/v1",
            "api_version": api_version,
            "api_key": API_KEY,
            "webhook_secret": WEBHOOK_SECRET,
            "poll_interval_s": poll_s,
            "timeout_s": 5,
        },
        "mail": {
            "kind": "smtp",
            "host": "127.0.0.1",
            "port": smtp_port,
            "from_address": FROM,
            "starttls": False,
            "timeout_s": 5,
        },
    }


def _node(
    tmp: Path, fake: FakeDocumenso, smtp_port: int, poll_s: int, api_version: int = 2
) -> ThreadedServer:
    settings = make_settings(
        tmp,
        providers=_providers(fake, smtp_port, poll_s, api_version),
        engines={"esign": "sign", "email": "mail"},
    )
    return ThreadedServer(settings)


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
    documenso: FakeDocumenso,
    smtp: tuple[Mailbox, int],
) -> Iterator[ThreadedServer]:
    """Webhooks only: pending requests are polled hourly (not within a test)."""
    srv = _node(tmp_path_factory.mktemp("esign"), documenso, smtp[1], 3600)
    yield srv
    srv.stop()


@pytest.fixture
async def client(node: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(node):
        yield c


@pytest.fixture(autouse=True)
def _clean(documenso: FakeDocumenso, smtp: tuple[Mailbox, int]) -> None:
    documenso.envelopes.clear()
    documenso.fail_create = documenso.fail_distribute = False
    smtp[0].received.clear()


async def _paid(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, "e-signature", body)
    return await client.post("/api/l402/e-signature", json=body, headers={"Authorization": auth})


MAIL_WAIT_S = 10.0


async def _mail_to(box: Mailbox, to: str) -> email.message.EmailMessage:
    deadline = time.monotonic() + MAIL_WAIT_S
    while time.monotonic() < deadline:
        for envelope, message in box.received:
            if to in envelope.rcpt_tos:
                return message
        await asyncio.sleep(0.05)
    raise AssertionError(f"no e-mail to {to} within {MAIL_WAIT_S} s")


async def _status_once_done(client: httpx.AsyncClient, request_id: str) -> dict[str, Any]:
    """The status read after the signed copy went out: the desk records the delivery
    just after the SMTP server took the mail, so a read may come a moment early."""
    deadline = time.monotonic() + MAIL_WAIT_S
    while True:
        status: dict[str, Any] = (
            await client.get(f"/api/l402/e-signature?requestId={request_id}")
        ).json()
        if status["status"] == "done" or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.05)


def _attachment(message: email.message.EmailMessage) -> tuple[str, str, bytes]:
    parts = list(message.iter_attachments())
    assert len(parts) == 1
    part = parts[0]
    data = part.get_payload(decode=True)
    assert isinstance(data, bytes)
    return str(part.get_filename()), part.get_content_type(), data


def _webhook(node: ThreadedServer) -> str:
    return f"{node.url}/api/webhooks/documenso/sign"


async def test_signed_copy_is_emailed_once_after_the_completion_webhook(
    node: ThreadedServer,
    client: httpx.AsyncClient,
    documenso: FakeDocumenso,
    smtp: tuple[Mailbox, int],
) -> None:
    resp = await _paid(client, request_body())
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["success"] is True and answer["status"] == "pending"
    assert "2 signers" in answer["message"]
    request_id = answer["requestId"]
    assert answer["status_url"] == f"{node.url}/api/l402/e-signature?requestId={request_id}"

    # The envelope: the PDF, both signers with a signature field each on the last page
    # (not on top of each other), the note, satsgate's id, and it was sent.
    envelope = documenso.only()
    assert envelope.pdf == PDF2 and envelope.status == "PENDING"
    payload = envelope.payload
    assert payload["externalId"] == request_id and payload["meta"]["message"] == NOTE
    recipients = payload["recipients"]
    assert [(r["name"], r["email"], r["role"]) for r in recipients] == [
        (s["name"], s["email"], "SIGNER") for s in SIGNERS
    ]
    fields = [r["fields"][0] for r in recipients]
    assert {f["page"] for f in fields} == {2}
    assert len({(f["positionX"], f["positionY"]) for f in fields}) == 2

    status = (await client.get(answer["status_url"].removeprefix(node.url))).json()
    assert status["status"] == "pending" and (status["signed"], status["signers"]) == (0, 2)

    # A forged webhook (wrong secret, or none) is refused and changes nothing.
    assert documenso.forge(envelope.id, _webhook(node), "not-the-secret") == 403
    assert documenso.forge(envelope.id, _webhook(node), None) == 403
    record = await asyncio.wrap_future(
        asyncio.run_coroutine_threadsafe(node.store.esign.get(request_id), node.loop)
    )
    assert record.status == "pending" and record.customer_email == CUSTOMER

    # Everyone signs; the genuine webhook brings the signed copy to the customer.
    assert documenso.complete(envelope.id, _webhook(node)) == 200
    message = await _mail_to(smtp[0], CUSTOMER)
    filename, content_type, data = _attachment(message)
    assert (filename, content_type) == ("signed.pdf", "application/pdf")
    assert data == envelope.signed_pdf
    signed = PdfReader(io.BytesIO(data))
    assert len(signed.pages) == 2
    assert signed.metadata is not None
    assert str(signed.metadata["/SignedBy"]) == "alice@example.org, bob@example.org"
    assert request_id in str(message.get_body(("plain",)).get_content())  # type: ignore[union-attr]

    # The same webhook again (Documenso retries): no second e-mail.
    assert documenso.complete(envelope.id, _webhook(node)) == 200
    await asyncio.sleep(0.5)
    assert [e.rcpt_tos for e, _ in smtp[0].received] == [[CUSTOMER]]

    status = (await client.get(f"/api/l402/e-signature?requestId={request_id}")).json()
    assert status["status"] == "done" and status["final"] is True
    assert status["signed"] == 2 and status["delivered_at"] is not None
    record = await asyncio.wrap_future(
        asyncio.run_coroutine_threadsafe(node.store.esign.get(request_id), node.loop)
    )
    assert record.customer_email is None  # the address is not kept once delivered
    assert documenso.unauthorized == 0


async def test_a_declined_request_is_recorded_and_shown_without_any_email(
    node: ThreadedServer,
    client: httpx.AsyncClient,
    documenso: FakeDocumenso,
    smtp: tuple[Mailbox, int],
) -> None:
    resp = await _paid(client, request_body())
    request_id = resp.json()["requestId"]
    assert documenso.reject(documenso.only().id, _webhook(node)) == 200
    status = (await client.get(f"/api/l402/e-signature?requestId={request_id}")).json()
    assert status["status"] == "rejected" and status["final"] is True
    assert "declined" in status["message"]
    record = await asyncio.wrap_future(
        asyncio.run_coroutine_threadsafe(node.store.esign.get(request_id), node.loop)
    )
    assert record.customer_email is None
    await asyncio.sleep(0.3)
    assert smtp[0].received == []


async def test_a_webhook_secret_of_bytes_beyond_utf8_is_refused(documenso: FakeDocumenso) -> None:
    """aiohttp hands a header's bytes that are not UTF-8 over as surrogates: a wrong
    secret, not a 500."""
    options = {"webhook_secret": "the-secret"}
    config = ProviderConfig(
        "sign", "documenso", base_url=documenso.api, api_key=API_KEY, options=options
    )
    provider = DocumensoProvider(config, _DEPS, environ={})
    body = b'{"event": "DOCUMENT_COMPLETED", "payload": {"envelopeId": "envelope_x"}}'
    try:
        assert await provider.receive_webhook({"x-documenso-secret": "\udcff"}, body) == 403
    finally:
        await provider.aclose()


async def test_webhooks_are_refused_when_no_secret_is_configured(documenso: FakeDocumenso) -> None:
    config = ProviderConfig("sign", "documenso", base_url=documenso.api, api_key=API_KEY)
    provider = DocumensoProvider(config, _DEPS, environ={})
    seen: list[object] = []

    async def listen(event: object) -> None:
        seen.append(event)

    provider.on_event(listen)
    body = b'{"event": "DOCUMENT_COMPLETED", "payload": {"envelopeId": "envelope_x"}}'
    try:
        assert await provider.receive_webhook({"x-documenso-secret": ""}, body) == 403
        assert await provider.receive_webhook({}, body) == 403
        assert seen == []
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "needs api_key"),
        ({"api_key": "k", "colour": "blue"}, "unknown keys colour"),
        ({"api_key": "k", "poll_interval_s": 0}, "poll_interval_s"),
        ({"api_key": "k", "webhook_secret_env": "NOT_SET_ANYWHERE"}, "not set"),
        ({"api_key": "k", "webhook_secret": "a", "webhook_secret_env": "X"}, "not both"),
        ({"api_key": "k", "signature_page": "middle"}, "signature_page"),
        ({"api_key": "k", "api_version": 3}, "api_version"),
    ],
)
def test_provider_configuration_is_checked(table: dict[str, Any], message: str) -> None:
    options = {k: v for k, v in table.items() if k != "api_key"}
    config = ProviderConfig("sign", "documenso", api_key=table.get("api_key", ""), options=options)
    with pytest.raises(EngineConfigError, match=message):
        DocumensoProvider(config, _DEPS, environ={})


async def test_status_over_mcp_and_unknown_request(
    client: httpx.AsyncClient, documenso: FakeDocumenso
) -> None:
    resp = await _paid(client, request_body(signers=SIGNERS[:1], note=None))
    assert resp.status_code == 200, resp.text
    request_id = resp.json()["requestId"]
    assert "1 signer;" in resp.json()["message"]
    assert "meta" in documenso.only().payload and "message" not in documenso.only().payload["meta"]
    result = await tool_result(client, "get_e_signature_status", {"requestId": request_id})
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["status"] == "pending"
    assert result["structuredContent"]["signers"] == 1
    missing = await client.get("/api/l402/e-signature?requestId=sig_nothing")
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "SIGNING_REQUEST_NOT_FOUND"


async def test_provider_failure_before_sending_is_refunded(
    client: httpx.AsyncClient, documenso: FakeDocumenso, node: ThreadedServer
) -> None:
    documenso.fail_create = True
    resp = await _paid(client, request_body())
    assert resp.status_code >= 500 or resp.status_code in (400, 409, 422, 429), resp.text
    body = resp.json()
    assert body["error_code"] == "SERVICE_ERROR"
    assert body["refund"]["amount_sats"] == 1000
    assert "documenso" not in resp.text.lower() and documenso.url not in resp.text
    assert documenso.envelopes == {}


async def test_a_failed_send_withdraws_the_draft_and_is_refunded(
    client: httpx.AsyncClient, documenso: FakeDocumenso
) -> None:
    documenso.fail_distribute = True
    resp = await _paid(client, request_body())
    body = resp.json()
    assert body["error_code"] == "SERVICE_ERROR" and body["refund"]["amount_sats"] == 1000
    assert documenso.envelopes == {} and len(documenso.deleted) >= 1


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"documentBase64": base64.b64encode(b"not a pdf at all").decode()}, "documentBase64"),
        ({"signers": [SIGNERS[0], {**SIGNERS[1], "email": "ALICE@example.org"}]}, "own e-mail"),
        ({"signers": []}, "signers"),
        ({"customerEmail": "nobody"}, "customerEmail"),
    ],
)
async def test_bad_input_is_refused_before_any_invoice(
    client: httpx.AsyncClient, documenso: FakeDocumenso, overrides: dict[str, Any], field: str
) -> None:
    resp = await client.post("/api/l402/e-signature", json=request_body(**overrides))
    assert resp.status_code == 400, resp.text
    assert resp.json()["error_code"] == "L402_INVALID_PARAMS"
    assert field in resp.json()["error"]
    assert "invoice" not in resp.json() and "WWW-Authenticate" not in resp.headers
    assert documenso.envelopes == {}


def test_available_only_with_an_email_engine_too() -> None:
    signing = Binding(object(), "provider", "documenso via sign")
    mail = Binding(object(), "provider", "smtp via mail")
    without_mail = Engines({"esign": (signing,)}, {})
    assert not E_SIGNATURE.is_available(without_mail)
    reason = E_SIGNATURE.unavailable_reason(without_mail)
    assert reason is not None and "email" in reason
    assert E_SIGNATURE.is_available(Engines({"esign": (signing,), "email": (mail,)}, {}))
    assert not E_SIGNATURE.is_available(Engines({"email": (mail,)}, {}))


async def test_a_lost_webhook_is_made_up_for_by_the_poll(
    tmp_path: Path, documenso: FakeDocumenso, smtp: tuple[Mailbox, int]
) -> None:
    srv = _node(tmp_path, documenso, smtp[1], 1)  # pending requests looked at every second
    try:
        async for c in http_client(srv):
            resp = await _paid(c, request_body())
            assert resp.status_code == 200, resp.text
            request_id = resp.json()["requestId"]
            envelope = documenso.only()
            await asyncio.sleep(1.5)  # polled while pending: nothing to send yet
            assert smtp[0].received == []
            documenso.complete(envelope.id, None)  # everyone signed; the webhook is lost
            message = await _mail_to(smtp[0], CUSTOMER)
            assert _attachment(message)[2] == envelope.signed_pdf
            status = await _status_once_done(c, request_id)
            assert status["status"] == "done"
    finally:
        srv.stop()


async def test_a_failed_email_of_the_signed_copy_is_retried_then_given_up(
    tmp_path: Path, documenso: FakeDocumenso
) -> None:
    """The desk on its own clock: the SMTP server is down, each attempt fails and is
    rescheduled (RETRY_DELAYS_S) until one succeeds; with no server ever, the request
    ends undeliverable after the last attempt, its address cleared."""
    port = free_port()
    settings = make_settings(
        tmp_path,
        providers=_providers(documenso, port, 3600),
        engines={"esign": "sign", "email": "mail"},
    )
    engines = build_engines(
        settings,
        ENGINE_NAMES,
        EngineDeps(settings, CpuRunner(None, 10)),  # type: ignore[arg-type]
        provider_kinds=PROVIDER_KINDS,
        local_engines=(),
    )
    store = Store(tmp_path / "desk.db")
    await store.open()
    clock = [time.time()]
    desk = ESignDesk(store.esign, engines, settings, clock=lambda: clock[0])
    desk.attach()
    engine = engines.bindings("esign")[0].engine
    assert isinstance(engine, DocumensoProvider)
    try:
        ids = []
        for n in range(2):
            sent = await engine.send_for_signature(
                SigningRequest(
                    PDF2, 2, (Signer("Alice", "alice@example.org"),), "Doc", None, f"ref{n}"
                )
            )
            await desk.record(
                request_id=f"sig_{n}",
                payment_id=f"pay{n}",
                sent=sent,
                customer_email=CUSTOMER,
                signers_total=1,
            )
            documenso.complete(sent.envelope_id, None)
            ids.append(f"sig_{n}")
        clock[0] += 3600  # the poll is due: both completed, both deliveries fail
        await desk.sweep()
        for request_id in ids:
            record = await store.esign.get(request_id)
            assert record is not None
            assert (record.status, record.attempts) == ("signed", 1), record
            assert record.customer_email == CUSTOMER
        clock[0] += RETRY_DELAYS_S[0] - 1
        await desk.sweep()  # not due yet
        assert (await store.esign.get("sig_0")).attempts == 1  # type: ignore[union-attr]

        # The mail server is back for the first request's next attempt.
        box = Mailbox()
        controller = Controller(box, hostname="127.0.0.1", port=port)
        controller.start()
        try:
            clock[0] += 1
            await desk.deliver("sig_0")
        finally:
            controller.stop()
        assert [e.rcpt_tos for e, _ in box.received] == [[CUSTOMER]]
        done = await store.esign.get("sig_0")
        assert done is not None and (done.status, done.attempts) == ("done", 2)

        # The second one never gets through: one attempt per delay, then given up.
        for delay in RETRY_DELAYS_S:
            clock[0] += delay
            await desk.sweep()
        gone = await store.esign.get("sig_1")
        assert gone is not None
        assert gone.status == "undeliverable" and gone.attempts == 1 + len(RETRY_DELAYS_S)
        assert gone.customer_email is None
        assert desk.body(gone)["message"].startswith("Everyone has signed, but")
        await desk.sweep()  # nothing more is tried
        assert (await store.esign.get("sig_1")).attempts == gone.attempts  # type: ignore[union-attr]
    finally:
        await desk.close()
        await engines.aclose()
        await store.close()


async def test_concurrent_deliveries_send_once_and_a_dead_sender_is_taken_over(
    tmp_path: Path, documenso: FakeDocumenso, smtp: tuple[Mailbox, int]
) -> None:
    """A webhook, the poll and a status read reaching one completed request together
    e-mail it once; a claim whose sender died (a crash mid-delivery) runs out and the
    sweep delivers it."""
    settings = make_settings(
        tmp_path,
        providers=_providers(documenso, smtp[1], 3600),
        engines={"esign": "sign", "email": "mail"},
    )
    engines = build_engines(
        settings,
        ENGINE_NAMES,
        EngineDeps(settings, CpuRunner(None, 10)),  # type: ignore[arg-type]
        provider_kinds=PROVIDER_KINDS,
        local_engines=(),
    )
    store = Store(tmp_path / "desk.db")
    await store.open()
    clock = [time.time()]
    desk = ESignDesk(store.esign, engines, settings, clock=lambda: clock[0])
    engine = engines.bindings("esign")[0].engine
    assert isinstance(engine, DocumensoProvider)
    try:
        for n in range(2):
            sent = await engine.send_for_signature(
                SigningRequest(PDF2, 2, (Signer("Al", "al@example.org"),), "Doc", None, f"r{n}")
            )
            await desk.record(
                request_id=f"sig_{n}",
                payment_id=f"pay{n}",
                sent=sent,
                customer_email=f"customer{n}@example.org",
                signers_total=1,
            )
            documenso.complete(sent.envelope_id, None)
        clock[0] += 3600
        first = await store.esign.get("sig_0")
        assert first is not None
        await asyncio.gather(desk.look(first), desk.look(first), desk.sweep(), desk.status("sig_0"))
        await asyncio.sleep(0.2)
        await desk.close()  # background deliveries, if any, are done or cut
        to = [e.rcpt_tos for e, _ in smtp[0].received]
        assert to.count(["customer0@example.org"]) == 1

        assert to.count(["customer1@example.org"]) == 1  # the sweep took the other one

        # A claim left by a sender that died mid-delivery:
        smtp[0].received.clear()
        sent = await engine.send_for_signature(
            SigningRequest(PDF2, 2, (Signer("Al", "al@example.org"),), "Doc", None, "r2")
        )
        await desk.record(
            request_id="sig_2",
            payment_id="pay2",
            sent=sent,
            customer_email="customer2@example.org",
            signers_total=1,
        )
        documenso.complete(sent.envelope_id, None)
        record = await store.esign.get("sig_2")
        assert record is not None
        assert await store.esign.mark_signed("sig_2", 1, int(clock[0]))
        assert await store.esign.claim("sig_2", DELIVERY_LEASE_S, int(clock[0])) is not None
        await desk.sweep()  # the claim still runs: nobody else sends
        assert smtp[0].received == []
        clock[0] += DELIVERY_LEASE_S
        await desk.sweep()
        assert [e.rcpt_tos for e, _ in smtp[0].received] == [["customer2@example.org"]]
        done = await store.esign.get("sig_2")
        assert done is not None and (done.status, done.attempts) == ("done", 2)
    finally:
        await desk.close()
        await engines.aclose()
        await store.close()


async def test_the_v1_documents_api_of_older_instances(
    tmp_path: Path, documenso: FakeDocumenso, smtp: tuple[Mailbox, int]
) -> None:
    """api_version = 1: create, the PDF to the presigned upload URL (without the API key),
    the fields, send; the webhook names the document number; the signed PDF comes from
    the download link (without the key). A failed send deletes the document, refunded."""
    srv = _node(tmp_path, documenso, smtp[1], 3600, api_version=1)
    try:
        async for c in http_client(srv):
            resp = await _paid(c, request_body())
            assert resp.status_code == 200, resp.text
            request_id = resp.json()["requestId"]
            document = documenso.only()
            assert document.number is not None and document.status == "PENDING"
            assert document.pdf == PDF2 and document.payload["externalId"] == request_id
            recipients = document.payload["recipients"]
            assert [(r["email"], r["signingOrder"]) for r in recipients] == [
                ("alice@example.org", 1),
                ("bob@example.org", 2),
            ]
            fields = [r["fields"][0] for r in recipients]
            assert {f["page"] for f in fields} == {2} and len({f["positionX"] for f in fields}) == 2
            webhook = f"{srv.url}/api/webhooks/documenso/sign"
            assert documenso.forge(document.id, webhook, "wrong") == 403
            assert documenso.complete(document.id, webhook) == 200
            message = await _mail_to(smtp[0], CUSTOMER)
            assert _attachment(message)[2] == document.signed_pdf
            status = await _status_once_done(c, request_id)
            assert status["status"] == "done"

            documenso.envelopes.clear()
            documenso.fail_distribute = True
            failed = (await _paid(c, request_body())).json()
            assert failed["error_code"] == "SERVICE_ERROR"
            assert failed["refund"]["amount_sats"] == 1000
            assert documenso.envelopes == {}
        assert documenso.key_sent_to_files == 0 and documenso.unauthorized == 0
    finally:
        srv.stop()
