"""Communication: e-mail, SMS, automated calls, AI-agent calls, fax send and receive, and
the voice bridge. Destinations are priced by country (E.164 prefix table in
telephony.py, BTC-pegged). Remote engines: ``[engines.email]``, ``sms``, ``voice``,
``ai_call``, ``fax``, ``voice_bridge``.

The voice bridge's spec slug is ``voice-bridge/open``; the paid route is
``/api/l402/{slug}`` with one path segment, so its slug here is
``voice-bridge-open`` (a router may also map the slash form to it).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Annotated, Any, Literal, Self

from pydantic import Field, StringConstraints, field_validator, model_validator

from satsgate.domain.telephony import check_e164, served_number
from satsgate.domain.voices import check_ai_call_locale, check_ai_call_voice
from satsgate.engines import EngineError
from satsgate.engines.fax import InboundRequest
from satsgate.engines.mail import EmailEngine, OutgoingEmail
from satsgate.engines.messaging import SmsEngine, SmsRequest
from satsgate.engines.synthesis import SynthesisEngine, SynthesisRequest
from satsgate.engines.voice_call import CallRequest, VoiceCallEngine
from satsgate.errors import ErrorCode
from satsgate.services.base import (
    FlatPrice,
    Params,
    PriceShape,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.catalog.models import EMAIL_MODEL_ID
from satsgate.services.catalog.pricing import (
    AI_CALL_MIN_SATS,
    EMAIL_SATS,
    MSAT,
    ai_call_min_msat,
    ai_call_msat,
    call_min_msat,
    call_msat,
    sms_min_msat,
    sms_msat,
    voice_bridge_min_msat,
)
from satsgate.services.comms import deliveries, faxes
from satsgate.services.comms.ai_call_runner import AI_CALL_RUNNER
from satsgate.services.comms.ai_calls import AiCallAnswers
from satsgate.services.comms.bridge_calls import BRIDGE_CALLS
from satsgate.services.comms.faxes import FAX_MAX_BYTES, ReceiveFaxParams, SendFaxParams
from satsgate.services.comms.screening import Outreach, html_text, screen
from satsgate.services.comms.voice_bridge import VoiceBridgeOpenParams
from satsgate.services.inputs.params import (
    ServiceParams,
    alias,
    body_limit,
    check_email_address,
    lightning_address,
)

log = logging.getLogger(__name__)

MAX_EMAIL_RECIPIENTS = 10
# The text-to-speech tier a call speaks with when its provider plays the node's audio.
GLOBAL_TTS_MODEL = 43


def _single_line(value: str | None) -> str | None:
    if value is not None and any(ch in value for ch in "\r\n\0"):
        raise ValueError("must be a single line")
    return value


# -- send-email ----------------------------------------------------------------------------


class SendEmailParams(ServiceParams):
    to: str | list[str] = Field(
        validation_alias=alias("to", "email", "recipients"),
        description=f"Recipient address, or a list of up to {MAX_EMAIL_RECIPIENTS}; "
        "priced per recipient.",
    )
    subject: str = Field(min_length=1, max_length=200)
    text: str | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        validation_alias=alias("text", "body", "message"),
        description="Plain-text body; send text, html or both.",
    )
    html: str | None = Field(None, min_length=1, max_length=500_000)
    replyTo: str | None = Field(None, validation_alias=alias("replyTo", "reply_to"))
    fromName: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        validation_alias=alias("fromName", "from_name"),
        description="Display name of the sender (the address is the node's).",
    )

    @field_validator("to")
    @classmethod
    def _addresses(cls, value: str | list[str]) -> str | list[str]:
        addresses = [value] if isinstance(value, str) else value
        if not 1 <= len(addresses) <= MAX_EMAIL_RECIPIENTS:
            raise ValueError(f"send to 1 to {MAX_EMAIL_RECIPIENTS} recipients")
        if len({a.lower() for a in addresses}) != len(addresses):
            raise ValueError("a recipient is listed twice")
        for address in addresses:
            check_email_address(address)
        return value

    @field_validator("replyTo")
    @classmethod
    def _reply_to(cls, value: str | None) -> str | None:
        return None if value is None else check_email_address(value)

    @field_validator("subject", "fromName")
    @classmethod
    def _header_safe(cls, value: str | None) -> str | None:
        return _single_line(value)

    @model_validator(mode="after")
    def _has_body(self) -> Self:
        if self.text is None and self.html is None:
            raise ValueError("send text, html or both")
        return self

    @property
    def recipients(self) -> list[str]:
        return [self.to] if isinstance(self.to, str) else list(self.to)


async def send_email(ctx: ServiceContext, params: SendEmailParams) -> ServiceResult:
    """Hand the message to the configured mail engine (the operator's SMTP server).

    Charged per recipient the server accepted; recipients it refused while taking the
    others are refunded (``partial_refund``). Screened first (subject, text, the HTML's
    text and the sender name): a flagged message is held for review, not sent.
    """
    await screen(
        ctx,
        Outreach(
            channel="email",
            recipients=tuple(params.recipients),
            text="\n".join(
                part for part in (params.subject, params.text, html_text(params.html or "")) if part
            ),
            sender_name=params.fromName,
        ),
    )
    message = OutgoingEmail(
        to=tuple(params.recipients),
        subject=params.subject,
        text=params.text,
        html=params.html,
        reply_to=params.replyTo,
        from_name=params.fromName,
    )
    sent = await ctx.engines.run(
        "email",
        EmailEngine,
        lambda engine, _model: engine.send(message),
    )
    body = {
        "success": True,
        "messageId": sent.message_id,
        "accepted": list(sent.accepted),
        "refused": [{"to": to, "code": code} for to, code in sent.refused.items()],
    }
    return ServiceResult(body, charged_msat=EMAIL_SATS * MSAT * len(sent.accepted))


SEND_EMAIL = ServiceSpec(
    slug="send-email",
    tool_name="send_email",
    category="utility",
    title="Send e-mail",
    description="Send an e-mail (text and/or HTML) to up to 10 recipients: { success, "
    "messageId, accepted, refused }. Priced per recipient; recipients the mail server refuses are "
    "refunded.",
    params=SendEmailParams,
    price_msat=lambda p, _book: EMAIL_SATS * MSAT * len(p.recipients),
    handler=send_email,
    price_shape=PriceShape("per_recipient", "per recipient", EMAIL_SATS * MSAT, estimate="email"),
    model_ids=(EMAIL_MODEL_ID,),
    failure_codes=(
        ErrorCode.INVALID_INPUT,
        ErrorCode.SERVICE_ERROR,
        ErrorCode.CONTENT_POLICY_HELD,
        ErrorCode.RECIPIENT_OPTED_OUT,
    ),
    max_body_bytes=2 * 1024 * 1024,
    example={"to": "alice@example.org", "subject": "Hello", "text": "Paid by Lightning."},
    engine="email",
    recipients=lambda p: p.recipients,
)

# How a send through a telephony carrier (SMS, call, fax) can fail after payment, refunded.
_CARRIER_FAILURES = (
    ErrorCode.INVALID_INPUT,
    ErrorCode.SERVICE_ERROR,
    ErrorCode.RATE_LIMITED,
    ErrorCode.TIMEOUT,
    ErrorCode.RECIPIENT_OPTED_OUT,
    ErrorCode.CONTENT_POLICY_HELD,
)

# -- send-sms ------------------------------------------------------------------------------


class SendSmsParams(ServiceParams):
    phone_number: str = Field(
        validation_alias=alias("phone_number", "phoneNumber", "to"),
        description="E.164, e.g. +14155550123.",
    )
    message: str = Field(min_length=1, max_length=120, description="At most 120 characters.")

    _route = field_validator("phone_number")(served_number)


async def send_sms(ctx: ServiceContext, params: SendSmsParams) -> ServiceResult:
    """Screen, send, record; plain-text answer with the message_id and its free status
    read. A failure is refunded by the gate and the record shows ``failed``."""
    await screen(ctx, Outreach("sms", (params.phone_number,), params.message))

    async def send(engine: SmsEngine, delivery_id: str) -> tuple[str, str]:
        sent = await engine.send_sms(SmsRequest(params.phone_number, params.message, delivery_id))
        return sent.message_id, sent.status

    delivery_id, status = await deliveries.send_recorded(
        ctx,
        "sms",
        "sms",
        SmsEngine,
        send,
        phone_number=params.phone_number,
        paid_msat=sms_msat(ctx.rate_book, params.phone_number),
    )
    url = deliveries.status_url(ctx.settings.public_base_url, delivery_id)
    text = (
        f"SMS accepted for {params.phone_number}.\n"
        f"message_id: {delivery_id}\n"
        f"status: {status}\n"
        f"status_url: {url}\n"
    )
    return ServiceResult(
        text,
        content_type="text/plain",
        headers={"X-Message-Id": delivery_id, "X-Status-Url": url},
    )


SEND_SMS = ServiceSpec(
    slug="send-sms",
    tool_name="send_sms",
    category="telco",
    title="Send SMS",
    description="Send one SMS of at most 120 characters to an E.164 number. Plain-text answer "
    "with message_id, status and status_url (the delivery status, free: GET "
    "/api/l402/send-sms?message_id=..., tool get_sms_status). Priced by destination "
    "country; refunded when it ends undelivered or failed.",
    params=SendSmsParams,
    price_msat=lambda p, book: sms_msat(book, p.phone_number),
    handler=send_sms,
    price_shape=PriceShape(
        "per_destination",
        "per message",
        sms_min_msat,
        rate_by=("destination",),
        btc_pegged=True,
        estimate="sms",
        note="One price per destination country (E.164 prefix); the minimum is the cheapest.",
    ),
    model_ids=(20,),
    failure_codes=_CARRIER_FAILURES,
    max_body_bytes=16 * 1024,
    example={"phone_number": "+14155550123", "message": "Your table is ready at 8pm."},
    engine="sms",
    recipients=lambda p: (p.phone_number,),
)

# -- call (automated) ----------------------------------------------------------------------


class CallParams(ServiceParams):
    phone_number: str = Field(
        validation_alias=alias("phone_number", "phoneNumber", "to"), description="E.164."
    )
    message: str = Field(
        min_length=1,
        max_length=2000,
        validation_alias=alias("message", "text"),
        description="What the call says (synthesized speech).",
    )
    language: str = Field("en-US", description="Speech locale (the AI-call locale list).")
    repeat: int = Field(1, ge=1, le=3, description="Times the message is played.")
    duration_minutes: int = Field(
        1,
        ge=1,
        le=10,
        validation_alias=alias("duration_minutes", "durationMinutes"),
        description="Longest call time paid for, 1 to 10 minutes.",
    )

    _route = field_validator("phone_number")(served_number)
    _locale = field_validator("language")(check_ai_call_locale)


async def _node_speech(ctx: ServiceContext, params: CallParams) -> str | None:
    """The message spoken by this node's own text-to-speech (the global tier, 43) as an
    expiring file link the call plays; None (the provider speaks it) when the node has
    no such engine or it cannot speak this language."""
    if not ctx.engines.serves_model("tts", GLOBAL_TTS_MODEL):
        return None
    request = SynthesisRequest(
        text=params.message,
        model_id=GLOBAL_TTS_MODEL,
        language=None if params.language == "multi" else params.language,
        format="mp3",
    )
    try:
        result = await ctx.engines.run(
            "tts",
            SynthesisEngine,
            lambda engine, name: engine.synthesize(replace(request, model_name=name)),
            model_id=GLOBAL_TTS_MODEL,
        )
    except EngineError as exc:
        log.info("call: the node's speech failed (%s); the provider speaks instead", exc.code)
        return None
    return (await ctx.files.save(result.audio, "mp3")).url


async def place_call(ctx: ServiceContext, params: CallParams) -> ServiceResult:
    """Screen, dial, record: ``{ success, call_id, status, status_url, max_duration_s }``.
    The call is billed later by its connected minutes (at least one when answered;
    nothing when nobody answered) and the rest refunded (services.comms.deliveries)."""
    await screen(ctx, Outreach("call", (params.phone_number,), params.message))
    rate = call_msat(ctx.rate_book, params.phone_number, 1)

    async def send(engine: VoiceCallEngine, delivery_id: str) -> tuple[str, str]:
        audio_url = None
        if getattr(engine, "wants_audio", False):
            audio_url = await _node_speech(ctx, params)
        request = CallRequest(
            to=params.phone_number,
            text=params.message,
            language=params.language,
            repeat=params.repeat,
            max_duration_s=params.duration_minutes * 60,
            reference=delivery_id,
            audio_url=audio_url,
        )
        placed = await engine.place_call(request)
        return placed.call_id, placed.status

    delivery_id, status = await deliveries.send_recorded(
        ctx,
        "call",
        "voice",
        VoiceCallEngine,
        send,
        phone_number=params.phone_number,
        paid_msat=rate * params.duration_minutes,
        rate_msat=rate,
    )
    return ServiceResult(
        {
            "success": True,
            "call_id": delivery_id,
            "status": status,
            "status_url": deliveries.status_url(ctx.settings.public_base_url, delivery_id),
            "max_duration_s": params.duration_minutes * 60,
        }
    )


CALL = ServiceSpec(
    slug="call",
    tool_name="call",
    category="telco",
    title="Automated call",
    description="Phone an E.164 number and speak a message: { success, call_id, status, "
    "status_url, max_duration_s }. Prepaid for duration_minutes at the destination "
    "country's rate per minute; billed by the connected minutes (at least one when "
    "answered), the rest refunded, everything when nobody answers (status and refund: GET "
    "/api/l402/call?call_id=..., tool get_call_status).",
    params=CallParams,
    price_msat=lambda p, book: call_msat(book, p.phone_number, p.duration_minutes),
    handler=place_call,
    price_shape=PriceShape(
        "per_minute",
        "per minute",
        call_min_msat,
        rate_by=("destination",),
        btc_pegged=True,
        estimate="call",
        note="duration_minutes (1 to 10) at the destination country's rate per minute.",
    ),
    model_ids=(20,),
    failure_codes=_CARRIER_FAILURES,
    max_body_bytes=32 * 1024,
    example={"phone_number": "+14155550123", "message": "Your table is ready."},
    engine="voice",
    recipients=lambda p: (p.phone_number,),
)

# -- delivery status reads (free) -----------------------------------------------------------

DeliveryId = Annotated[
    str, StringConstraints(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
]


class SmsStatusParams(Params):
    """The query of the free status read ``GET /api/l402/send-sms?message_id=<message_id>``."""

    message_id: DeliveryId = Field(
        validation_alias=alias("message_id", "messageId"),
        description="The message_id of the send-sms answer.",
    )


class CallStatusParams(Params):
    """The query of the free status read ``GET /api/l402/call?call_id=<call_id>``."""

    call_id: DeliveryId = Field(
        validation_alias=alias("call_id", "callId"),
        description="The call_id of the call answer.",
    )


# -- ai-call -------------------------------------------------------------------------------


class AiCallParams(ServiceParams):
    """HTTP form snake_case, tool form camelCase; both accepted."""

    phone_number: str = Field(
        validation_alias=alias("phone_number", "phoneNumber"), description="E.164."
    )
    task: str = Field(min_length=1, max_length=4000, description="Instructions for the agent.")
    duration_minutes: int = Field(
        3,
        ge=1,
        le=10,
        validation_alias=alias("duration_minutes", "durationMinutes"),
        description="Deposit for 1 to 10 minutes, default 3; unused time is refunded.",
    )
    language: str = Field("en-US", description="Locale code, default en-US.")
    voice: str | None = Field(
        None, description="Adrian, Myra, Paola, Chris, Marissa, Nathan, Cimo, Drew or Olivia."
    )
    begin_message: str | None = Field(
        None, min_length=1, max_length=500, validation_alias=alias("begin_message", "beginMessage")
    )
    caller_name: str | None = Field(
        None, min_length=1, max_length=80, validation_alias=alias("caller_name", "callerName")
    )
    reason: str | None = Field(None, min_length=1, max_length=200)
    callback_number: str | None = Field(
        None,
        validation_alias=alias("callback_number", "callbackNumber"),
        description="The caller's own number (E.164); given only when asked and in a voicemail.",
    )
    voicemail: Literal["message", "hangup"] = "hangup"
    call_screening: bool = Field(True, validation_alias=alias("call_screening", "callScreening"))
    refund_address: str | None = Field(
        None,
        max_length=254,
        validation_alias=alias("refund_address", "refundAddress"),
        description="Lightning address for the automatic refund of unused time.",
    )

    _route = field_validator("phone_number")(served_number)
    _locale = field_validator("language")(check_ai_call_locale)
    _refund = field_validator("refund_address")(lightning_address)

    @field_validator("voice")
    @classmethod
    def _voice(cls, value: str | None) -> str | None:
        return None if value is None else check_ai_call_voice(value)

    @field_validator("callback_number")
    @classmethod
    def _callback_number(cls, value: str | None) -> str | None:
        return None if value is None else check_e164(value)

    @field_validator("caller_name", "reason", "begin_message")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return _single_line(value)


# The telephony engine's ids (call_id, session_id) are opaque to satsgate: visible ASCII,
# bounded so a lookup never carries an unbounded or multi-line key.
AiCallId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[!-~]+$")]


class AiCallConfirmParams(Params):
    """The HTTP body ``{action: 'confirm', session_id, answers?}`` that confirms a
    ``pending_confirm`` call on its original payment (free, no invoice)."""

    action: Literal["confirm"]
    session_id: AiCallId = Field(
        validation_alias=alias("session_id", "sessionId"),
        description="The session_id of the pending_confirm answer.",
    )
    answers: AiCallAnswers | None = Field(
        None, description="Answers to the clarification questions, by question (at most 50)."
    )


class AiCallPollParams(Params):
    """The query of the free poll ``GET /api/l402/ai-call?call_id=<call_id>``."""

    call_id: AiCallId = Field(description="The call_id returned when the call was placed.")


async def ai_call(ctx: ServiceContext, params: AiCallParams) -> ServiceResult:
    """Screen the call (a flagged task is held, nothing placed), then either wait in
    pending_confirm with clarification questions or place it:
    satsgate.services.comms.ai_call_runner.
    The deposit is settled when the call ends (billed by the started minute)."""
    from satsgate.services.comms.screening import Outreach, screen

    runner = ctx.desk(AI_CALL_RUNNER)
    if runner is None:
        raise EngineError(ErrorCode.SERVICE_ERROR, "AI calls cannot be placed from here.")
    spoken = [params.task, params.begin_message or "", params.reason or ""]
    await screen(
        ctx,
        Outreach(
            channel="ai_call",
            recipients=(params.phone_number,),
            text="\n".join(part for part in spoken if part),
            sender_name=params.caller_name,
        ),
    )
    return await runner.start(ctx, params.model_dump(mode="json"))


AI_CALL = ServiceSpec(
    slug="ai-call",
    tool_name="ai_call",
    category="telco",
    title="AI phone call",
    description="An AI agent phones a number and carries out a task: { success, call_id, "
    "status, poll_url }; status pending_confirm comes with questions and a session_id to "
    "confirm with. Deposit of duration_minutes times the destination's per-minute rate "
    f"(telephony plus AI), minimum {AI_CALL_MIN_SATS}; billed by the started minute, "
    "unused time refunded to refund_address or claimed at POST /api/claim-refund.",
    params=AiCallParams,
    price_msat=lambda p, book: ai_call_msat(book, p.phone_number, p.duration_minutes),
    handler=ai_call,
    price_shape=PriceShape(
        "per_minute",
        "per minute",
        ai_call_min_msat,
        rate_by=("destination",),
        btc_pegged=True,
        estimate="ai-call",
        note="A deposit of duration_minutes (1 to 10) at the destination's rate per minute "
        f"(telephony plus AI), minimum {AI_CALL_MIN_SATS}; unused minutes are refunded.",
    ),
    model_ids=(20,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR, ErrorCode.CONTENT_POLICY_HELD),
    max_body_bytes=64 * 1024,
    example={"phone_number": "+14155550123", "task": "Book a table for two at 7pm."},
    engine="ai_call",
    recipients=lambda p: (p.phone_number,),
)

# -- fax -----------------------------------------------------------------------------------

SEND_FAX = ServiceSpec(
    slug="send-fax",
    tool_name="send_fax",
    category="fax",
    title="Send fax",
    description="Fax a PDF (up to 50 pages, 20 MB) to an E.164 number: { success, faxId, "
    "status, status_url }. Read the status for free at status_url (or MCP get_fax_status): "
    "queued, sending, delivered or failed; a fax that fails is refunded in full (the "
    "refund link is in the payer's status read). One price per fax.",
    params=SendFaxParams,
    price_msat=faxes.FAX_SEND_PRICE,
    handler=faxes.send_fax,
    model_ids=(44,),
    failure_codes=_CARRIER_FAILURES,
    max_body_bytes=body_limit(FAX_MAX_BYTES),
    example={"faxNumber": "+14155550123", "documentBase64": "<base64 PDF>"},
    engine="fax",
    recipients=lambda p: (p.faxNumber,),
)


RECEIVE_FAX = ServiceSpec(
    slug="receive-fax",
    tool_name="receive_fax",
    category="fax",
    title="Receive fax",
    description="An inbound fax number of the requested country for 24 hours, yours alone: "
    "{ success, inboxId, faxNumber, expiresAt, poll_url, faxes }. Faxes it receives are "
    "listed with download links by GET poll_url (free; keep inboxId secret) and, with "
    "forwardEmail, e-mailed as a link. Received documents are deleted 12 hours after "
    "arrival.",
    params=ReceiveFaxParams,
    price_msat=FlatPrice.of_sats(500, "fax-receive"),
    handler=faxes.receive_fax,
    engine_request=lambda p: InboundRequest(p.country),
    engine_request_field="country",
    model_ids=(45,),
    failure_codes=(ErrorCode.SERVICE_ERROR,),
    max_body_bytes=16 * 1024,
    example={"country": "US"},
    engine="fax",
    recipients=lambda p: (p.forwardEmail,) if p.forwardEmail else (),
)

# -- voice bridge --------------------------------------------------------------------------


async def _open_voice_bridge(ctx: ServiceContext, params: VoiceBridgeOpenParams) -> ServiceResult:
    """Dial and answer the session (services.comms.bridge_calls): the deposit is settled
    when the session ends; a failure to dial is refunded in full by the gate."""
    sessions = ctx.desk(BRIDGE_CALLS)
    if sessions is None:
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The voice bridge is not available on this node."
        )
    return ServiceResult(body=await sessions.open(ctx, params))


VOICE_BRIDGE_OPEN = ServiceSpec(
    slug="voice-bridge-open",
    tool_name="open_voice_bridge",
    category="telco",
    title="Open voice bridge",
    description="Dial a number and bridge it turn by turn (say, poll, end): { success, "
    "sessionId, callId, activeCodec, hdAvailable, language, depositSats, perMinuteSats, "
    "maxDurationSec }. Deposit of durationMinutes at the destination's per-minute rate; "
    "elapsed time is billed, the rest refunded.",
    params=VoiceBridgeOpenParams,
    price_msat=lambda p, book: p.durationMinutes * p.per_minute_msat(book),
    handler=_open_voice_bridge,
    price_shape=PriceShape(
        "per_minute",
        "per minute",
        voice_bridge_min_msat,
        rate_by=("destination",),
        btc_pegged=True,
        note="A deposit of durationMinutes (1 to 60) at the destination's rate per minute; "
        "the elapsed time is billed and the rest refunded.",
    ),
    model_ids=(20,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
    max_body_bytes=16 * 1024,
    example={"phoneNumber": "+14155550123", "durationMinutes": 5},
    engine="voice_bridge",
    recipients=lambda p: (p.phoneNumber,),
)

SERVICES: tuple[ServiceSpec[Any], ...] = (
    SEND_EMAIL,
    SEND_SMS,
    CALL,
    AI_CALL,
    SEND_FAX,
    RECEIVE_FAX,
    VOICE_BRIDGE_OPEN,
)
