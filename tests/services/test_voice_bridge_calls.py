"""The voice bridge end to end on loopback: satsgate dials through a fake Twilio
(tests/fakes/fake_twilio_media.py: the REST API, signed status callbacks, and a Media Streams
WebSocket it opens to satsgate as Twilio does), the callee's espeak-ng speech comes back
as transcript events (local Whisper), our say reaches the callee as mu-law audio of the
right length, and the deposit is settled once however the call ends."""

from __future__ import annotations

import asyncio
import base64
import math
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import aiohttp
import httpx
import pytest
from mcp import Client

from satsgate.appkeys import VOICE_BRIDGE
from satsgate.engines.providers import PROVIDER_KINDS
from tests.conftest import (
    ThreadedServer,
    challenge,
    free_port,
    make_settings,
    paid_l402_auth,
    skip_unless_ci,
    until,
)
from tests.fakes.fake_lnurlp import FakeLightningAddress
from tests.fakes.fake_twilio_media import AUTH_TOKEN, FakeTwilio, twilio_signature
from tests.ledger_check import assert_ledger_balances
from tests.mcp.test_mcp import first_text, mcp_url, structured
from tests.payments.test_gateway import assert_envelope
from tests.payments.test_sessions import Client as SessionClient
from tests.pg_cluster import PgCluster

OPEN = "voice-bridge-open"
SAY = "/api/l402/voice-bridge/say"
POLL = "/api/l402/voice-bridge/poll"
END = "/api/l402/voice-bridge/end"
US = "+14155550123"
CALLEE_SAYS = "Hello, I will call you back tomorrow."


def _mulaw_speech(text: str) -> bytes:
    wav = subprocess.run(["espeak-ng", "-w", "/dev/stdout", text], capture_output=True, check=True)
    out = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", "pipe:0", "-ar", "8000", "-ac", "1", "-f", "mulaw",
         "pipe:1"],
        input=wav.stdout, capture_output=True, check=True,
    )  # fmt: skip
    return out.stdout


def _needs_tools() -> None:
    for tool in ("espeak-ng", "ffmpeg"):
        if shutil.which(tool) is None:
            skip_unless_ci(f"{tool} is not installed")


@pytest.fixture(scope="module")
def twilio() -> Iterator[FakeTwilio]:
    _needs_tools()
    # The callee speaks once, after half a second, then stays silent.
    fake = FakeTwilio(callee_audio=b"\xff" * 4000 + _mulaw_speech(CALLEE_SAYS))
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def wallet() -> Iterator[FakeLightningAddress]:
    w = FakeLightningAddress()
    yield w
    w.stop()


@pytest.fixture(scope="module")
def bridge_node(
    tmp_path_factory: pytest.TempPathFactory, twilio: FakeTwilio, wallet: FakeLightningAddress
) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("bridge"),
        providers={"twilio": twilio.provider_table()},
        engines={"voice_bridge": "twilio"},
        lightning_address_hosts=wallet.hosts,
    )
    srv = ThreadedServer(settings, PROVIDER_KINDS)
    yield srv
    srv.stop()


@pytest.fixture
async def node(bridge_node: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=bridge_node.url, timeout=60) as client:
        yield client
    assert_ledger_balances(bridge_node)


