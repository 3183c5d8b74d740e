"""Free follow-ups of the communication services: a voice-bridge session's say, poll and
end (on paths of their own), and an AI call's confirmation and poll (forms of the
ai-call path itself). The work is done in services.voice_bridge and services.ai_calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from satsgate.errors import ApiError
from satsgate.operations.base import Call, Family, HttpRoute, OperationEnv, OperationSpec
from satsgate.operations.models import (
    AiCallRecord,
    CallDelivery,
    SmsDelivery,
    VoiceBridgeEvents,
    VoiceBridgeSaid,
    VoiceBridgeSettlement,
)
from satsgate.services import ai_calls, deliveries, voice_bridge
from satsgate.services.comms import (
    AI_CALL,
    CALL,
    SEND_SMS,
    VOICE_BRIDGE_OPEN,
    AiCallAnswers,
    AiCallConfirmParams,
    AiCallId,
    AiCallPollParams,
    CallStatusParams,
    SmsStatusParams,
)
from satsgate.services.voice_bridge import (
    VoiceBridgeEndParams,
    VoiceBridgePollParams,
    VoiceBridgeSayParams,
)

# -- voice bridge ---------------------------------------------------------------------------
# The arguments are the HTTP params models themselves: one schema, both spellings.

VOICE_BRIDGE = Family("Voice bridge", VOICE_BRIDGE_OPEN.slug, " (the session's deposit pays)")
_BRIDGE_CODES = (
    "L402_INVALID_PARAMS",
    "VOICE_BRIDGE_SESSION_NOT_FOUND",
    "SERVICE_UNAVAILABLE",
    "INTERNAL_ERROR",
)
_FREE_NOTE = " Free: the session's deposit pays; no Authorization, never 402."


async def voice_bridge_say(
    env: OperationEnv, args: VoiceBridgeSayParams, call: Call
) -> VoiceBridgeSaid:
    settings = env.settings
    sessions = voice_bridge.sessions_for(settings)
    return VoiceBridgeSaid.model_validate(
        await voice_bridge.say(settings, env.engines, sessions, args)
    )


async def poll_voice_bridge(
    env: OperationEnv, args: VoiceBridgePollParams, call: Call
) -> VoiceBridgeEvents:
    settings = env.settings
    sessions = voice_bridge.sessions_for(settings)
    return VoiceBridgeEvents.model_validate(
        await voice_bridge.poll(settings, env.engines, sessions, args)
    )


async def end_voice_bridge(
    env: OperationEnv, args: VoiceBridgeEndParams, call: Call
) -> VoiceBridgeSettlement:
    settings = env.settings
    sessions = voice_bridge.sessions_for(settings)
    return VoiceBridgeSettlement.model_validate(
        await voice_bridge.end(settings, env.engines, sessions, args)
    )


VOICE_BRIDGE_SAY: OperationSpec[VoiceBridgeSayParams, VoiceBridgeSaid] = OperationSpec(
    name="voice_bridge_say",
    title="Speak into a voice bridge",
    description="Play speech into a session opened with open_voice_bridge: exactly one of text "
    "(synthesized in 602 languages; optional language, voiceDescription) or audioBase64 "
    "(raw audio, at most 1 MB; optional encoding mulaw_8000 or pcm_l16_16000, default "
    "the session's activeCodec). Speech recognition is muted while it plays. Returns "
    "{ success, bytesSent }. Free: the session's deposit pays. Unknown or ended session: "
    "VOICE_BRIDGE_SESSION_NOT_FOUND; a node without the voice-bridge engine: "
    "SERVICE_UNAVAILABLE.",
    params=VoiceBridgeSayParams,
    result=VoiceBridgeSaid,
    handler=voice_bridge_say,
    http=HttpRoute(
        "POST",
        voice_bridge.SAY_PATH,
        example='{"sessionId": "<sessionId>", "text": "Hello"}',
        max_body_bytes=voice_bridge.SAY_MAX_BODY_BYTES,
        summary="Play speech into an open session: exactly one of text (synthesized; "
        "optional language, voiceDescription) or audioBase64 (raw audio, at most 1 MB "
        "decoded; optional encoding, default the session's activeCodec). Speech recognition "
        "is muted while it plays." + _FREE_NOTE,
        llms='`POST {url}` with `{{"sessionId": "...", "text": "..."}}` (or `audioBase64` '
        "with `encoding`) speaks into the call",
    ),
    tool="voice_bridge_say",
    read_only=False,
    error_codes=_BRIDGE_CODES,
    family=VOICE_BRIDGE,
    tags=(VOICE_BRIDGE_OPEN.category, "free"),
)

VOICE_BRIDGE_POLL: OperationSpec[VoiceBridgePollParams, VoiceBridgeEvents] = OperationSpec(
    name="poll_voice_bridge",
    title="Poll a voice bridge",
    description="Transcript and system events of a voice-bridge session since cursor: { "
    "success, sessionId, state, events: [{ seq, type, text, ts_ms }], nextCursor, callId }. "
    "Pass nextCursor as the next cursor; poll about every 0.5 to 1 s. Free. Unknown session: "
    "VOICE_BRIDGE_SESSION_NOT_FOUND; a node without the voice-bridge engine: "
    "SERVICE_UNAVAILABLE.",
    params=VoiceBridgePollParams,
    result=VoiceBridgeEvents,
    handler=poll_voice_bridge,
    http=HttpRoute(
        "GET",
        voice_bridge.POLL_PATH,
        example=f"GET {voice_bridge.POLL_PATH}?sessionId=<sessionId>&cursor=0",
        headers={"Cache-Control": "no-store"},  # the call moves on between polls
        summary="Transcript and system events since cursor; poll about every 0.5 to 1 s. "
        "session_id is accepted for sessionId." + _FREE_NOTE,
        llms="`GET {url}?sessionId=<sessionId>&cursor=<nextCursor>` polls transcript and "
        "system events (every 0.5 to 1 s)",
    ),
    tool="poll_voice_bridge",
    error_codes=_BRIDGE_CODES,
    family=VOICE_BRIDGE,
    tags=(VOICE_BRIDGE_OPEN.category, "free"),
)

VOICE_BRIDGE_END: OperationSpec[VoiceBridgeEndParams, VoiceBridgeSettlement] = OperationSpec(
    name="end_voice_bridge",
    title="End a voice bridge",
    description="Hang up a voice-bridge session and settle its deposit, once: { success, "
    "elapsedSec, usedSats, depositSats, refundableSats, refund, finalTranscript }. The "
    "elapsed time is billed at perMinuteSats; the unused deposit goes to refundAddress when "
    "the session has one, otherwise refund is an LNURL-withdraw. Ending again returns the "
    "same settlement. Free. Unknown session: VOICE_BRIDGE_SESSION_NOT_FOUND; a node "
    "without the voice-bridge engine: SERVICE_UNAVAILABLE.",
    params=VoiceBridgeEndParams,
    result=VoiceBridgeSettlement,
    handler=end_voice_bridge,
    http=HttpRoute(
        "POST",
        voice_bridge.END_PATH,
        example='{"sessionId": "<sessionId>"}',
        max_body_bytes=voice_bridge.SMALL_BODY_BYTES,
        summary="Hang up and settle the deposit, once: the elapsed time is billed at "
        "perMinuteSats, the rest refunded to refundAddress or as an LNURL-withdraw. Ending "
        "again returns the same settlement." + _FREE_NOTE,
        llms='`POST {url}` with `{{"sessionId": "..."}}` hangs up, bills the elapsed time '
        "and refunds the rest of the deposit",
    ),
    tool="end_voice_bridge",
    read_only=False,
    error_codes=_BRIDGE_CODES,
    family=VOICE_BRIDGE,
    tags=(VOICE_BRIDGE_OPEN.category, "free"),
)


# -- AI call --------------------------------------------------------------------------------

AI_CALLS = Family("AI call", AI_CALL.slug)
_AI_CALL_CODES = ("L402_INVALID_PARAMS", "AI_CALL_NOT_FOUND", "SERVICE_UNAVAILABLE")


class ConfirmAiCallArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="confirm_ai_call arguments")

    sessionId: AiCallId = Field(description="The session_id of the pending_confirm answer.")
    answers: AiCallAnswers | None = Field(
        None, description="Answers to the clarification questions, by question (at most 50)."
    )

    @property
    def session_id(self) -> str:
        return self.sessionId


async def confirm_ai_call(
    env: OperationEnv, args: AiCallConfirmParams | ConfirmAiCallArgs, call: Call
) -> AiCallRecord:
    settings = env.settings
    records = ai_calls.records_for(settings)
    return AiCallRecord.model_validate(
        await ai_calls.confirm(settings, env.engines, records, args.session_id, args.answers)
    )


async def poll_ai_call(env: OperationEnv, args: AiCallPollParams, call: Call) -> AiCallRecord:
    settings = env.settings
    records = ai_calls.records_for(settings)
    return AiCallRecord.model_validate(
        await ai_calls.poll(settings, env.engines, records, args.call_id)
    )


def _confirming(body: Mapping[str, Any]) -> bool:
    return "action" in body


def _polling(query: Mapping[str, Any]) -> bool:
    return "call_id" in query


CONFIRM_AI_CALL: OperationSpec[AiCallConfirmParams, AiCallRecord] = OperationSpec(
    name="confirm_ai_call",
    title="Confirm an AI call",
    description="Let an ai_call that answered status pending_confirm (with clarification "
    "questions) proceed: sessionId from that answer, optional answers by question. Uses the "
    "call's original payment: free, no new payment. Returns { success, call_id, status, "
    "poll_url }. Unknown or already confirmed session: AI_CALL_NOT_FOUND; a node "
    "without the AI-call engine: SERVICE_UNAVAILABLE.",
    params=AiCallConfirmParams,
    tool_params=ConfirmAiCallArgs,
    result=AiCallRecord,
    handler=confirm_ai_call,
    http=HttpRoute(
        "POST",
        f"/api/l402/{AI_CALL.slug}",
        example='{"action": "confirm", "session_id": "<session_id>", '
        '"answers": {"<question>": "<answer>"}}',
        max_body_bytes=AI_CALL.max_body_bytes,
        on_service=AI_CALL.slug,
        when=_confirming,
        summary="the body {action: 'confirm', session_id, answers?} lets a call that "
        "answered status pending_confirm proceed on its original payment. It needs no "
        "Authorization and never answers 402: 200 with { success, call_id, status, "
        "poll_url }, or AI_CALL_NOT_FOUND (404) when no call awaits confirmation under "
        "session_id.",
        llms='`POST {url}` with `{{"action": "confirm", "session_id": "...", "answers": '
        "{{...}}}}` lets a `pending_confirm` call proceed on its original payment",
    ),
    tool="confirm_ai_call",
    read_only=False,
    error_codes=_AI_CALL_CODES,
    family=AI_CALLS,
)

POLL_AI_CALL: OperationSpec[AiCallPollParams, AiCallRecord] = OperationSpec(
    name="poll_ai_call",
    title="Poll an AI call",
    description="Without call_id: the service description. With call_id: the call's record "
    "(transcript, results and refund status when the call has them), free of charge; "
    "x-available is whether polling works on this node.",
    params=AiCallPollParams,
    result=AiCallRecord,
    handler=poll_ai_call,
    http=HttpRoute(
        "GET",
        f"/api/l402/{AI_CALL.slug}",
        example=f"GET /api/l402/{AI_CALL.slug}?call_id=<call_id>",
        on_service=AI_CALL.slug,
        when=_polling,
        headers={"Cache-Control": "no-store"},  # the call moves on between polls
        summary=f"Describe {AI_CALL.title}, or poll one call with call_id (free)",
        llms="`GET {url}?call_id=<call_id>` polls a call (transcript, results, refund status)",
    ),
    error_codes=(*_AI_CALL_CODES, "INTERNAL_ERROR"),
    family=AI_CALLS,
)


# -- SMS and automated-call delivery status ------------------------------------------------

_DELIVERY_CODES = ("L402_INVALID_PARAMS", "DELIVERY_NOT_FOUND", "INTERNAL_ERROR")


def _delivery_env(env: OperationEnv) -> deliveries.DeliveryEnv:
    if env.deliveries is None:
        raise ApiError("INTERNAL_ERROR", "Delivery records are not available.")
    return deliveries.DeliveryEnv(env.deliveries, env.gate.get_payment, env.refunds)


async def sms_status(env: OperationEnv, args: SmsStatusParams, call: Call) -> SmsDelivery:
    denv = _delivery_env(env)
    record = await deliveries.read_status(denv, env.engines, "sms", args.message_id)
    body = await deliveries.sms_body(denv, record, env.settings.public_base_url)
    return SmsDelivery.model_validate(body)


async def call_status(env: OperationEnv, args: CallStatusParams, call: Call) -> CallDelivery:
    denv = _delivery_env(env)
    record = await deliveries.read_status(denv, env.engines, "call", args.call_id)
    body = await deliveries.call_body(denv, record, env.settings.public_base_url)
    return CallDelivery.model_validate(body)


def _has(key: str, other: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda query: key in query or other in query


SMS_STATUS: OperationSpec[SmsStatusParams, SmsDelivery] = OperationSpec(
    name="get_sms_status",
    title="SMS delivery status",
    description="The delivery status of an SMS sent with send_sms, free: { success, "
    "message_id, status, final, updated_at, status_url, refund? }; status is queued, "
    "sent, delivered, undelivered or failed (final: delivered, undelivered, failed). A "
    "message that ends undelivered or failed is refunded: refund is its LNURL-withdraw. "
    "Unknown message_id: DELIVERY_NOT_FOUND.",
    params=SmsStatusParams,
    result=SmsDelivery,
    handler=sms_status,
    http=HttpRoute(
        "GET",
        deliveries.SMS_STATUS_PATH,
        example=f"GET {deliveries.SMS_STATUS_PATH}?message_id=<message_id>",
        on_service=SEND_SMS.slug,
        when=_has("message_id", "messageId"),
        headers={"Cache-Control": "no-store"},
        summary=f"Describe {SEND_SMS.title}, or read one message's delivery status with "
        "message_id (free)",
        llms="`GET {url}?message_id=<message_id>` reads an SMS's delivery status (free)",
    ),
    tool="get_sms_status",
    error_codes=_DELIVERY_CODES,
    family=Family("SMS", SEND_SMS.slug),
    tags=(SEND_SMS.category, "free"),
)

CALL_STATUS: OperationSpec[CallStatusParams, CallDelivery] = OperationSpec(
    name="get_call_status",
    title="Automated call status",
    description="The status of a call placed with call, free: { success, call_id, status, "
    "final, duration_s, answered_by, paid_minutes, billed_minutes, charged_sats, refund, "
    "status_url }. status is queued, ringing, in-progress, completed, busy, no-answer, "
    "failed or canceled. Once the call ended it is billed by its connected minutes (at "
    "least one when answered, none when nobody answered); refund is the LNURL-withdraw of "
    "the rest. Unknown call_id: DELIVERY_NOT_FOUND.",
    params=CallStatusParams,
    result=CallDelivery,
    handler=call_status,
    http=HttpRoute(
        "GET",
        deliveries.CALL_STATUS_PATH,
        example=f"GET {deliveries.CALL_STATUS_PATH}?call_id=<call_id>",
        on_service=CALL.slug,
        when=_has("call_id", "callId"),
        headers={"Cache-Control": "no-store"},
        summary=f"Describe {CALL.title}, or read one call's status and billing with call_id (free)",
        llms="`GET {url}?call_id=<call_id>` reads a call's status, billing and refund (free)",
    ),
    tool="get_call_status",
    error_codes=_DELIVERY_CODES,
    family=Family("Automated call", CALL.slug),
    tags=(CALL.category, "free"),
)
