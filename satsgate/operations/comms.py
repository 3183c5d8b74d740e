"""Free follow-ups of the communication services: a voice-bridge session's say, poll and
end (on paths of their own), and an AI call's confirmation and poll (forms of the
ai-call path itself). Both faces share the calls here (bridge_say, bridge_poll,
bridge_end, ai_call_confirm, ai_call_poll: the paid service's engine first, then the
session or call), on the node's sessions (services.comms.voice_bridge's seam) and AI-call
records (services.comms.ai_calls')."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from satsgate.config.settings import Settings
from satsgate.engines import Engines
from satsgate.errors import ApiError, ErrorCode
from satsgate.operations.answers import (
    AiCallRecord,
    CallDelivery,
    ClaimedRefund,
    SmsDelivery,
    VoiceBridgeEvents,
    VoiceBridgeSaid,
    VoiceBridgeSettlement,
)
from satsgate.operations.base import (
    AnySpec,
    Call,
    Family,
    HttpRoute,
    OperationEnv,
    OperationSpec,
    asks_for,
    free_status_read,
)
from satsgate.payments.proof import SEND_AUTHORIZATION, proves, refuse_bare_preimage
from satsgate.services.comms import ai_calls, deliveries, voice_bridge
from satsgate.services.comms.ai_calls import AiCallAnswer, AiCallAnswers
from satsgate.services.comms.handlers import (
    AI_CALL,
    CALL,
    SEND_SMS,
    VOICE_BRIDGE_OPEN,
    AiCallConfirmParams,
    AiCallId,
    AiCallPollParams,
    CallStatusParams,
    SmsStatusParams,
)
from satsgate.services.comms.voice_bridge import (
    Utterance,
    VoiceBridgeEndParams,
    VoiceBridgePollParams,
    VoiceBridgeSayParams,
)
from satsgate.services.inputs.params import alias

# -- voice bridge ---------------------------------------------------------------------------
# The arguments are the HTTP params models themselves: one schema, both spellings.

VOICE_BRIDGE = Family("Voice bridge", VOICE_BRIDGE_OPEN.slug, " (the session's deposit pays)")
_BRIDGE_CODES = (
    ErrorCode.L402_INVALID_PARAMS,
    ErrorCode.VOICE_BRIDGE_SESSION_NOT_FOUND,
    ErrorCode.SERVICE_UNAVAILABLE,
    ErrorCode.INTERNAL_ERROR,
)
_FREE_NOTE = " Free: the session's deposit pays; no Authorization, never 402."


def _heard(result: object) -> bool:
    """Poll and end answers carry what the called party said (transcripts): untrusted
    content for a language model reading them (MCP fences it)."""
    return True


def _call_words(result: AiCallRecord) -> bool:
    """An AI call's record with text from outside (its transcript, results or generated
    questions): the record marks itself so (ai_calls.AiCallRecord.body)."""
    return result.untrusted_output is True


# -- the voice bridge's shared calls (both faces) -------------------------------------------


def _unavailable(service: AnySpec) -> ApiError:
    """The paid ``service``'s own refusal on a node without its engine."""
    return ApiError(
        ErrorCode.SERVICE_UNAVAILABLE,
        f"{service.title} has no engine configured on this node; nothing was charged.",
    )


def _available(service: AnySpec, engines: Engines) -> None:
    """The same refusal as the paid ``service``: no engine, no session or call of it to
    follow up."""
    if not service.is_available(engines):
        raise _unavailable(service)


def _bridge_not_found(session_id: str, what: str = "voice-bridge session") -> ApiError:
    return ApiError(ErrorCode.VOICE_BRIDGE_SESSION_NOT_FOUND, f"No {what} {session_id!r}.")


async def bridge_say(
    engines: Engines,
    sessions: voice_bridge.VoiceBridgeSessions,
    params: VoiceBridgeSayParams,
) -> dict[str, Any]:
    """``{ success, bytesSent }``: the utterance is played into the open session."""
    await params.prechecks()  # decodes the audio off the loop: 400 before anything else
    _available(VOICE_BRIDGE_OPEN, engines)
    utterance: Utterance = params.checked()
    sent = await sessions.say(params.sessionId, utterance)
    if sent is None:
        raise _bridge_not_found(params.sessionId, "open voice-bridge session")
    return {"success": True, "bytesSent": sent}


