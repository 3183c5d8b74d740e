"""Provider kind ``telnyx``: Telnyx's v2 API for the engines ``fax`` (Programmable Fax,
send and inbound), ``sms`` (Messaging API) and ``voice`` (Call Control: dial, then
speak or play the message, then hang up by commands).

The operator's table::

    [providers.tx]
    kind = "telnyx"
    api_key_env = "TELNYX_API_KEY"          # Bearer key (API v2)
    public_key = "<base64, 32 bytes>"       # the account's webhook public key (portal)
    from_number = "+13125550100"            # faxes, messages and calls come from it
    fax_connection_id = "..."               # fax: the Programmable Fax Application's id
    inbound_fax_numbers = ["+13125550101"]  # receive-fax: numbers on that application
    messaging_profile_id = "..."            # sms: optional (the profile, or its number pool)
    call_connection_id = "..."              # voice: the Call Control Application's id
    # optional: base_url, timeout_s (30), max_retries (0..2, default 1), fax_from_number,
    # status_poll_s (30: fax status polling when webhooks are late), media_hosts
    # (hosts an inbound fax may be fetched from; default the API host and telnyx.com),
    # ring_timeout_s (30), default_voice ("female"), [providers.tx.voices] locale = voice

Webhooks reach ``<public base URL>/api/webhooks/telnyx/<NAME>`` (``?ref=<satsgate's
id>`` is added on each fax, message and call sent; the operator sets the bare URL on the
fax application and the messaging profile for inbound faxes and STOP replies). Each is
verified with Ed25519 over ``f"{telnyx-timestamp}|{raw body}"`` against ``public_key``
and refused (403) unless its timestamp is within 300 s of now: a forged or stale
webhook changes nothing.

Errors: 429 and 5xx are retried (a POST only when the answer proves nothing was done:
429 and 503), then mapped to the catalog (RATE_LIMITED, L402_UPSTREAM_FAILED,
SERVICE_ERROR); a 400/422 whose error points at ``/to`` is INVALID_INPUT, Telnyx's
opted-out error RECIPIENT_OPTED_OUT. Messages never name the provider, its URL or the
key; the operator's log line names the engine, the kind, the upstream status and code.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.delivery import (
    InboundMessage,
    StatusUpdate,
    WebhookEvents,
    WebhookRequest,
    reference_of,
)
from satsgate.engines.errors import EngineError
from satsgate.engines.messaging import MessageStatus, SmsRequest, SmsSent
from satsgate.engines.providers.carriers import opt_out_by_reply, recording_opt_out
from satsgate.engines.providers.telnyx_client import KIND
from satsgate.engines.providers.telnyx_fax import TelnyxFax
from satsgate.engines.providers.telnyx_parsing import (
    count_or_none,
    reported_e164,
    reported_time,
    verify_signature,
)
from satsgate.engines.registry import EngineDeps
from satsgate.engines.voice_call import CallPlaced, CallRequest, CallStatus
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

_SEEN_EVENTS = 2048  # webhook ids remembered, to drop Telnyx's duplicate deliveries


class TelnyxProvider(TelnyxFax):
    """One ``[providers.NAME]`` table of kind ``telnyx``: the fax engine itself (TelnyxFax),
    the sms and voice engines, and the webhook endpoint of all three."""

    webhook_kind = KIND

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        super().__init__(config, deps)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._calls: OrderedDict[str, _Call] = OrderedDict()
        self._sms = TelnyxSms(self)
        self._voice = TelnyxVoice(self)

    # -- the Provider protocol ----------------------------------------------------------

    def engine(self, name: str) -> object | None:
        if name == "fax":
            if not self.fax_connection_id or not self.fax_from:
                raise EngineConfigError(
                    f"[providers.{self.config.name}] serves fax with fax_connection_id and "
                    "from_number (or fax_from_number)"
                )
            return self
        if name == "sms":
            if not self.from_number and not self.messaging_profile_id:
                raise EngineConfigError(
                    f"[providers.{self.config.name}] serves sms with from_number or "
                    "messaging_profile_id"
                )
            return self._sms
        if name == "voice":
            if not self.call_connection_id or not self.from_number:
                raise EngineConfigError(
                    f"[providers.{self.config.name}] serves voice with call_connection_id "
                    "(a Call Control application) and from_number"
                )
            return self._voice
        return None

    # -- webhooks -------------------------------------------------------------------------

    async def receive_events(self, request: WebhookRequest) -> WebhookEvents:
        """POST /api/webhooks/telnyx/<NAME>: 403 unless signed by the account's key within
        300 s (then nothing changes); else 200, also for events nobody waits for (Telnyx
        retries anything else). Fax events are taken here; message and call events
        become delivery reports and inbound messages for the app."""
        if request.method != "POST":
            return WebhookEvents(405)
        if not verify_signature(self._public_key, request.headers, request.body):
            log.warning("telnyx %s: webhook refused (signature or timestamp)", self.config.name)
            return WebhookEvents(403)
        try:
            doc = json.loads(request.body)
            data = doc["data"]
            event_type = str(data["event_type"])
            event_id = str(data.get("id") or "")
            payload = data.get("payload") or {}
            if not isinstance(payload, dict):
                raise TypeError("payload")
        except (ValueError, KeyError, TypeError):
            return WebhookEvents(400)
        if event_id:
            if event_id in self._seen:
                return WebhookEvents(200)  # a duplicate delivery
            self._seen[event_id] = None
            while len(self._seen) > _SEEN_EVENTS:
                self._seen.popitem(last=False)
        return await self.on_event(event_type, payload, data, reference_of(request.url))

    async def on_event(
        self,
        event_type: str,
        payload: dict[str, Any],
        data: Mapping[str, Any],
        reference: str | None,
    ) -> WebhookEvents:
        if event_type.startswith("fax."):
            self._on_fax_event(event_type, payload, data)
            return WebhookEvents(200)
        if event_type.startswith("message."):
            return await self._on_message_event(event_type, payload, reference)
        if event_type.startswith("call."):
            return self._on_call_event(event_type, payload, data, reference)
        return WebhookEvents(200)

    # -- messages ----------------------------------------------------------------------------

    async def _on_message_event(
        self, event_type: str, payload: Mapping[str, Any], reference: str | None
    ) -> WebhookEvents:
        if event_type == "message.received" or payload.get("direction") == "inbound":
            sender = payload.get("from")
            recipients = payload.get("to")
            number = reported_e164(
                sender.get("phone_number") if isinstance(sender, dict) else sender
            )
            to = ""
            if isinstance(recipients, list) and recipients and isinstance(recipients[0], dict):
                to = reported_e164(recipients[0].get("phone_number"))
            if not number:
                return WebhookEvents(200)
            message = InboundMessage(number, to, str(payload.get("text") or ""),
                                     str(payload.get("id") or ""))  # fmt: skip
            await opt_out_by_reply(self.deps.opt_outs, message, f"{KIND} {self.config.name}")
            return WebhookEvents(200, inbound=(message,))
        update = message_update(payload, reference)
        if not update.provider_ref:
            return WebhookEvents(200)
        return WebhookEvents(200, updates=(update,))

    # -- calls (Call Control) ----------------------------------------------------------------

    def _on_call_event(
        self,
        event_type: str,
        payload: Mapping[str, Any],
        data: Mapping[str, Any],
        reference: str | None,
    ) -> WebhookEvents:
        call_id = str(payload.get("call_control_id") or "")
        if not call_id:
            return WebhookEvents(200)
        call = self._calls.get(call_id)
        moment = reported_time(data.get("occurred_at"))
        at = int(moment)
        ref = reference or (call.request.reference if call is not None else None)

        def report(status: CallStatus, **extra: Any) -> WebhookEvents:
            update = StatusUpdate("call", call_id, status, reference=ref, at=at, **extra)
            return WebhookEvents(200, updates=(update,))

        if event_type == "call.initiated":
            return report("queued")
        if event_type == "call.answered":
            if call is None:  # a call this process did not place (or forgot): end it
                self.spawn(self._command(call_id, "hangup", {}))
                return report("in-progress")
            call.answered_at = moment
            self.spawn(self._play(call_id, call))
            return report("in-progress")
        if event_type in ("call.speak.ended", "call.playback.ended"):
            if call is not None:
                call.plays += 1
                if call.plays < call.request.repeat:
                    self.spawn(self._play(call_id, call))
                else:
                    self.spawn(self._command(call_id, "hangup", {}))
            return WebhookEvents(200)
        if event_type in ("call.machine.detection.ended", "call.machine.premium.detection.ended"):
            result = str(payload.get("result") or "")
            answered_by = {"human": "human", "machine": "machine"}.get(result, "unknown")
            if call is not None:
                call.answered_by = answered_by
            return report("in-progress", answered_by=answered_by)
        if event_type == "call.hangup":
            cause = str(payload.get("hangup_cause") or "")
            answered = call.answered_at if call is not None else None
            self._calls.pop(call_id, None)
            if answered is not None:
                # Connected time in whole seconds, at least 1: an answered call was connected.
                connected = max(1, math.ceil(moment - answered))
                return report("completed", duration_s=connected, error=cause or None)
            status = _HANGUP_STATUS.get(cause, "failed")
            return report(status, error=cause or None)
        return WebhookEvents(200)

    async def _play(self, call_id: str, call: _Call) -> None:
        request = call.request
        if request.audio_url:
            await self._command(call_id, "playback_start", {"audio_url": request.audio_url})
            return
        language = "en-US" if request.language == "multi" else request.language
        voice = request.voice or self.voices.get(language.lower()) or self.default_voice
        await self._command(
            call_id, "speak", {"payload": request.text, "voice": voice, "language": language}
        )

    async def _command(self, call_id: str, action: str, body: Mapping[str, Any]) -> None:
        """A Call Control command; command_id makes a repeated one harmless."""
        try:
            await self.request(
                "POST",
                f"/calls/{call_id}/actions/{action}",
                "voice",
                {**body, "command_id": str(uuid.uuid4())},
            )
        except EngineError as exc:
            log.warning("telnyx %s: call command %s failed: %s", self.config.name, action, exc.code)
            if action != "hangup":  # a call that cannot speak is ended, not left open
                with contextlib.suppress(EngineError):
                    await self.request("POST", f"/calls/{call_id}/actions/hangup", "voice", {})

    def remember_call(self, call_id: str, request: CallRequest) -> None:
        self._calls[call_id] = _Call(request)
        while len(self._calls) > _MAX_CALLS:
            self._calls.popitem(last=False)


@dataclass
class _Call:
    """A call this process placed: what it says, once answered."""

    request: CallRequest
    plays: int = 0
    answered_at: float | None = None  # Unix seconds of call.answered
    answered_by: str | None = None


_MAX_CALLS = 1000
# call.hangup causes of a call never answered -> the neutral call status.
_HANGUP_STATUS: Mapping[str, CallStatus] = {
    "user_busy": "busy",
    "call_rejected": "busy",
    "no_answer": "no-answer",
    "timeout": "no-answer",
    "originator_cancel": "canceled",
    "normal_clearing": "no-answer",
    "time_limit": "no-answer",
}
# Message to[].status (providers.md) -> the neutral message status.
_MESSAGE_STATUS: Mapping[str, MessageStatus] = {
    "queued": "queued",
    "sending": "queued",
    "sent": "sent",
    "delivered": "delivered",
    "sending_failed": "failed",
    "delivery_failed": "undelivered",
    # The carrier took it and never confirmed: as far as anyone can tell, sent.
    "delivery_unconfirmed": "sent",
}


def message_update(doc: Mapping[str, Any], reference: str | None = None) -> StatusUpdate:
    """A message object (API answer or webhook payload) -> a StatusUpdate."""
    recipients = doc.get("to")
    raw = ""
    if isinstance(recipients, list) and recipients and isinstance(recipients[0], dict):
        raw = str(recipients[0].get("status") or "")
    errors = doc.get("errors")
    error = None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        code = errors[0].get("code")
        error = str(code) if code is not None else None
    return StatusUpdate(
        channel="sms",
        provider_ref=str(doc.get("id") or ""),
        status=_MESSAGE_STATUS.get(raw, "queued"),
        reference=reference,
        at=int(reported_time(doc.get("completed_at") or doc.get("sent_at"))),
        error=error,
    )


class TelnyxSms:
    """The ``sms`` engine (satsgate.engines.messaging.SmsEngine) on the Messaging API."""

    def __init__(self, provider: TelnyxProvider) -> None:
        self.p = provider

    async def send_sms(self, request: SmsRequest) -> SmsSent:
        p = self.p
        body: dict[str, Any] = {
            "to": request.to,
            "text": request.text,
            "type": "SMS",
            "webhook_url": p.webhook_url(request.reference),
            "use_profile_webhooks": False,
        }
        if p.from_number:
            body["from"] = p.from_number
        if p.messaging_profile_id:
            body["messaging_profile_id"] = p.messaging_profile_id
        async with recording_opt_out(p.deps.opt_outs, request.to):
            data = await p.request("POST", "/messages", "sms", body)
        update = message_update(data)
        if not update.provider_ref:
            raise p._failed("sms", ErrorCode.SERVICE_ERROR, "answer without an id", False)
        status: MessageStatus = update.status  # type: ignore[assignment]
        return SmsSent(update.provider_ref, status, count_or_none(data.get("parts")))

    async def sms_status(self, message_id: str) -> StatusUpdate:
        return message_update(await self.p.request("GET", f"/messages/{message_id}", "sms"))


class TelnyxVoice:
    """The ``voice`` engine (satsgate.engines.voice_call.VoiceCallEngine) on Call Control:
    dial, then on ``call.answered`` speak (or play) the message ``repeat`` times and hang
    up; ``time_limit_secs`` ends a call at the paid time whatever happens."""

    def __init__(self, provider: TelnyxProvider) -> None:
        self.p = provider

    async def place_call(self, request: CallRequest) -> CallPlaced:
        p = self.p
        body = {
            "connection_id": p.call_connection_id,
            "to": request.to,
            "from": p.from_number,
            "webhook_url": p.webhook_url(request.reference, here=True),
            "client_state": base64.b64encode(request.reference.encode()).decode(),
            "timeout_secs": p.ring_timeout_s,
            "time_limit_secs": max(30, request.max_duration_s),
        }
        data = await p.request("POST", "/calls", "voice", body)
        call_id = str(data.get("call_control_id") or "")
        if not call_id:
            raise p._failed("voice", ErrorCode.SERVICE_ERROR, "answer without a call id", False)
        p.remember_call(call_id, request)
        return CallPlaced(call_id, "queued")

    async def call_status(self, call_id: str) -> StatusUpdate:
        data = await self.p.request("GET", f"/calls/{call_id}", "voice")
        call = self.p._calls.get(call_id)
        reference = call.request.reference if call is not None else None
        if data.get("is_alive"):
            status: CallStatus = "in-progress" if call is None or call.answered_at else "queued"
            return StatusUpdate("call", call_id, status, reference=reference)
        duration = count_or_none(data.get("call_duration")) or 0
        if duration > 0:
            return StatusUpdate("call", call_id, "completed", reference=reference,
                                duration_s=duration)  # fmt: skip
        return StatusUpdate("call", call_id, "no-answer", reference=reference)