async def _open(node: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"phoneNumber": US, "durationMinutes": 2, **extra}
    auth = await paid_l402_auth(node, OPEN, body)
    resp = await node.post(f"/api/l402/{OPEN}", json=body, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    opened: dict[str, Any] = resp.json()
    return opened


async def _events_until(
    node: httpx.AsyncClient, session_id: str, done: Any, within_s: float = 30
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Poll with the cursor until ``done(events)``; every event seen, and the last poll."""
    events: list[dict[str, Any]] = []
    cursor = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        resp = await node.get(POLL, params={"sessionId": session_id, "cursor": cursor})
        assert resp.status_code == 200, resp.text
        polled = resp.json()
        assert polled["untrusted_output"] is True  # the events are the far end's words
        assert [e["seq"] for e in polled["events"]] == sorted(e["seq"] for e in polled["events"])
        assert all(e["seq"] > cursor for e in polled["events"])
        events += polled["events"]
        cursor = polled["nextCursor"]
        if done(events):
            return events, polled
        assert loop.time() < deadline, f"no such event in {within_s} s: {events}"
        await asyncio.sleep(0.3)


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def _refunds(srv: ThreadedServer, payment_hash_or_id: str) -> list[Any]:
    return list(srv.call(lambda: srv.store.refunds.for_payment(payment_hash_or_id)))


def _payment_id(srv: ThreadedServer, session_id: str) -> str:
    row = srv.call(lambda: srv.store.voice_bridge.get(session_id))
    return str(row.payment_id)


async def test_a_call_transcribes_speaks_and_settles_once(
    node: httpx.AsyncClient, bridge_node: ThreadedServer, twilio: FakeTwilio
) -> None:
    opened = await _open(node)
    assert opened["success"] is True
    assert opened["activeCodec"] == "mulaw_8000" and opened["hdAvailable"] is False
    assert opened["maxDurationSec"] >= 120 and opened["language"] == "en-US"
    per_minute = opened["perMinuteSats"]
    assert opened["depositSats"] >= 2 * per_minute
    session = opened["sessionId"]
    call = twilio.calls[opened["callId"]]
    assert call.to == US and call.time_limit is not None
    assert call.stream_url.startswith(bridge_node.url.replace("http://", "ws://"))
    assert set(call.status_events) == {"initiated", "ringing", "answered", "completed"}

    # The callee's words come back as a transcript (Whisper on the 8 kHz stream).
    events, polled = await _events_until(
        node, session, lambda ev: any(e["type"] == "transcript" for e in ev)
    )
    assert polled["state"] == "open" and polled["callId"] == opened["callId"]
    assert _types(events)[:3] == ["dialing", "ringing", "answered"], events
    transcript = " ".join(e["text"] for e in events if e["type"] == "transcript").lower()
    assert "tomorrow" in transcript and "call" in transcript, transcript
    assert all(isinstance(e["ts_ms"], int) and e["ts_ms"] > 1_700_000_000_000 for e in events)
    assert ("ringing", 204) in call.callbacks and ("in-progress", 204) in call.callbacks
    # Over MCP the same events; what the callee said is fenced as untrusted content.
    async with Client(mcp_url(bridge_node)) as mcp:
        result = await mcp.call_tool("poll_voice_bridge", {"sessionId": session})
    assert not result.is_error
    assert structured(result)["events"][: len(events)] == events
    assert structured(result)["untrusted_output"] is True
    assert "<untrusted-content>" in first_text(result) and "tomorrow" in first_text(result)

    # Text is spoken into the call: mu-law at 8000 bytes a second, as long as the speech.
    # The line echoes it back: recognition is muted while it plays, so it is not heard.
    twilio.echo = True
    said_text = "Thank you. Goodbye for now."
    resp = await node.post(SAY, json={"sessionId": session, "text": said_text})
    assert resp.status_code == 200, resp.text
    sent = resp.json()["bytesSent"]
    expected = len(_mulaw_speech(said_text))
    assert abs(sent - expected) <= 800, (sent, expected)  # within 0.1 s of espeak's own
    await twilio.wait_for(lambda: "say-1" in call.marks)
    assert len(call.received) == sent
    assert 1.0 < len(call.received) / 8000 < 4.0
    assert call.frames_in[-1] == "mark" and set(call.frames_in[:-1]) == {"media"}
    await twilio.wait_for(lambda: call.echoed == len(call.received))
    twilio.echo = False
    # The callee speaks again: utterances are transcribed in order, so an echo heard
    # would come before this.
    twilio.callee_says(call.sid, b"\xff" * 8000 + _mulaw_speech("Okay, see you next week."))
    events, _ = await _events_until(node, session, lambda ev: _types(ev).count("transcript") == 2)
    heard = [e["text"].lower() for e in events if e["type"] == "transcript"]
    assert "tomorrow" in heard[0] and "next week" in heard[1], heard  # never our own voice
    assert next(e["text"] for e in events if e["type"] == "speaking") == said_text

    # Caller audio in pcm_l16_16000 is converted: 0.5 s of a tone is 4000 mu-law bytes.
    tone = b"".join(
        int(8000 * math.sin(2 * math.pi * 440 * n / 16000)).to_bytes(2, "little", signed=True)
        for n in range(8000)
    )
    resp = await node.post(
        SAY,
        json={
            "sessionId": session,
            "audioBase64": base64.b64encode(tone).decode(),
            "encoding": "pcm_l16_16000",
        },
    )
    assert resp.status_code == 200, resp.text
    assert abs(resp.json()["bytesSent"] - 4000) <= 160
    await twilio.wait_for(lambda: "say-2" in call.marks)
    assert len(call.received) == sent + resp.json()["bytesSent"]
    await _events_until(node, session, lambda ev: _types(ev).count("spoken") == 2, within_s=10)

    # End twice at once, and once more: one settlement, one refund, one hang-up.
    ends = await asyncio.gather(
        node.post(END, json={"sessionId": session}), node.post(END, json={"sessionId": session})
    )
    again = await node.post(END, json={"session_id": session})
    bodies = [r.json() for r in (*ends, again)]
    assert all(r.status_code == 200 for r in (*ends, again)), bodies
    assert bodies[0] == bodies[1] == bodies[2]
    settled = bodies[0]
    assert settled["usedSats"] == math.ceil(per_minute)  # under a minute: the minimum minute
    assert settled["depositSats"] == opened["depositSats"]
    assert settled["usedSats"] + settled["refundableSats"] == settled["depositSats"]
    assert 0 < settled["elapsedSec"] < 60
    assert settled["refund"]["amount_sats"] == settled["refundableSats"]
    assert settled["refund"]["lnurl_withdraw"].startswith("LNURL")
    assert "tomorrow" in settled["finalTranscript"].lower()
    assert settled["untrusted_output"] is True
    refunds = _refunds(bridge_node, _payment_id(bridge_node, session))
    assert [r.amount_msat for r in refunds] == [settled["refundableSats"] * 1000]
    await twilio.wait_for(lambda: call.status == "completed")
    assert twilio.requests.count(f"update {call.sid} completed") == 1
    _, polled = await _events_until(node, session, lambda ev: "ended" in _types(ev))
    assert polled["state"] == "ended"

    # An ended session takes no more speech; poll and end still answer.
    resp = await node.post(SAY, json={"sessionId": session, "text": "Hello?"})
    assert_envelope(resp, "VOICE_BRIDGE_SESSION_NOT_FOUND", 404)


async def test_the_callee_hanging_up_ends_and_settles_once(
    node: httpx.AsyncClient, bridge_node: ThreadedServer, twilio: FakeTwilio
) -> None:
    opened = await _open(node, durationMinutes=3)
    session = opened["sessionId"]
    call = twilio.calls[opened["callId"]]
    await _events_until(node, session, lambda ev: "answered" in _types(ev))
    # The callee hangs up right after speaking, before the pause that ends an utterance.
    await twilio.wait_for(lambda: call.spoken >= len(call.speech) > 0)
    twilio.drop(opened["callId"])
    events, polled = await _events_until(node, session, lambda ev: "ended" in _types(ev))
    assert polled["state"] == "ended"
    assert _types(events).count("ended") == 1
    assert _types(events)[-2:] == ["transcript", "ended"], events  # the last words, then
    assert "tomorrow" in events[-2]["text"].lower()
    payment_id = _payment_id(bridge_node, session)
    await twilio.wait_for(lambda: len(_refunds(bridge_node, payment_id)) == 1)
    end = await node.post(END, json={"sessionId": session})
    assert end.status_code == 200, end.text
    settled = end.json()
    assert settled["usedSats"] == math.ceil(opened["perMinuteSats"])
    assert settled["refundableSats"] == settled["depositSats"] - settled["usedSats"]
    assert "tomorrow" in settled["finalTranscript"].lower()
    assert [r.amount_msat for r in _refunds(bridge_node, payment_id)] == [
        settled["refundableSats"] * 1000
    ]
    # The call had ended: nobody asked Twilio to hang it up.
    assert not any(r.startswith(f"update {opened['callId']}") for r in twilio.requests)


async def test_strangers_cannot_reach_a_session(
    node: httpx.AsyncClient, bridge_node: ThreadedServer, twilio: FakeTwilio
) -> None:
    opened = await _open(node, durationMinutes=1, sttEnabled=False)
    session = opened["sessionId"]
    call = twilio.calls[opened["callId"]]
    await _events_until(node, session, lambda ev: "answered" in _types(ev))

    # A WebSocket with a wrong token, and a second one with the right token, are refused.
    base = bridge_node.url.replace("http://", "ws://")
    async with aiohttp.ClientSession() as http:
        for url in (f"{base}/api/voice-bridge/media/not-the-token", call.stream_url):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url)
            assert refused.value.status == 403

    # A forged status callback (wrong signature) changes nothing.
    status_url = call.status_callback
    form = {"CallSid": call.sid, "CallStatus": "completed", "AccountSid": "AC" + "0" * 32}
    forged = twilio_signature("not-the-auth-token", status_url, {k: [v] for k, v in form.items()})
    resp = await node.post(status_url, data=form, headers={"X-Twilio-Signature": forged})
    assert resp.status_code == 403
    resp = await node.post(status_url, data=form)  # unsigned
    assert resp.status_code == 403
    # Signed for another URL (another session's token): refused too.
    other = status_url.rsplit("/", 1)[0] + "/someone-else"
    signed = twilio_signature(AUTH_TOKEN, other, {k: [v] for k, v in form.items()})
    resp = await node.post(other, data=form, headers={"X-Twilio-Signature": signed})
    assert resp.status_code == 404
    resp = await node.get(POLL, params={"sessionId": session})
    assert resp.json()["state"] == "open"

    # A genuine 'completed' callback ends it.
    genuine = twilio_signature(AUTH_TOKEN, status_url, {k: [v] for k, v in form.items()})
    resp = await node.post(status_url, data=form, headers={"X-Twilio-Signature": genuine})
    assert resp.status_code == 204
    _, polled = await _events_until(node, session, lambda ev: "ended" in _types(ev))
    assert polled["state"] == "ended"


async def test_the_deposit_running_out_ends_the_call(
    node: httpx.AsyncClient, bridge_node: ThreadedServer, twilio: FakeTwilio
) -> None:
    twilio.ring_s = 1.0
    try:
        opened = await _open(node, durationMinutes=1, sttEnabled=False)
        session = opened["sessionId"]
        # The deposit's clock, shortened to 2 s for the test (the open made it 60 s).
        bridge_node.call(
            lambda: bridge_node.store.db.run_sync(
                lambda c: c.execute(
                    "UPDATE voice_bridge_sessions SET max_duration_s = 2 WHERE session_id = ?",
                    (session,),
                )
            )
        )
    finally:
        twilio.ring_s = 0.2
    events, polled = await _events_until(node, session, lambda ev: "ended" in _types(ev))
    assert polled["state"] == "ended"
    assert events[-1]["text"] == "deposit used up"
    answered = next(e["ts_ms"] for e in events if e["type"] == "answered")
    assert 1900 <= events[-1]["ts_ms"] - answered < 4000
    await twilio.wait_for(lambda: twilio.calls[opened["callId"]].status == "completed")
    assert f"update {opened['callId']} completed" in twilio.requests
    settled = (await node.post(END, json={"sessionId": session})).json()
    assert settled["usedSats"] == settled["depositSats"]  # one minute: the whole deposit
    assert settled["refundableSats"] == 0 and settled["refund"] is None
    assert _refunds(bridge_node, _payment_id(bridge_node, session)) == []


async def test_a_restart_ends_and_settles_a_live_session(tmp_path: Any, twilio: FakeTwilio) -> None:
    settings = make_settings(
        tmp_path / "data",
        providers={"twilio": twilio.provider_table()},
        engines={"voice_bridge": "twilio"},
        # On PostgreSQL the crashed instance (this process, still running) is gone once
        # its lease has run out; on SQLite at once, by the store's lock.
        instance_lease_s=3.0,
    )
    first = ThreadedServer(settings, PROVIDER_KINDS)
    async with httpx.AsyncClient(base_url=first.url, timeout=60) as client:
        opened = await _open(client, sttEnabled=False)
        await _events_until(client, opened["sessionId"], lambda ev: "answered" in _types(ev))
    first.crash()
    second = ThreadedServer(replace(settings, port=free_port()), PROVIDER_KINDS)
    try:
        async with httpx.AsyncClient(base_url=second.url, timeout=60) as client:
            session = opened["sessionId"]
            events, polled = await _events_until(client, session, lambda ev: "ended" in _types(ev))
            assert polled["state"] == "ended" and events[-1]["text"] == "service restarted"
            settled = (await client.post(END, json={"sessionId": session})).json()
            assert settled["usedSats"] == math.ceil(opened["perMinuteSats"])
            assert settled["refundableSats"] == settled["depositSats"] - settled["usedSats"] > 0
            refunds = _refunds(second, _payment_id(second, session))
            assert [r.amount_msat for r in refunds] == [settled["refundableSats"] * 1000]
        assert f"update {opened['callId']} completed" in twilio.requests  # hung up
        assert_ledger_balances(second)
    finally:
        second.stop()


async def test_a_call_twilio_refuses_is_refunded_in_full(
    node: httpx.AsyncClient, bridge_node: ThreadedServer, twilio: FakeTwilio
) -> None:
    refused = "+14155550199"
    twilio.refuse_to.add(refused)
    body = {"phoneNumber": refused, "durationMinutes": 2}
    price = (await challenge(node, OPEN, body))["amountSats"]
    auth = await paid_l402_auth(node, OPEN, body)
    resp = await node.post(f"/api/l402/{OPEN}", json=body, headers={"Authorization": auth})
    assert resp.status_code >= 400, resp.text
    error = resp.json()
    assert "twilio" not in error["error"].lower()
    refund = error["refund"]
    assert refund["amount_sats"] == price > 0  # the whole deposit
    # Exactly one refund: the failed session is settled as nothing, never refunded again.
    rows = bridge_node.call(
        lambda: bridge_node.store.db.run_sync(
            lambda c: c.execute(
                "SELECT payment_id, state, settled FROM voice_bridge_sessions"
                " WHERE end_reason = 'dial failed'"
            ).fetchall()
        )
    )
    assert len(rows) == 1 and rows[0][1:] == ("ended", 1)
    assert [r.amount_msat // 1000 for r in _refunds(bridge_node, rows[0][0])] == [
        refund["amount_sats"]
    ]


async def test_the_unused_deposit_goes_to_the_refund_address(
    node: httpx.AsyncClient,
    bridge_node: ThreadedServer,
    twilio: FakeTwilio,
    wallet: FakeLightningAddress,
) -> None:
    before = len(wallet.issued)
    opened = await _open(node, sttEnabled=False, refundAddress=wallet.address("bob"))
    assert opened["sttEnabled"] is False
    session = opened["sessionId"]
    call = twilio.calls[opened["callId"]]
    await _events_until(node, session, lambda ev: "answered" in _types(ev))
    # Another language and voice, by description (the global text-to-speech tier).
    spanish = {"text": "Hola, buenos días.", "language": "es", "voiceDescription": "female"}
    resp = await node.post(SAY, json={"sessionId": session, **spanish})
    assert resp.status_code == 200, resp.text
    await twilio.wait_for(lambda: "say-1" in call.marks)
    assert len(call.received) == resp.json()["bytesSent"] > 4000
    await twilio.wait_for(lambda: call.spoken >= len(call.speech) > 0)
    settled = (await node.post(END, json={"sessionId": session})).json()
    assert settled["finalTranscript"] == ""  # sttEnabled false: the callee is not transcribed
    refundable = settled["depositSats"] - math.ceil(opened["perMinuteSats"])
    assert settled["refundableSats"] == refundable > 0
    refund = settled["refund"]
    assert refund["refund_address"] == "bob@wallet.test"
    assert refund["status"] == "paid" and refund["amount_sats"] == refundable
    assert "lnurl_withdraw" not in refund  # paid already: no link to claim
    issued = wallet.issued[before:]
    assert [(i.name, i.amount_msat) for i in issued] == [("bob", refundable * 1000)]
    outgoing = (await node.get("/api/dev/outgoing")).json()["payments"]
    assert [p["amount_msat"] for p in outgoing if p["bolt11"] == issued[0].bolt11] == [
        refundable * 1000
    ]
    again = (await node.post(END, json={"sessionId": session})).json()
    assert again == settled and len(wallet.issued) == before + 1  # paid once


async def test_a_callee_who_asks_not_to_be_called_again_is_not_dialed_again(
    node: httpx.AsyncClient, twilio: FakeTwilio
) -> None:
    number = "+14155550142"
    twilio.says_to[number] = b"\xff" * 2000 + _mulaw_speech("Please do not call me again.")
    opened = await _open(node, phoneNumber=number, durationMinutes=1)
    session = opened["sessionId"]
    events, _ = await _events_until(node, session, lambda ev: "transcript" in _types(ev))
    assert "call me again" in events[-1]["text"].lower()
    await node.post(END, json={"sessionId": session})
    # The number is on the do-not-contact list: refused before any invoice.
    resp = await node.post(f"/api/l402/{OPEN}", json={"phoneNumber": number})
    assert_envelope(resp, "RECIPIENT_OPTED_OUT", 403)
    assert "invoice" not in resp.json()


async def test_a_payment_session_cannot_pay_the_deposit(
    node: httpx.AsyncClient, twilio: FakeTwilio
) -> None:
    """The deposit is settled against a payment of its own: a session's bearer call is
    refused after the debit and credited back, and nobody is dialed."""
    calls_before = len(twilio.calls)
    body = {"phoneNumber": US, "durationMinutes": 1}
    price = (await challenge(node, OPEN, body))["amountSats"]
    session = SessionClient(node)
    opened = await session.open(OPEN, body)
    assert opened.status_code == 400, opened.text
    error = opened.json()
    assert error["error_code"] == "INVALID_INPUT" and "session" in error["error"]
    assert error["session"]["creditedMsat"] == price * 1000
    assert len(twilio.calls) == calls_before


async def test_a_say_sent_to_another_instance_is_played_by_the_one_that_dialed(
    tmp_path: Any, twilio: FakeTwilio, pg_cluster: PgCluster
) -> None:
    """Two instances on one PostgreSQL store: the call is dialed by A (its audio is in A's
    memory); a say sent to B is handed over through the store and played by A, a poll and
    the end work at B, and the deposit is settled once."""
    url = pg_cluster.new_database()
    shared = tmp_path / "data"  # one server secret and files directory for both
    common = {
        "providers": {"twilio": twilio.provider_table()},
        "engines": {"voice_bridge": "twilio"},
        "store_url": url,
    }
    a = ThreadedServer(make_settings(shared, **common), PROVIDER_KINDS)
    b = ThreadedServer(make_settings(shared, **common), PROVIDER_KINDS)
    try:
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=60) as at_a,
            httpx.AsyncClient(base_url=b.url, timeout=60) as at_b,
        ):
            opened = await _open(at_a, sttEnabled=False)
            session = opened["sessionId"]
            call = twilio.calls[opened["callId"]]
            assert call.stream_url.startswith(a.url.replace("http://", "ws://"))
            await _events_until(at_b, session, lambda ev: "answered" in _types(ev))
            said = "Handed over from the other instance."
            resp = await at_b.post(SAY, json={"sessionId": session, "text": said})
            assert resp.status_code == 200, resp.text
            sent = resp.json()["bytesSent"]
            assert abs(sent - len(_mulaw_speech(said))) <= 800
            await twilio.wait_for(lambda: "say-1" in call.marks)
            assert len(call.received) == sent  # played into the call by A
            events, _ = await _events_until(
                at_b, session, lambda ev: any(e["type"] == "speaking" for e in ev)
            )
            assert next(e["text"] for e in events if e["type"] == "speaking") == said
            settled = (await at_b.post(END, json={"sessionId": session})).json()
            assert settled["usedSats"] == math.ceil(opened["perMinuteSats"])
            # A, which carried the call B hung up, lets go of it (its media and loops).
            await until(lambda: session not in a.app[VOICE_BRIDGE].live_here)
            again = (await at_a.post(END, json={"sessionId": session})).json()
            assert again["usedSats"] == settled["usedSats"]  # settled once
            refunds = _refunds(a, _payment_id(a, session))
            assert [r.amount_msat for r in refunds] == [settled["refundableSats"] * 1000]
        assert_ledger_balances(a)
    finally:
        b.stop()
        a.stop()