async def bridge_poll(
    engines: Engines,
    sessions: voice_bridge.VoiceBridgeSessions,
    params: VoiceBridgePollParams,
) -> dict[str, Any]:
    """The session's state and the events after ``cursor``."""
    _available(VOICE_BRIDGE_OPEN, engines)
    found = await sessions.poll(params.sessionId, params.cursor)
    if found is None:
        raise _bridge_not_found(params.sessionId)
    return found.body()


async def bridge_end(
    engines: Engines,
    sessions: voice_bridge.VoiceBridgeSessions,
    params: VoiceBridgeEndParams,
) -> dict[str, Any]:
    """Hang up; the elapsed time is billed and the rest of the deposit refunded."""
    _available(VOICE_BRIDGE_OPEN, engines)
    settlement = await sessions.end(params.sessionId)
    if settlement is None:
        raise _bridge_not_found(params.sessionId)
    return settlement.body()


async def voice_bridge_say(
    env: OperationEnv, args: VoiceBridgeSayParams, call: Call
) -> VoiceBridgeSaid:
    return VoiceBridgeSaid.model_validate(await _on_bridge(env, bridge_say, args))


async def poll_voice_bridge(
    env: OperationEnv, args: VoiceBridgePollParams, call: Call
) -> VoiceBridgeEvents:
    return VoiceBridgeEvents.model_validate(await _on_bridge(env, bridge_poll, args))


async def end_voice_bridge(
    env: OperationEnv, args: VoiceBridgeEndParams, call: Call
) -> VoiceBridgeSettlement:
    return VoiceBridgeSettlement.model_validate(await _on_bridge(env, bridge_end, args))


A = TypeVar("A")


async def _on_bridge(
    env: OperationEnv,
    action: Callable[[Engines, voice_bridge.VoiceBridgeSessions, A], Awaitable[Any]],
    args: A,
) -> Any:
    """One of the voice bridge's say, poll and end on the node's sessions."""
    sessions = voice_bridge.sessions_for(env.voice_bridge)
    return await action(env.engines, sessions, args)


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
    untrusted=_heard,
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
    untrusted=_heard,
    read_only=False,
    error_codes=_BRIDGE_CODES,
    family=VOICE_BRIDGE,
    tags=(VOICE_BRIDGE_OPEN.category, "free"),
)


# -- AI call --------------------------------------------------------------------------------

AI_CALLS = Family("AI call", AI_CALL.slug)
_AI_CALL_CODES = (
    ErrorCode.L402_INVALID_PARAMS,
    ErrorCode.AI_CALL_NOT_FOUND,
    ErrorCode.SERVICE_UNAVAILABLE,
)


class ConfirmAiCallArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="confirm_ai_call arguments")

    sessionId: AiCallId = Field(description="The session_id of the pending_confirm answer.")
    answers: AiCallAnswers | None = Field(
        None, description="Answers to the clarification questions, by question (at most 50)."
    )

    @property
    def session_id(self) -> str:
        return self.sessionId


async def ai_call_confirm(
    settings: Settings,
    engines: Engines,
    records: ai_calls.AiCallRecords,
    session_id: str,
    answers: Mapping[str, AiCallAnswer] | None,
) -> dict[str, Any]:
    """Confirm a ``pending_confirm`` call on its original payment: the call proceeds."""
    _available(AI_CALL, engines)
    record = await records.confirm(session_id, answers or {})
    if record is None:
        raise ApiError(
            ErrorCode.AI_CALL_NOT_FOUND,
            f"No AI call awaits confirmation under session_id {session_id!r}.",
        )
    return record.body(settings.public_base_url)


async def ai_call_poll(
    settings: Settings, engines: Engines, records: ai_calls.AiCallRecords, call_id: str
) -> dict[str, Any]:
    """The call record: status, transcript, results and refund status."""
    _available(AI_CALL, engines)
    record = await records.record(call_id)
    if record is None:
        raise ApiError(ErrorCode.AI_CALL_NOT_FOUND, f"No AI call with call_id {call_id!r}.")
    return record.body(settings.public_base_url)


