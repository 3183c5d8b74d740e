"""Provider kind ``vapi``: AI phone calls on Vapi (engine ``ai_call``).

- create: ``POST {base}/call`` with ``assistantId`` (``assistant_id``), ``phoneNumberId``
  (``phone_number_id``), ``customer: {number}``, ``name`` (satsgate's reference) and
  ``assistantOverrides``: ``firstMessage``, ``variableValues`` (the assistant's prompt is
  ``{{agent_prompt}}``; also ``begin_message``, ``language``, ``voice``),
  ``maxDurationSeconds`` and, for the voicemail ``message`` option, ``voicemailMessage``;
- status: ``GET {base}/call/{id}``;
- webhooks (the assistant's Server URL, ``<public base URL>/api/webhooks/vapi/<NAME>``):
  ``{"message": {"type": ..., "call": {...}}}``, authenticated as the Server URL's
  credential says: ``webhook_auth = "bearer"`` (default: header ``webhook_header``,
  default ``Authorization``, ``Bearer <webhook_secret>``, or the bare secret with
  ``webhook_bearer_prefix = false``) or ``"hmac"`` (``x-signature`` = hex
  HMAC-SHA256(webhook_secret, ``{x-timestamp}.{raw body}``), after an optional
  ``webhook_signature_prefix``).
  Without ``webhook_secret`` every webhook is refused and calls are polled.

Wire facts: /work/shared/docs/providers.md section 8 (Vapi's server SDK and docs).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Mapping
from typing import Any

from satsgate.constant_time import texts_equal
from satsgate.engines.ai_call import AiCallReport, AiCallRequest, CallState, Outcome, Turn
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.providers.upstream import WEBHOOK_TOLERANCE_S
from satsgate.engines.providers.voice_agents import (
    VoiceAgentProvider,
    call_id_in,
    iso_seconds,
    mapping,
    option_str,
    prompt_variables,
    text,
)
from satsgate.engines.registry import EngineDeps

log = logging.getLogger(__name__)

KIND = "vapi"
DEFAULT_BASE_URL = "https://api.vapi.ai"
_STATES: Mapping[str, CallState] = {
    "scheduled": "queued",
    "queued": "queued",
    "ringing": "ringing",
    "in-progress": "in_progress",
    "forwarding": "in_progress",
    "ended": "ended",
    "not-found": "ended",
    "deletion-failed": "ended",
}
_ENDED_AS: Mapping[str, Outcome] = {
    "customer-did-not-answer": "no_answer",
    "customer-busy": "busy",
    "voicemail": "voicemail",
}


def hmac_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Vapi's default HMAC plan: hex HMAC-SHA256 over ``{timestamp}.{body}``."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def _fresh(timestamp: str) -> bool:
    """Within 5 minutes when the timestamp reads as unix seconds or ms (its format is
    not documented: another form is left to the signature alone)."""
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 16):
        return iso_seconds(timestamp) is None or (
            abs(time.time() - (iso_seconds(timestamp) or 0)) <= WEBHOOK_TOLERANCE_S
        )
    value = int(timestamp)
    seconds = value / 1000 if value > 10**11 else value
    return abs(time.time() - seconds) <= WEBHOOK_TOLERANCE_S


class VapiProvider(VoiceAgentProvider):
    KIND = KIND
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    CREATE_PATH = "/call"
    CALL_PATH = "/call/{call_id}"

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        super().__init__(config, deps)
        self.assistant_id = option_str(config, "assistant_id", required=True)
        self.phone_number_id = option_str(config, "phone_number_id", required=True)
        self.webhook_secret = option_str(config, "webhook_secret")
        self.webhook_auth = option_str(config, "webhook_auth") or "bearer"
        if self.webhook_auth not in ("bearer", "hmac"):
            raise EngineConfigError(
                f'[providers.{config.name}] webhook_auth must be "bearer" or "hmac"'
            )
        self.webhook_header = (option_str(config, "webhook_header") or "Authorization").lower()
        # The bearer plan's bearerPrefixEnabled (default true) and the HMAC plan's optional
        # signaturePrefix, as set on the Server URL's credential.
        prefix = config.options.get("webhook_bearer_prefix", True)
        if not isinstance(prefix, bool):
            raise EngineConfigError(
                f"[providers.{config.name}] webhook_bearer_prefix must be true or false"
            )
        self.bearer_prefix = "Bearer " if prefix else ""
        self.signature_prefix = option_str(config, "webhook_signature_prefix")

    def normalise(self, call: Mapping[str, Any]) -> AiCallReport:
        return report(call)

    def call_body(self, request: AiCallRequest) -> dict[str, Any]:
        overrides: dict[str, Any] = {
            "firstMessage": request.begin_message,
            "variableValues": prompt_variables(request),
            "maxDurationSeconds": request.max_duration_s,
        }
        if request.voicemail_message:
            overrides["voicemailMessage"] = request.voicemail_message
        return {
            "assistantId": self.assistant_id,
            "assistantOverrides": overrides,
            "phoneNumberId": self.phone_number_id,
            "customer": {"number": request.to_number},
            "name": request.reference[:40],
        }

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> str | None:
        secret = self.webhook_secret
        if not secret:
            return None
        if self.webhook_auth == "bearer":
            given = headers.get(self.webhook_header, "")
            if not hmac.compare_digest(given.encode(), f"{self.bearer_prefix}{secret}".encode()):
                return None
        else:
            stamp = headers.get("x-timestamp", "")
            given = headers.get("x-signature", "").strip()
            if self.signature_prefix and given.startswith(self.signature_prefix):
                given = given[len(self.signature_prefix) :]
            if not stamp or not given or not _fresh(stamp):
                return None
            if not texts_equal(given.lower(), hmac_signature(secret, stamp, body)):
                return None
        return call_id_in(body, "message", "call", "id")


def report(call: Mapping[str, Any]) -> AiCallReport:
    """Vapi's Call object, normalised."""
    state = _STATES.get(str(call.get("status") or ""), "queued")
    reason = str(call.get("endedReason") or "")
    outcome: Outcome | None = None
    connected_s = 0.0
    if state == "ended":
        if reason in _ENDED_AS:
            outcome = _ENDED_AS[reason]
        elif (
            "failed" in reason
            or "error" in reason
            or reason in ("manually-canceled", "")
            or str(call.get("status")) != "ended"
        ):
            outcome = "failed"
        else:
            outcome = "completed"
        started, ended = iso_seconds(call.get("startedAt")), iso_seconds(call.get("endedAt"))
        if outcome not in ("no_answer", "busy") and started and ended and ended >= started:
            connected_s = ended - started
    artifact = mapping(call.get("artifact"))
    turns = []
    for item in artifact.get("messages") or ():
        if isinstance(item, Mapping) and isinstance(item.get("message"), str):
            role = item.get("role")
            if role == "user":
                turns.append(Turn("person", item["message"]))
            elif role in ("bot", "assistant"):
                turns.append(Turn("agent", item["message"]))
    analysis = mapping(call.get("analysis"))
    evaluation = analysis.get("successEvaluation")
    successful: bool | None = None
    if isinstance(evaluation, bool):
        successful = evaluation
    elif isinstance(evaluation, str) and evaluation.lower() in ("true", "false"):
        successful = evaluation.lower() == "true"
    data = analysis.get("structuredData")
    transcript = artifact.get("transcript")
    summary = analysis.get("summary")
    return AiCallReport(
        provider_call_id=str(call.get("id") or ""),
        state=state,
        outcome=outcome,
        ended_reason=reason,
        connected_s=connected_s,
        turns=tuple(turns),
        transcript=text(transcript),
        summary=text(summary),
        successful=successful,
        data=dict(mapping(data)),
    )
