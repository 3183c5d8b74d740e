"""The Retell and Vapi adapters without a network: their configuration checks, the
webhook authentication plans each documents, and how their call objects read
(states, endings, connected time, transcripts)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from satsgate.config.settings import Settings
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.providers import retell, vapi
from satsgate.engines.registry import EngineDeps


def _deps() -> EngineDeps:
    none: Any = None
    return EngineDeps(Settings(), none)


def _vapi(**options: Any) -> vapi.VapiProvider:
    base = {"assistant_id": "a", "phone_number_id": "p", "webhook_secret": "s3cret"}
    return vapi.VapiProvider(
        ProviderConfig("v", "vapi", api_key="k", options={**base, **options}), _deps()
    )


BODY = json.dumps({"message": {"type": "status-update", "call": {"id": "call-1"}}}).encode()


def test_vapi_bearer_plan() -> None:
    provider = _vapi()
    assert provider.verify_webhook({"authorization": "Bearer s3cret"}, BODY) == "call-1"
    assert provider.verify_webhook({"authorization": "Bearer wrong"}, BODY) is None
    assert provider.verify_webhook({"authorization": "s3cret"}, BODY) is None
    assert provider.verify_webhook({}, BODY) is None
    bare = _vapi(webhook_bearer_prefix=False, webhook_header="X-Vapi-Auth")
    assert bare.verify_webhook({"x-vapi-auth": "s3cret"}, BODY) == "call-1"
    assert bare.verify_webhook({"authorization": "Bearer s3cret"}, BODY) is None
    unset = _vapi(webhook_secret="")
    assert unset.verify_webhook({"authorization": "Bearer "}, BODY) is None


def test_vapi_hmac_plan() -> None:
    provider = _vapi(webhook_auth="hmac", webhook_signature_prefix="sha256=")
    stamp = str(int(time.time()))
    good = vapi.hmac_signature("s3cret", stamp, BODY)
    assert provider.verify_webhook({"x-timestamp": stamp, "x-signature": good}, BODY) == "call-1"
    prefixed = {"x-timestamp": stamp, "x-signature": "sha256=" + good}
    assert provider.verify_webhook(prefixed, BODY) == "call-1"
    assert provider.verify_webhook({"x-timestamp": stamp, "x-signature": good}, BODY + b" ") is None
    old = str(int(time.time()) - 3600)
    stale = {"x-timestamp": old, "x-signature": vapi.hmac_signature("s3cret", old, BODY)}
    assert provider.verify_webhook(stale, BODY) is None
    millis = str(int(time.time() * 1000))
    in_ms = {"x-timestamp": millis, "x-signature": vapi.hmac_signature("s3cret", millis, BODY)}
    assert provider.verify_webhook(in_ms, BODY) == "call-1"
    assert provider.verify_webhook({"x-signature": good}, BODY) is None


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("vapi", {"phone_number_id": "p"}, "assistant_id"),
        ("vapi", {"assistant_id": "a"}, "phone_number_id"),
        ("vapi", {"assistant_id": "a", "phone_number_id": "p", "webhook_auth": "oauth2"},
         "webhook_auth"),
        ("retell", {"from_number": "+1"}, "agent_id"),
        ("retell", {"agent_id": "a"}, "from_number"),
        ("retell", {"agent_id": "a", "from_number": "+1", "voices": {"Bob": "x"}}, "voices"),
        ("retell", {"agent_id": "a", "from_number": "+1", "agent_version": "3"}, "agent_version"),
    ],
)  # fmt: skip
def test_configuration_errors(kind: str, options: dict[str, Any], message: str) -> None:
    factory = vapi.VapiProvider if kind == "vapi" else retell.RetellProvider
    with pytest.raises(EngineConfigError, match=message):
        factory(ProviderConfig("x", kind, api_key="k", options=options), _deps())


def test_retell_webhook_needs_its_signature() -> None:
    provider = retell.RetellProvider(
        ProviderConfig("r", "retell", api_key="key_a", options={"agent_id": "a",
                       "from_number": "+1", "webhook_key": "key_hook"}),
        _deps(),
    )  # fmt: skip
    body = json.dumps({"event": "call_started", "call": {"call_id": "c9"}}).encode()
    ms = int(time.time() * 1000)
    signed = {"x-retell-signature": retell.sign("key_hook", body, ms)}
    assert provider.verify_webhook(signed, body) == "c9"
    by_api_key = {"x-retell-signature": retell.sign("key_a", body, ms)}
    assert provider.verify_webhook(by_api_key, body) is None
    assert provider.verify_webhook({}, body) is None


@pytest.mark.parametrize(
    ("call", "state", "outcome", "connected"),
    [
        ({"call_status": "registered"}, "queued", None, 0.0),
        ({"call_status": "ongoing", "start_timestamp": 1}, "in_progress", None, 0.0),
        ({"call_status": "not_connected", "disconnection_reason": "dial_no_answer"}, "ended",
         "no_answer", 0.0),
        ({"call_status": "not_connected", "disconnection_reason": "dial_busy"}, "ended", "busy",
         0.0),
        ({"call_status": "ended", "disconnection_reason": "voicemail_reached",
          "start_timestamp": 1000, "end_timestamp": 21000}, "ended", "voicemail", 20.0),
        ({"call_status": "ended", "disconnection_reason": "user_hangup", "start_timestamp": 5,
          "duration_ms": 61000}, "ended", "completed", 61.0),
        ({"call_status": "ended", "disconnection_reason": "agent_hangup", "start_timestamp": 5,
          "duration_ms": 9000, "call_analysis": {"in_voicemail": True}}, "ended", "voicemail", 9.0),
        ({"call_status": "error", "disconnection_reason": "error_unknown"}, "ended", "failed", 0.0),
        ({"call_status": "ended", "disconnection_reason": "dial_failed"}, "ended", "failed", 0.0),
    ],
)  # fmt: skip
def test_retell_call_objects(
    call: dict[str, Any], state: str, outcome: str | None, connected: float
) -> None:
    report = retell.report({"call_id": "c1", **call})
    assert (report.state, report.outcome, report.connected_s) == (state, outcome, connected)


@pytest.mark.parametrize(
    ("call", "state", "outcome", "connected"),
    [
        ({"status": "queued"}, "queued", None, 0.0),
        ({"status": "ringing"}, "ringing", None, 0.0),
        ({"status": "in-progress"}, "in_progress", None, 0.0),
        ({"status": "ended", "endedReason": "customer-did-not-answer"}, "ended", "no_answer", 0.0),
        ({"status": "ended", "endedReason": "customer-busy"}, "ended", "busy", 0.0),
        ({"status": "ended", "endedReason": "voicemail", "startedAt": "2026-01-01T00:00:00Z",
          "endedAt": "2026-01-01T00:00:12.500Z"}, "ended", "voicemail", 12.5),
        ({"status": "ended", "endedReason": "customer-ended-call",
          "startedAt": "2026-01-01T00:00:00.000Z", "endedAt": "2026-01-01T00:02:00.000Z"},
         "ended", "completed", 120.0),
        ({"status": "ended", "endedReason": "pipeline-error-openai-llm-failed"}, "ended",
         "failed", 0.0),
        ({"status": "ended", "endedReason": "twilio-failed-to-connect-call"}, "ended", "failed",
         0.0),
        ({"status": "not-found"}, "ended", "failed", 0.0),
    ],
)  # fmt: skip
def test_vapi_call_objects(
    call: dict[str, Any], state: str, outcome: str | None, connected: float
) -> None:
    report = vapi.report({"id": "v1", **call})
    assert (report.state, report.outcome, report.connected_s) == (state, outcome, connected)


def test_transcripts_and_analysis_read() -> None:
    r = retell.report(
        {
            "call_id": "c1",
            "call_status": "ended",
            "disconnection_reason": "user_hangup",
            "start_timestamp": 1,
            "duration_ms": 30000,
            "transcript": "Agent: Hi\nUser: Hello",
            "transcript_object": [
                {"role": "agent", "content": "Hi", "words": []},
                {"role": "user", "content": "Hello", "words": []},
                {"role": "tool_call_invocation", "content": "x"},
            ],
            "call_analysis": {"call_summary": "Greeted.", "call_successful": True,
                              "custom_analysis_data": {"k": 1}},
        }
    )  # fmt: skip
    assert (
        r.person_spoke and r.person_text() == "Hello" and r.transcript == "Agent: Hi\nUser: Hello"
    )
    assert (r.summary, r.successful, dict(r.data)) == ("Greeted.", True, {"k": 1})
    v = vapi.report(
        {
            "id": "v1",
            "status": "ended",
            "endedReason": "assistant-ended-call",
            "artifact": {"transcript": "AI: Hi", "messages": [
                {"role": "system", "message": "prompt"}, {"role": "bot", "message": "Hi"}]},
            "analysis": {"summary": "No answer from the person.", "successEvaluation": "false",
                         "structuredData": {"k": 2}},
        }
    )  # fmt: skip
    assert not v.person_spoke and v.successful is False and dict(v.data) == {"k": 2}