async def confirm_ai_call(
    env: OperationEnv, args: AiCallConfirmParams | ConfirmAiCallArgs, call: Call
) -> AiCallRecord:
    settings = env.settings
    records = ai_calls.records_for(env.ai_calls)
    return AiCallRecord.model_validate(
        await ai_call_confirm(settings, env.engines, records, args.session_id, args.answers)
    )


async def poll_ai_call(env: OperationEnv, args: AiCallPollParams, call: Call) -> AiCallRecord:
    settings = env.settings
    records = ai_calls.records_for(env.ai_calls)
    return AiCallRecord.model_validate(
        await ai_call_poll(settings, env.engines, records, args.call_id)
    )


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
        when=asks_for("action"),
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
    untrusted=_call_words,
)

POLL_AI_CALL: OperationSpec[AiCallPollParams, AiCallRecord] = OperationSpec(
    name="poll_ai_call",
    title="Poll an AI call",
    description="Without call_id: the service description. With call_id: the call's record "
    "(transcript, results and refund status when the call has them), free of charge; "
    "x-available is whether polling works on this node. status: pending_confirm, placing, "
    "calling, redial_scheduled, ended, failed or expired; results: outcome (completed, "
    "no_answer, busy, voicemail, voicemail_left, dropped, opted_out, failed, refused, "
    "expired), summary, successful, data, attempts, billed_minutes, depositSats, "
    "perMinuteSats, usedSats, refundableSats; refund_status: paying, paid, claimable, "
    "claiming, expired or none.",
    params=AiCallPollParams,
    result=AiCallRecord,
    handler=poll_ai_call,
    http=HttpRoute(
        "GET",
        f"/api/l402/{AI_CALL.slug}",
        example=f"GET /api/l402/{AI_CALL.slug}?call_id=<call_id>",
        on_service=AI_CALL.slug,
        when=asks_for("call_id"),
        headers={"Cache-Control": "no-store"},  # the call moves on between polls
        summary=f"Describe {AI_CALL.title}, or poll one call with call_id (free)",
        llms="`GET {url}?call_id=<call_id>` polls a call (transcript, results, refund status)",
    ),
    error_codes=(*_AI_CALL_CODES, ErrorCode.INTERNAL_ERROR),
    family=AI_CALLS,
    untrusted=_call_words,
)


# -- SMS and automated-call delivery status ------------------------------------------------

_DELIVERY_CODES = (
    ErrorCode.L402_INVALID_PARAMS,
    ErrorCode.DELIVERY_NOT_FOUND,
    ErrorCode.INTERNAL_ERROR,
)


def _delivery_env(env: OperationEnv) -> deliveries.DeliveryEnv:
    if env.deliveries is None:
        raise ApiError(ErrorCode.INTERNAL_ERROR, "Delivery records are not available.")
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


SMS_STATUS: OperationSpec[SmsStatusParams, SmsDelivery] = free_status_read(
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
    service=SEND_SMS,
    path=deliveries.SMS_STATUS_PATH,
    keys=("message_id", "messageId"),
    reads="read one message's delivery status",
    llms="`GET {url}?message_id=<message_id>` reads an SMS's delivery status (free)",
    error_codes=_DELIVERY_CODES,
    family=Family("SMS", SEND_SMS.slug),
)

CALL_STATUS: OperationSpec[CallStatusParams, CallDelivery] = free_status_read(
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
    service=CALL,
    path=deliveries.CALL_STATUS_PATH,
    keys=("call_id", "callId"),
    reads="read one call's status and billing",
    llms="`GET {url}?call_id=<call_id>` reads a call's status, billing and refund (free)",
    error_codes=_DELIVERY_CODES,
    family=Family("Automated call", CALL.slug),
)


# -- claim-refund ---------------------------------------------------------------------------


