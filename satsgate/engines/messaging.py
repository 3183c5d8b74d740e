"""Capability: send an SMS (send-sms). Engine name ``sms``.

Adapters: satsgate/engines/providers/twilio.py (``kind = "twilio"``) and
satsgate/engines/providers/telnyx.py (``kind = "telnyx"``). Status reports come later,
through the provider's webhooks (:mod:`satsgate.engines.delivery`) or
:meth:`SmsEngine.sms_status`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

from satsgate.engines.delivery import StatusUpdate

# Provider-neutral message statuses, in the order a message moves through them:
# queued (taken by the provider) -> sent (handed to the carrier) -> delivered (the handset
# confirmed) | undelivered (the carrier gave up) | failed (never sent).
MessageStatus = Literal["queued", "sent", "delivered", "undelivered", "failed"]
MESSAGE_STATUSES: Final[tuple[MessageStatus, ...]] = (
    "queued",
    "sent",
    "delivered",
    "undelivered",
    "failed",
)
FINAL_MESSAGE_STATUSES: Final = frozenset({"delivered", "undelivered", "failed"})


@dataclass(frozen=True)
class SmsRequest:
    to: str  # E.164, validated and routable (domain.telephony)
    text: str  # as the caller wrote it (at most 120 characters, the spec)
    # satsgate's delivery id: the adapter carries it in its status-callback URL
    # (delivery.REFERENCE_PARAM) so reports find their record.
    reference: str


@dataclass(frozen=True)
class SmsSent:
    """The provider took the message."""

    message_id: str  # the provider's id (kept for status reports; never shown to callers)
    status: MessageStatus  # usually "queued"
    segments: int | None = None


class SmsEngine(Protocol):
    async def send_sms(self, request: SmsRequest) -> SmsSent:
        """Hand the message to the provider. EngineError on failure; when the provider
        may already have taken it (a timeout or a broken connection after the request
        was sent), the error has ``may_fall_back=False``: never sent twice."""
        ...

    async def sms_status(self, message_id: str) -> StatusUpdate:
        """The message's current status, fetched from the provider (the fallback when
        no status webhook came). EngineError on failure."""
        ...
