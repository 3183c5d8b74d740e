"""Provider kind ``retell``: AI phone calls on Retell AI (engine ``ai_call``).

- create: ``POST {base}/v2/create-phone-call`` with ``from_number`` (the operator's Retell
  number, ``from_number = "+1..."``), ``to_number``, ``override_agent_id`` (``agent_id``,
  and ``agent_version`` when set), ``retell_llm_dynamic_variables`` (strings: the agent's
  prompt is ``{{agent_prompt}}``; also ``begin_message``, ``language``, ``voice``),
  ``metadata`` (satsgate's reference) and ``agent_override``: ``retell_llm.begin_message``
  and ``agent.voicemail_option`` (``static_text`` with the one message, or ``hangup``),
  plus the agent's ``language``, ``max_call_duration_ms`` and, for a voice the operator
  mapped (``voices = {Adrian = "..."}``), ``voice_id``;
- status: ``GET {base}/v2/get-call/{call_id}``;
- webhooks ``{"event", "call"}`` at ``<public base URL>/api/webhooks/retell/<NAME>``,
  verified by ``x-retell-signature: v=<unix ms>,d=<hex HMAC-SHA256(key, raw body +
  ms)>`` within 5 minutes, the key being the API key that has the webhook badge
  (``webhook_key``, default ``api_key``).

Wire facts: /work/shared/docs/providers.md section 8 (Retell's SDK and docs).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from satsgate.engines.ai_call import AiCallReport, AiCallRequest, CallState, Outcome, Turn
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.providers.upstream import WEBHOOK_TOLERANCE_S
from satsgate.engines.providers.voice_agents import (
    VoiceAgentProvider,
    call_id_in,
    mapping,
    option_str,
    prompt_variables,
    text,
)
from satsgate.engines.registry import EngineDeps

log = logging.getLogger(__name__)

KIND = "retell"
DEFAULT_BASE_URL = "https://api.retellai.com"
_SIGNATURE = re.compile(r"^v=(\d{10,16}),d=([0-9a-fA-F]{64})$")
_STATES: Mapping[str, CallState] = {
    "registered": "queued",
    "ongoing": "in_progress",
    "ended": "ended",
    "not_connected": "ended",
    "error": "ended",
}
_ENDED_AS: Mapping[str, Outcome] = {
    "dial_no_answer": "no_answer",
    "dial_busy": "busy",
    "dial_failed": "failed",
    "invalid_destination": "failed",
    "voicemail_reached": "voicemail",
}


def sign(key: str, body: bytes, ms: int) -> str:
    """The ``x-retell-signature`` value for ``body`` sent at ``ms`` (Retell's scheme)."""
    digest = hmac.new(key.encode(), body + str(ms).encode(), hashlib.sha256).hexdigest()
    return f"v={ms},d={digest}"


def verify_signature(key: str, body: bytes, header: str, now_ms: int | None = None) -> bool:
    found = _SIGNATURE.match(header.strip())
    if not key or found is None:
        return False
    ms = int(found.group(1))
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if abs(now - ms) > WEBHOOK_TOLERANCE_S * 1000:
        return False
    return hmac.compare_digest(sign(key, body, ms), f"v={ms},d={found.group(2).lower()}")


class RetellProvider(VoiceAgentProvider):
    KIND = KIND
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    CREATE_PATH = "/v2/create-phone-call"
    CALL_PATH = "/v2/get-call/{call_id}"

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        super().__init__(config, deps)
        self.agent_id = option_str(config, "agent_id", required=True)
        self.from_number = option_str(config, "from_number", required=True)
        version = config.options.get("agent_version")
        if version is not None and not isinstance(version, int):
            raise EngineConfigError(f"[providers.{config.name}] agent_version must be a number")
        self.agent_version: int | None = version
        self.webhook_key = option_str(config, "webhook_key") or config.api_key

    def normalise(self, call: Mapping[str, Any]) -> AiCallReport:
        return report(call)

    def call_body(self, request: AiCallRequest) -> dict[str, Any]:
        agent: dict[str, Any] = {
            "voicemail_option": {
                "action": {"type": "static_text", "text": request.voicemail_message}
                if request.voicemail_message
                else {"type": "hangup"}
            },
            "language": request.language,
            "max_call_duration_ms": request.max_duration_s * 1000,
        }
        if request.voice is not None and request.voice in self.voices:
            agent["voice_id"] = self.voices[request.voice]
        body: dict[str, Any] = {
            "from_number": self.from_number,
            "to_number": request.to_number,
            "override_agent_id": self.agent_id,
            "retell_llm_dynamic_variables": prompt_variables(request),
            "metadata": {"satsgate_reference": request.reference},
            "agent_override": {
                "agent": agent,
                "retell_llm": {"begin_message": request.begin_message},
            },
        }
        if self.agent_version is not None:
            body["override_agent_version"] = self.agent_version
        return body

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> str | None:
        if not verify_signature(self.webhook_key, body, headers.get("x-retell-signature", "")):
            return None
        return call_id_in(body, "call", "call_id")


def report(call: Mapping[str, Any]) -> AiCallReport:
    """Retell's call object, normalised."""
    call_id = str(call.get("call_id") or "")
    status = str(call.get("call_status") or "")
    state = _STATES.get(status, "queued")
    reason = str(call.get("disconnection_reason") or "")
    analysis = mapping(call.get("call_analysis"))
    outcome: Outcome | None = None
    connected_s = 0.0
    if state == "ended":
        if reason in _ENDED_AS:
            outcome = _ENDED_AS[reason]
        elif status == "error" or reason.startswith("error") or status == "not_connected":
            outcome = "failed"
        elif analysis.get("in_voicemail") is True:
            outcome = "voicemail"
        else:
            outcome = "completed"
        if outcome == "voicemail" or (outcome in ("completed", "failed") and call.get(
            "start_timestamp"
        )):  # fmt: skip
            connected_s = _duration_s(call)
    turns = []
    for item in call.get("transcript_object") or ():
        if isinstance(item, Mapping) and isinstance(item.get("content"), str):
            role = item.get("role")
            if role in ("agent", "user"):
                turns.append(Turn("agent" if role == "agent" else "person", item["content"]))
    data = analysis.get("custom_analysis_data")
    successful = analysis.get("call_successful")
    transcript = call.get("transcript")
    summary = analysis.get("call_summary")
    return AiCallReport(
        provider_call_id=call_id,
        state=state,
        outcome=outcome,
        ended_reason=reason,
        connected_s=connected_s,
        turns=tuple(turns),
        transcript=text(transcript),
        summary=text(summary),
        successful=successful if isinstance(successful, bool) else None,
        data=dict(mapping(data)),
        # call_ended carries everything but call_analysis; call_analyzed follows.
        analysed=bool(analysis) or outcome in ("no_answer", "busy", "failed"),
    )


def _duration_s(call: Mapping[str, Any]) -> float:
    duration = call.get("duration_ms")
    if isinstance(duration, int | float) and duration >= 0:
        return float(duration) / 1000
    start, end = call.get("start_timestamp"), call.get("end_timestamp")
    if isinstance(start, int | float) and isinstance(end, int | float) and end >= start:
        return float(end - start) / 1000
    return 0.0