class ClaimRefundParams(BaseModel):
    """``POST /api/claim-refund``: the AI call by its call_id, or by its payment (then
    with the proof of payment for a payment made through an HTTP 402 challenge)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, title="claim-refund")

    call_id: AiCallId | None = Field(
        None, validation_alias=alias("call_id", "callId"), description="The call's call_id."
    )
    payment_id: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        validation_alias=alias("payment_id", "paymentId"),
        description="The call's paymentId (instead of call_id).",
    )

    @model_validator(mode="before")
    @classmethod
    def _preimage_refused(cls, data: Any) -> Any:
        return refuse_bare_preimage(data, SEND_AUTHORIZATION)

    @model_validator(mode="after")
    def _one_id(self) -> ClaimRefundParams:
        if (self.call_id is None) == (self.payment_id is None):
            raise ValueError("give call_id or payment_id (one of them)")
        return self


async def claim_refund(env: OperationEnv, args: ClaimRefundParams, call: Call) -> ClaimedRefund:
    """The settled AI call's refund: the link when it is claimable (no refund_address, or
    the payout to it failed); otherwise REFUND_NOT_AVAILABLE with refund_status (paid to
    the address, on its way, nothing left, or the call still running)."""
    runner = env.ai_calls
    if runner is None or not AI_CALL.is_available(env.engines):
        raise _unavailable(AI_CALL)
    if args.payment_id is not None:
        payment = await env.gate.get_payment(args.payment_id)
        if payment is None or payment.service != AI_CALL.slug:
            raise ApiError(ErrorCode.AI_CALL_NOT_FOUND, "No AI call was paid with this paymentId.")
        if not proves(
            env.gate.verifier,
            payment,
            authorization=call.authorization,
            payment_id=args.payment_id,
        ):
            raise ApiError(
                ErrorCode.PAYMENT_INVALID,
                "This payment was created by an HTTP 402 challenge: only its payer may claim "
                f"its refund. Give the call_id instead, or: {SEND_AUTHORIZATION}",
                extra={"paymentId": args.payment_id},
            )
    row, settled = await runner.claim(args.call_id, args.payment_id)
    if settled is None:
        record = await runner.record(row.call_id)
        status = record.refund_status if record is not None else None
        raise ApiError(
            ErrorCode.REFUND_NOT_AVAILABLE,
            "The call has not ended yet: its unused deposit is refunded when it ends."
            if status is None
            else "This call's refund was issued with its failure; it is shown at /recover.",
            extra={"call_id": row.call_id, "refund_status": status or "pending"},
        )
    body = settled.body(with_link=settled.refund_status == "claimable")
    if settled.refund_status != "claimable":
        why = {
            "none": "nothing of the deposit is left to refund",
            "paid": "the refund was paid out already",
            "paying": "the refund is on its way to the Lightning address",
            "claiming": "the refund link was claimed; its payout is under way",
            "expired": "the refund link expired unclaimed",
        }.get(settled.refund_status, settled.refund_status)
        raise ApiError(
            ErrorCode.REFUND_NOT_AVAILABLE,
            f"Nothing to claim: {why}.",
            extra={"call_id": row.call_id, **body},
        )
    return ClaimedRefund.model_validate({"success": True, "call_id": row.call_id, **body})


CLAIM_REFUND: OperationSpec[ClaimRefundParams, ClaimedRefund] = OperationSpec(
    name="claim_refund",
    title="Claim an AI call's refund",
    description="After an AI call ended: the unused part of its deposit as a one-time "
    "LNURL-withdraw link (when no refund_address was given, or the payout to it failed). "
    "By call_id, or by payment_id with the paying Authorization header (the credential) "
    "for a payment made through an HTTP 402 challenge. Returns { "
    "success, call_id, refund_status, depositSats, usedSats, refundableSats, refund }. "
    "Nothing to claim (paid to the Lightning address, nothing left, call still running): "
    "REFUND_NOT_AVAILABLE with refund_status. Free.",
    params=ClaimRefundParams,
    result=ClaimedRefund,
    handler=claim_refund,
    http=HttpRoute(
        "POST",
        "/api/claim-refund",
        example='{"call_id": "<call_id>"}',
        payer_credential=True,
        summary="Claim the unused deposit of an ended AI call as an LNURL-withdraw link, by "
        "call_id or by payment_id (with the proof of payment). Free.",
        llms='`POST {url}` with `{{"call_id": "..."}}` claims the unused deposit of an ended '
        "AI call (LNURL-withdraw)",
    ),
    read_only=False,
    rate_rule="refund",
    error_codes=(
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.AI_CALL_NOT_FOUND,
        ErrorCode.PAYMENT_INVALID,
        ErrorCode.REFUND_NOT_AVAILABLE,
        ErrorCode.SERVICE_UNAVAILABLE,
        ErrorCode.RATE_LIMITED,
        ErrorCode.INTERNAL_ERROR,
    ),
    family=AI_CALLS,
)
