"""Capability: an automated phone call that speaks a message (call). Engine name ``voice``.

Adapters: satsgate/engines/providers/twilio.py (``kind = "twilio"``, TwiML ``<Say>`` or
``<Play>``) and satsgate/engines/providers/telnyx.py (``kind = "telnyx"``, Call Control).
Status reports (ringing, answered, completed with its billed duration) come through the
provider's webhooks (:mod:`satsgate.engines.delivery`) or :meth:`VoiceCallEngine.call_status`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

from satsgate.engines.delivery import StatusUpdate

# Provider-neutral call statuses: queued -> ringing -> in-progress (answered) -> completed;
# or busy, no-answer, failed (never connected), canceled (hung up by us before answer).
CallStatus = Literal[
    "queued", "ringing", "in-progress", "completed", "busy", "no-answer", "failed", "canceled"
]
CALL_STATUSES: Final[tuple[CallStatus, ...]] = (
    "queued",
    "ringing",
    "in-progress",
    "completed",
    "busy",
    "no-answer",
    "failed",
    "canceled",
)
FINAL_CALL_STATUSES: Final = frozenset({"completed", "busy", "no-answer", "failed", "canceled"})


@dataclass(frozen=True)
class CallRequest:
    to: str  # E.164, validated and routable (domain.telephony)
    text: str  # what the call says (also the fallback when audio_url cannot be played)
    language: str  # BCP 47 locale of the text, e.g. "en-US"
    repeat: int  # times the message is played, 1 to 3
    max_duration_s: int  # hang up after this many seconds of connected call (the paid time)
    # satsgate's delivery id: the adapter carries it in its status-callback URL
    # (delivery.REFERENCE_PARAM) so reports find their record.
    reference: str
    # A public URL of audio to play instead of the provider's own speech (satsgate's
    # synthesized speech as an expiring file link); None: the provider speaks ``text``.
    audio_url: str | None = None
    # A provider voice name; None: the provider's default voice for ``language``.
    voice: str | None = None


@dataclass(frozen=True)
class CallPlaced:
    """The provider accepted the call; it is dialing."""

    call_id: str  # the provider's id (kept for status reports; never shown to callers)
    status: CallStatus  # usually "queued"


class VoiceCallEngine(Protocol):
    async def place_call(self, request: CallRequest) -> CallPlaced:
        """Dial and speak. EngineError on failure; when the provider may already have
        taken the call (a timeout after the request was sent), the error has
        ``may_fall_back=False``: never dialed twice."""
        ...

    async def call_status(self, call_id: str) -> StatusUpdate:
        """The call's current status (and its billed duration once completed), fetched
        from the provider: the fallback when no status webhook came. EngineError on
        failure."""
        ...
