"""send-sms and call (automated) through the gate on provider kind ``twilio``, against a
loopback fake of Twilio's REST API that also sends the signed status callbacks and
inbound messages (tests/fakes/fake_twilio.py): delivery status reaching the payer, forged
callbacks refused, failures refunded, calls billed by their connected minutes, STOP
replies, TwiML escaping, retries, and the rates file."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from mcp import Client

from satsgate.appkeys import ENGINES, HELD_REQUESTS, REFUNDS
from satsgate.config.settings import Settings, load_settings
from satsgate.domain import telephony
from satsgate.domain.media import audio_duration_s, audio_format
from satsgate.engines import CpuRunner, EngineConfigError, EngineDeps, ProviderConfig
from satsgate.engines.delivery import WebhookRequest
from satsgate.engines.messaging import SmsRequest
from satsgate.engines.providers.twilio import TwilioProvider, TwilioSms, say_twiml, signature
from satsgate.services.catalog.pricing import call_msat, sms_msat
from satsgate.services.catalog.rates import FALLBACK
from satsgate.services.comms import deliveries
from tests.conftest import ThreadedServer, make_settings, paid_l402_auth, skip_unless_ci
from tests.fakes.fake_twilio import (
    ACCOUNT_SID,
    API_KEY_SECRET,
    API_KEY_SID,
    AUTH_TOKEN,
    FROM_NUMBER,
    FakeTwilio,
    twilio_signature,
)
from tests.mcp.test_mcp import mcp_url, structured
from tests.payments.test_gateway import assert_envelope

US = "+14155550123"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeTwilio]:
    platform = FakeTwilio()
    yield platform
    platform.stop()


def twilio_settings(data_dir: Path, fake: FakeTwilio) -> Settings:
    providers = {"phone": {
        "kind": "twilio", "base_url": fake.url, "api_key": AUTH_TOKEN,
        "account_sid": ACCOUNT_SID, "from_number": FROM_NUMBER, "timeout_s": 5,
        "voices": {"de-DE": "Google.de-DE-Standard-A"},
    }}  # fmt: skip
    return make_settings(data_dir, providers=providers, engines={"sms": "phone", "voice": "phone"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake: FakeTwilio) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(twilio_settings(tmp_path_factory.mktemp("twilio"), fake))
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ThreadedServer) -> Any:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
        yield c


def webhook_url(server: ThreadedServer) -> str:
    return f"{server.url}/api/webhooks/twilio/phone"


async def paid_post(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


def sent_form(fake: FakeTwilio) -> dict[str, list[str]]:
    form: dict[str, list[str]] = {}
    for name, value in fake.requests[-1]["form"]:
        form.setdefault(name, []).append(value)
    return form


async def wait_status(
    client: httpx.AsyncClient, url: str, until: set[str], within_s: float = 5.0
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        resp = await client.get(url)
        assert resp.status_code == 200, resp.text
        doc: dict[str, Any] = resp.json()
        if doc["status"] in until or asyncio.get_running_loop().time() > deadline:
            return doc
        await asyncio.sleep(0.05)


def plain_fields(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


# -- SMS ------------------------------------------------------------------------------------


async def test_sms_is_sent_and_its_delivery_reaches_the_payer(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    body = {"phone_number": US, "message": "Table for two at 8pm <confirmed> & paid."}
    resp = await paid_post(client, "send-sms", body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    fields = plain_fields(resp.text)
    message_id = fields["message_id"]
    assert re.fullmatch(r"msg_[A-Za-z0-9_-]{24}", message_id)
    assert resp.headers["X-Message-Id"] == message_id
    # Twilio got the message as form fields, Basic-authenticated (the fake checks it).
    form = sent_form(fake)
    assert form["To"] == [US] and form["From"] == [FROM_NUMBER]
    assert form["Body"] == [body["message"]]
    callback = urlsplit(form["StatusCallback"][0])
    assert callback.path == "/api/webhooks/twilio/phone"
    assert parse_qs(callback.query) == {"ref": [message_id]}
    # The status callbacks (signed) move the record to delivered; the payer reads it free.
    status_url = fields["status_url"]
    assert status_url.endswith(f"/api/l402/send-sms?message_id={message_id}")
    doc = await wait_status(client, status_url, {"delivered"})
    assert doc["status"] == "delivered" and doc["final"] is True
    assert doc["message_id"] == message_id and "refund" not in doc
    for _ in range(100):  # the fake notes satsgate's answer just after sending
        if ("delivered", 200) in fake.callback_answers:
            break
        await asyncio.sleep(0.02)
    assert ("delivered", 200) in fake.callback_answers
    # Nothing of the text or the number is kept in the record.
    row = server.call(
        lambda: server.store.db.run_sync(
            lambda c: c.execute(
                "SELECT * FROM deliveries WHERE delivery_id = ?", (message_id,)
            ).fetchone()
        )
    )
    assert row is not None and not any(
        isinstance(v, str) and ("8pm" in v or "4155550123" in v) for v in row
    )
    # The same read over MCP.
    async with Client(mcp_url(server)) as mcp:
        result = await mcp.call_tool("get_sms_status", {"messageId": message_id})
        assert not result.is_error
        assert structured(result)["status"] == "delivered"
        missing = await mcp.call_tool("get_sms_status", {"message_id": "msg_" + "x" * 24})
        assert missing.is_error and structured(missing)["error_code"] == "DELIVERY_NOT_FOUND"
    unknown = await client.get("/api/l402/send-sms?message_id=msg_nothing_here_at_all")
    assert_envelope(unknown, "DELIVERY_NOT_FOUND", 404)


async def test_logs_name_no_provider_address_account_or_key(
    fake: FakeTwilio, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    resp = await paid_post(client, "send-sms", {"phone_number": US, "message": "Logged?"})
    assert resp.status_code == 200, resp.text
    assert fake.requests[-1]["form"]  # the request reached the provider
    # The fake Twilio's own access log is the provider's, not satsgate's.
    text = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiohttp.access")
    port = urlsplit(fake.url).port
    for secret in (fake.url, f":{port}", f"port={port}", ACCOUNT_SID, AUTH_TOKEN):
        assert secret not in text, secret


async def test_undelivered_sms_is_refunded(fake: FakeTwilio, client: httpx.AsyncClient) -> None:
    fake.sms_final.append("undelivered")
    resp = await paid_post(client, "send-sms", {"phone_number": US, "message": "Hello"})
    assert resp.status_code == 200, resp.text
    doc = await wait_status(client, plain_fields(resp.text)["status_url"], {"undelivered"})
    assert doc["status"] == "undelivered" and doc["final"] is True
    # Not delivered: refunded in full, once.
    assert doc["refund"]["amount_sats"] * 1000 == sms_msat(FALLBACK, US)
    again = (await client.get(plain_fields(resp.text)["status_url"])).json()
    assert again["refund"]["charge_id"] == doc["refund"]["charge_id"]


async def test_forged_status_callbacks_are_refused_and_change_nothing(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.callbacks = False
    try:
        resp = await paid_post(client, "send-sms", {"phone_number": US, "message": "Hi"})
    finally:
        fake.callbacks = True
    assert resp.status_code == 200, resp.text
    message_id = plain_fields(resp.text)["message_id"]
    sid = next(iter(reversed(fake.messages)))
    url = f"{webhook_url(server)}?ref={message_id}"
    params = [("MessageSid", sid), ("MessageStatus", "failed"), ("AccountSid", ACCOUNT_SID)]
    async with httpx.AsyncClient(timeout=10) as raw:
        # No signature, a signature with another key, and a genuine signature of another URL.
        unsigned = await raw.post(url, data=dict(params))
        assert unsigned.status_code == 403
        other_key = signature("not-the-token", url, {k: [v] for k, v in params})
        forged = await raw.post(url, data=dict(params), headers={"X-Twilio-Signature": other_key})
        assert forged.status_code == 403
        elsewhere = signature(AUTH_TOKEN, url + "x", {k: [v] for k, v in params})
        moved = await raw.post(url, data=dict(params), headers={"X-Twilio-Signature": elsewhere})
        assert moved.status_code == 403
        # Tampered parameters under a signature of the genuine ones.
        good = signature(AUTH_TOKEN, url, {k: [v] for k, v in params})
        tampered = dict(params) | {"MessageStatus": "delivered"}
        changed = await raw.post(url, data=tampered, headers={"X-Twilio-Signature": good})
        assert changed.status_code == 403
        # A signature of bytes beyond UTF-8 (aiohttp hands them over as surrogates).
        garbled = await raw.post(url, data=dict(params), headers={b"X-Twilio-Signature": b"\xff"})
        assert garbled.status_code == 403
        # An unknown provider name: not found.
        nobody = await raw.post(f"{server.url}/api/webhooks/twilio/other", data=dict(params))
        assert nobody.status_code == 404
    doc = (await client.get(f"/api/l402/send-sms?message_id={message_id}")).json()
    assert doc["status"] == "queued" and doc["final"] is False
    # A genuine one is taken.
    answer = await asyncio.wrap_future(
        asyncio.run_coroutine_threadsafe(fake.post_signed(url, params), fake.loop)
    )
    assert answer.status_code == 200
    doc = (await client.get(f"/api/l402/send-sms?message_id={message_id}")).json()
    assert doc["status"] == "failed" and doc["final"] is True


async def test_status_read_asks_the_provider_when_no_callback_came(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.callbacks = False
    try:
        resp = await paid_post(client, "send-sms", {"phone_number": US, "message": "Ping"})
    finally:
        fake.callbacks = True
    message_id = plain_fields(resp.text)["message_id"]
    # Age the record past the refresh interval: the read fetches the message resource.
    server.call(
        lambda: server.store.db.run_sync(
            lambda c: c.execute(
                "UPDATE deliveries SET updated_at = updated_at - 60 WHERE delivery_id = ?",
                (message_id,),
            )
        )
    )
    doc = (await client.get(f"/api/l402/send-sms?message_id={message_id}")).json()
    assert doc["status"] == "delivered"


@pytest.mark.parametrize(
    ("status", "code", "error_code"),
    [
        (400, 21211, "INVALID_INPUT"),  # not a valid number
        (400, 21408, "SERVICE_ERROR"),  # region not enabled on the account
        (500, None, "SERVICE_ERROR"),
        (429, 20429, "RATE_LIMITED"),  # still busy after the retry
    ],
)
async def test_provider_failure_is_refunded(
    server: ThreadedServer,
    fake: FakeTwilio,
    client: httpx.AsyncClient,
    status: int,
    code: int | None,
    error_code: str,
) -> None:
    fake.fail_next.extend([(status, code)] * 2)
    try:
        before = len(fake.requests)
        resp = await paid_post(client, "send-sms", {"phone_number": US, "message": "Hello"})
    finally:
        fake.fail_next.clear()
    error = assert_envelope(resp, error_code, resp.status_code)
    assert error["refund"]["amount_sats"] * 1000 == sms_msat(FALLBACK, US)
    assert "twilio" not in resp.text.lower() and fake.url not in resp.text
    # 429 is retried once (max_retries 1); a 500 after the request went out never is.
    assert len(fake.requests) - before == (2 if status == 429 else 1)


async def test_a_429_then_success_is_retried_and_sent(
    fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.fail_next.append((429, 20429))
    before = len(fake.requests)
    resp = await paid_post(client, "send-sms", {"phone_number": US, "message": "Retry me"})
    assert resp.status_code == 200, resp.text
    assert len(fake.requests) - before == 2


def opted_out(server: ThreadedServer, number: str) -> bool:
    listed = server.call(lambda: server.store.do_not_contact.opted_out([number]))
    return bool(listed)


async def test_stop_reply_refuses_later_sms_to_that_number_before_any_invoice(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    url = webhook_url(server)
    number = "+14155550999"
    answer = await asyncio.to_thread(fake.send_inbound, url, number, "Stop")
    assert answer.status_code == 200
    assert ET.fromstring(answer.content).tag == "Response"  # TwiML: no reply sent
    assert opted_out(server, number)
    resp = await client.post("/api/l402/send-sms", json={"phone_number": number, "message": "Hi"})
    assert_envelope(resp, "RECIPIENT_OPTED_OUT", 403)
    assert "invoice" not in resp.json() and "www-authenticate" not in resp.headers
    # An ordinary reply opts nobody out; a forged STOP is refused and changes nothing.
    await asyncio.to_thread(fake.send_inbound, url, "+14155550998", "Thanks, see you at 8")
    assert not opted_out(server, "+14155550998")
    async with httpx.AsyncClient(timeout=10) as raw:
        forged = await raw.post(url, data={"MessageSid": "SM" + "0" * 32, "From": "+14155550997",
                                           "To": FROM_NUMBER, "Body": "STOP"})  # fmt: skip
        assert forged.status_code == 403
    assert not opted_out(server, "+14155550997")
    # Twilio's own opt-out classification counts too.
    await asyncio.to_thread(
        fake.send_inbound, url, "+14155550996", "please no more", opt_out_type="STOP"
    )
    assert opted_out(server, "+14155550996")


async def test_twilio_opt_out_error_refunds_and_records_the_opt_out(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.fail_next.append((400, 21610))
    resp = await paid_post(client, "send-sms", {"phone_number": "+14155550777", "message": "Hi"})
    error = assert_envelope(resp, "RECIPIENT_OPTED_OUT", 403)
    assert error["refund"]["amount_sats"] > 0
    assert opted_out(server, "+14155550777")


async def test_flagged_sms_is_held_not_sent_and_sent_on_release(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    before = len(fake.requests)
    body = {"phone_number": US, "message": "Your bank: reply with the verification code now"}
    resp = await paid_post(client, "send-sms", body)
    held = assert_envelope(resp, "CONTENT_POLICY_HELD", resp.status_code)
    assert held["held"] is True and held["appeal_sats"] == 1 and "refund" not in held
    assert len(fake.requests) == before  # nothing reached the provider
    # The operator releases it: the handler runs again from the stored request and sends.
    outcome = server.call(lambda: server.app[HELD_REQUESTS].release(held["hold_id"]))
    assert outcome.status == "released", outcome
    assert len(fake.requests) == before + 1
    assert sent_form(fake)["Body"] == [body["message"]]
    message_id = plain_fields(outcome.result["content"])["message_id"]
    doc = await wait_status(client, f"/api/l402/send-sms?message_id={message_id}", {"delivered"})
    assert doc["status"] == "delivered"


async def test_flagged_call_is_held_not_placed(fake: FakeTwilio, client: httpx.AsyncClient) -> None:
    before = len(fake.requests)
    body = {"phone_number": US, "message": "This is your bank. Tell us your PIN code to unlock."}
    resp = await paid_post(client, "call", body)
    assert_envelope(resp, "CONTENT_POLICY_HELD", resp.status_code)
    assert len(fake.requests) == before


async def test_bad_input_is_refused_before_any_invoice(client: httpx.AsyncClient) -> None:
    for body in (
        {"phone_number": "4155550123", "message": "Hi"},
        {"phone_number": US, "message": "x" * 121},
        {"phone_number": "+99912345678", "message": "Hi"},  # no route
    ):
        resp = await client.post("/api/l402/send-sms", json=body)
        assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert "invoice" not in resp.json()


# -- calls ----------------------------------------------------------------------------------


async def test_call_speaks_the_message_and_bills_the_connected_minutes(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.call_outcome.append(("completed", 75))  # 1 min 15 s: two started minutes
    message = 'Ihr Tisch ist bereit </Say><Play>http://evil</Play> & "danke"'
    body = {"phone_number": US, "message": message, "language": "de-DE", "repeat": 2,
            "duration_minutes": 3}  # fmt: skip
    resp = await paid_post(client, "call", body)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    call_id = answer["call_id"]
    assert answer["success"] is True and call_id.startswith("call_")
    assert answer["max_duration_s"] == 180
    form = sent_form(fake)
    assert form["To"] == [US] and form["From"] == [FROM_NUMBER]
    assert form["TimeLimit"] == ["180"]
    assert set(form["StatusCallbackEvent"]) == {"initiated", "ringing", "answered", "completed"}
    # The TwiML says exactly the caller's text, escaped: one Say, no injected Play.
    root = ET.fromstring(form["Twiml"][0])
    assert [child.tag for child in root] == ["Pause", "Say", "Hangup"]
    assert "MachineDetection" not in form
    say = root[1]
    assert say.text == message
    assert say.attrib == {"language": "de-DE", "voice": "Google.de-DE-Standard-A", "loop": "2"}
    doc = await wait_status(client, answer["status_url"], {"completed"})
    assert doc["status"] == "completed" and doc["final"] is True
    assert doc["duration_s"] == 75 and doc["paid_minutes"] == 3 and doc["billed_minutes"] == 2
    paid = call_msat(FALLBACK, US, 3)
    assert doc["charged_sats"] * 1000 == pytest.approx(paid * 2 / 3, abs=1)
    assert doc["refund"]["amount_sats"] * 1000 == pytest.approx(paid / 3, abs=1000)
    assert doc["refund"]["lnurl_withdraw"]
    # Read again: settled once, the same refund.
    again = (await client.get(answer["status_url"])).json()
    assert again["refund"]["charge_id"] == doc["refund"]["charge_id"]
    async with Client(mcp_url(server)) as mcp:
        result = await mcp.call_tool("get_call_status", {"callId": call_id})
        assert structured(result)["billed_minutes"] == 2


async def test_a_long_message_is_fetched_by_the_call_from_the_webhook_route(
    fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    message = "R&D&Co&" * 286  # 2002 characters; escaped (&amp;) well over 4000
    resp = await paid_post(client, "call", {"phone_number": US, "message": message[:2000]})
    assert resp.status_code == 200, resp.text
    form = sent_form(fake)
    assert "Twiml" not in form and form["Method"] == ["POST"]
    assert urlsplit(form["Url"][0]).path == "/api/webhooks/twilio/phone"
    await wait_status(client, resp.json()["status_url"], {"completed"})
    call = fake.calls[next(iter(reversed(fake.calls)))]
    root = ET.fromstring(call["_twiml"])
    assert root[1].tag == "Say" and root[1].text == message[:2000]


async def test_a_long_message_is_fetched_from_the_instance_that_dialed(
    fake: FakeTwilio, tmp_path: Path
) -> None:
    """With several instances, the TwiML a call fetches lives in the memory of the one
    that dialed: its URL is that instance's own address (instance_base_url), whose
    signature is checked there, while status callbacks go to the shared address."""
    shared = twilio_settings(tmp_path, fake)
    own = f"http://localhost:{shared.port}"  # the same server, by another name
    server = ThreadedServer(replace(shared, instance_base_url=own))
    message = "R&D&Co&" * 286
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            resp = await paid_post(client, "call", {"phone_number": US, "message": message[:2000]})
            assert resp.status_code == 200, resp.text
            form = sent_form(fake)
            assert form["Url"][0].startswith(f"{own}/api/webhooks/twilio/phone?")
            assert form["StatusCallback"][0].startswith(f"{server.url}/api/webhooks/twilio/")
            await wait_status(client, resp.json()["status_url"], {"completed"})
        call = fake.calls[next(iter(reversed(fake.calls)))]
        root = ET.fromstring(call["_twiml"])
        assert root[1].tag == "Say" and root[1].text == message[:2000]
    finally:
        server.stop()


async def test_unanswered_call_is_refunded_in_full(
    fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.call_outcome.append(("no-answer", 0))
    body = {"phone_number": US, "message": "Your parcel has arrived.", "duration_minutes": 2}
    resp = await paid_post(client, "call", body)
    assert resp.status_code == 200, resp.text
    doc = await wait_status(client, resp.json()["status_url"], {"no-answer"})
    assert doc["status"] == "no-answer" and doc["billed_minutes"] == 0
    assert doc["charged_sats"] == 0
    assert doc["refund"]["amount_sats"] * 1000 == call_msat(FALLBACK, US, 2)


async def test_call_the_provider_refuses_is_refunded(
    fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.fail_next.append((400, 21215))  # geographic permission not enabled
    resp = await paid_post(client, "call", {"phone_number": US, "message": "Hello"})
    error = assert_envelope(resp, "SERVICE_ERROR", 502)
    assert error["refund"]["amount_sats"] * 1000 == call_msat(FALLBACK, US, 1)


async def test_the_sweep_settles_a_call_whose_webhooks_never_came(
    server: ThreadedServer, fake: FakeTwilio, client: httpx.AsyncClient
) -> None:
    fake.callbacks = False
    fake.call_outcome.append(("completed", 30))
    try:
        body = {"phone_number": US, "message": "Reminder", "duration_minutes": 2}
        resp = await paid_post(client, "call", body)
    finally:
        fake.callbacks = True
    assert resp.status_code == 200, resp.text
    call_id = resp.json()["call_id"]
    app = server.app
    env = deliveries.DeliveryEnv(server.store.deliveries, server.store.payments.get, app[REFUNDS])
    later = int(time.time()) + deliveries.SWEEP_AFTER_S + 1
    finished = server.call(lambda: deliveries.sweep(env, app[ENGINES], now=later))
    assert finished >= 1
    doc = (await client.get(f"/api/l402/call?call_id={call_id}")).json()
    assert doc["status"] == "completed" and doc["billed_minutes"] == 1
    assert doc["refund"]["amount_sats"] * 1000 == pytest.approx(
        call_msat(FALLBACK, US, 2) / 2, abs=1000
    )


async def test_call_plays_the_nodes_own_speech_when_configured(
    tmp_path: Path, fake: FakeTwilio
) -> None:
    if not (shutil.which("espeak-ng") and shutil.which("ffmpeg")):
        skip_unless_ci("espeak-ng and ffmpeg speak the node's own audio")
    providers = {"phone": {
        "kind": "twilio", "base_url": fake.url, "api_key": AUTH_TOKEN,
        "account_sid": ACCOUNT_SID, "from_number": FROM_NUMBER, "speech": "node",
        "machine_detection": True,
    }}  # fmt: skip
    srv = ThreadedServer(
        make_settings(tmp_path / "node-speech", providers=providers, engines={"voice": "phone"})
    )
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            body = {"phone_number": US, "message": "Guten Abend, Ihr Tisch ist bereit.",
                    "language": "de-DE", "repeat": 2}  # fmt: skip
            resp = await paid_post(client, "call", body)
            assert resp.status_code == 200, resp.text
            root = ET.fromstring(sent_form(fake)["Twiml"][0])
            assert [child.tag for child in root] == ["Pause", "Play", "Hangup"]
            assert root[1].attrib == {"loop": "2"}
            assert sent_form(fake)["MachineDetection"] == ["DetectMessageEnd"]
            audio_url = str(root[1].text)
            assert audio_url.startswith(srv.url)
            audio = (await client.get(audio_url)).content
            assert audio_format(audio) == "mp3"
            assert 1.0 < audio_duration_s(audio) < 10.0
    finally:
        srv.stop()


def test_twiml_is_escaped_and_long_text_stays_valid() -> None:
    twiml = say_twiml("a\x00b <c> & d]]>", language="en-US", voice=None, repeat=1, audio_url=None)
    root = ET.fromstring(twiml)
    assert root[1].text == "a b <c> & d]]>"
    played = say_twiml(
        "x", language=None, voice=None, repeat=3, audio_url="https://n/f.mp3?a=1&b=2"
    )
    assert ET.fromstring(played)[1].text == "https://n/f.mp3?a=1&b=2"


def test_signature_matches_the_documented_vector() -> None:
    params = {"CallSid": ["CA1234567890ABCDE"], "Caller": ["+14158675309"], "Digits": ["1234"],
              "From": ["+14158675309"], "To": ["+18005551212"]}  # fmt: skip
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    assert signature("12345", url, params) == "RSOYDt4T1cUTdK1PDd93/VVr8B8="


# -- rates file -----------------------------------------------------------------------------


def test_rates_file_replaces_the_table_and_is_checked_at_start(tmp_path: Path) -> None:
    good = tmp_path / "rates.csv"
    good.write_text(
        "prefix,country,name,sms_sats,call_sats_per_minute\n"
        "# our own\n1,US,United States,21,33\n44,GB,United Kingdom,41,42\n"
    )
    settings = load_settings(overrides={"telephony": {"rates_file": str(good)}})
    table = telephony.load_rates_file(settings.telephony["rates_file"])
    assert table.destination("+14155550123").sms_sats == 21
    assert table.max_prefix == 2
    with pytest.raises(telephony.NoRoute):
        table.destination("+4915112345678")  # Germany is not in this file
    # The file's table is a value of its own: the built-in one still serves Germany.
    assert telephony.BUILTIN.destination("+4915112345678").country == "DE"
    for text, fault in (
        ("prefix,country\n1,US\n", "first line"),
        ("prefix,country,name,sms_sats,call_sats_per_minute\n1,US,X,0,30\n", "sms_sats"),
        ("prefix,country,name,sms_sats,call_sats_per_minute\n1,US,X,1,3\n1,CA,Y,1,3\n", "twice"),
        ("prefix,country,name,sms_sats,call_sats_per_minute\n01,US,X,1,3\n", "prefix"),
        ("prefix,country,name,sms_sats,call_sats_per_minute\n1,usa,X,1,3\n", "country"),
    ):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(ValueError, match=fault):
            load_settings(overrides={"telephony": {"rates_file": str(bad)}})
    with pytest.raises(ValueError, match="cannot read"):
        load_settings(overrides={"telephony": {"rates_file": str(tmp_path / "missing.csv")}})


def test_provider_configuration_is_checked_at_start() -> None:
    deps = EngineDeps(Settings(), CpuRunner(ThreadPoolExecutor(1), 1))
    good = {"account_sid": ACCOUNT_SID, "from_number": FROM_NUMBER}

    def build(api_key: str = AUTH_TOKEN, **options: Any) -> TwilioProvider:
        config = ProviderConfig(name="phone", kind="twilio", api_key=api_key, options=options)
        return TwilioProvider(config, deps)

    for options, api_key, fault in (
        ({"from_number": FROM_NUMBER}, AUTH_TOKEN, "account_sid"),
        ({**good, "account_sid": "AC123"}, AUTH_TOKEN, "account_sid"),
        (good, "", "Auth Token"),
        ({"account_sid": ACCOUNT_SID}, AUTH_TOKEN, "from_number"),
        ({**good, "from_number": "4155550100"}, AUTH_TOKEN, "E.164"),
        ({**good, "api_key_sid": "SK" + "0" * 32}, "secret", "webhook_token"),
        ({**good, "max_retries": 5}, AUTH_TOKEN, "max_retries"),
        ({**good, "speech": "loud"}, AUTH_TOKEN, "speech"),
        ({**good, "form_number": FROM_NUMBER}, AUTH_TOKEN, "unknown keys"),
    ):
        with pytest.raises(EngineConfigError, match=fault):
            build(api_key, **options)
    provider = build(**good)
    assert provider.engine("sms") is not None and provider.engine("voice") is not None
    assert provider.engine("ocr") is None
    # A Messaging Service sends SMS; calls still need a number of their own.
    service_only = build(account_sid=ACCOUNT_SID, messaging_service_sid="MG" + "0" * 32)
    assert service_only.engine("sms") is not None
    with pytest.raises(EngineConfigError, match="from_number"):
        service_only.engine("voice")


async def test_api_key_auth_sends_and_auth_token_verifies_webhooks(fake: FakeTwilio) -> None:
    deps = EngineDeps(
        Settings(base_url="https://pay.example.com"), CpuRunner(ThreadPoolExecutor(1), 1)
    )
    config = ProviderConfig(
        name="phone", kind="twilio", base_url=fake.url, api_key=API_KEY_SECRET,
        options={"account_sid": ACCOUNT_SID, "from_number": FROM_NUMBER,
                 "api_key_sid": API_KEY_SID, "webhook_token": AUTH_TOKEN},
    )  # fmt: skip
    provider = TwilioProvider(config, deps)
    try:
        sms = provider.engine("sms")
        assert isinstance(sms, TwilioSms)
        fake.callbacks = False
        try:
            sent = await sms.send_sms(SmsRequest(US, "Key auth", "msg_test_reference_1234"))
        finally:
            fake.callbacks = True
        assert sent.message_id.startswith("SM") and sent.status == "queued"
        callback = sent_form(fake)["StatusCallback"][0]
        assert callback == (
            "https://pay.example.com/api/webhooks/twilio/phone?ref=msg_test_reference_1234"
        )
        params = [("MessageSid", sent.message_id), ("MessageStatus", "delivered")]
        body = urlencode(params).encode()
        headers = {"x-twilio-signature": twilio_signature(AUTH_TOKEN, callback, params)}
        events = await provider.receive_events(WebhookRequest(callback, "POST", headers, body))
        assert events.status == 200
        assert [(u.provider_ref, u.status, u.reference) for u in events.updates] == [
            (sent.message_id, "delivered", "msg_test_reference_1234")
        ]
        # Signed with the key's secret instead of the Auth Token: refused.
        wrong = {"x-twilio-signature": twilio_signature(API_KEY_SECRET, callback, params)}
        refused = await provider.receive_events(WebhookRequest(callback, "POST", wrong, body))
        assert refused.status == 403 and not refused.updates
        # The default port spelled out is the same URL (Twilio's SDK accepts both).
        ported = callback.replace("pay.example.com", "pay.example.com:443")
        same = await provider.receive_events(WebhookRequest(ported, "POST", headers, body))
        assert same.status == 200
    finally:
        await provider.aclose()
