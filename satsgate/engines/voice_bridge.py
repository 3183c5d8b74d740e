"""The voice bridge's telephony: the capability the ``voice_bridge`` engine name serves.

A voice-bridge session (``services/comms/bridge_calls.py``) dials a number through this
engine, which connects the answered call's audio to a WebSocket of satsgate's
(``web/voice_bridge.py``): the telephony provider opens it and speaks its media-stream
protocol there. The engine knows that provider's wire (how to dial with the stream's
address, how to hang up, how its status callbacks are signed, what its WebSocket frames
look like); the session knows everything else (billing, events, speech recognition and
synthesis). Implemented by ``engines/providers/twilio_bridge.py`` (Twilio Media Streams).

Audio crossing this seam is always G.711 mu-law, 8 kHz, mono, without a header: what the
telephone network carries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True)
class BridgeDial:
    """One outgoing call whose audio goes to ``media_url``."""

    to: str  # E.164
    media_url: str  # wss:// (ws:// on a loopback test node): the session's media WebSocket
    status_url: str  # https:// (http:// on loopback): where call-status callbacks go
    time_limit_s: int  # the provider hangs up by itself this long after the answer


# What a call's status callback says, in the session's words.
CallProgress = Literal["dialing", "ringing", "answered", "ended"]


@dataclass(frozen=True)
class CallStatus:
    call_id: str
    progress: CallProgress
    detail: str  # the provider's own status word ("busy", "no-answer", "completed", ...)


# -- the media stream's frames, as the session sees them -------------------------------


@dataclass(frozen=True)
class StreamStarted:
    stream_id: str
    call_id: str


@dataclass(frozen=True)
class StreamAudio:
    mulaw: bytes  # inbound audio (the called party), mu-law 8 kHz mono


@dataclass(frozen=True)
class StreamMark:
    name: str  # a mark we sent, echoed once the audio queued before it has played


@dataclass(frozen=True)
class StreamStopped:
    pass


StreamEvent = StreamStarted | StreamAudio | StreamMark | StreamStopped


class VoiceBridgeEngine(Protocol):
    async def dial(self, request: BridgeDial) -> str:
        """Place the call; its provider id. EngineError when the provider refuses."""
        ...

    async def hang_up(self, call_id: str) -> None:
        """End the call (a call that already ended is not an error)."""
        ...

    def call_status(
        self, url: str, form: Mapping[str, Sequence[str]], headers: Mapping[str, str]
    ) -> CallStatus | None:
        """A status callback POSTed (form-encoded) to ``url`` (as given in
        :class:`BridgeDial`): its status when its signature verifies, else None (refused)."""
        ...

    def read_frame(self, text: str) -> StreamEvent | None:
        """One text frame of the media WebSocket; None for frames the session ignores.
        ValueError for a frame that is not the provider's protocol."""
        ...

    def audio_frame(self, stream_id: str, mulaw: bytes) -> str:
        """The text frame that plays ``mulaw`` into the call."""
        ...

    def mark_frame(self, stream_id: str, name: str) -> str:
        """The text frame that asks for ``name`` to be echoed once the audio before it
        has played."""
        ...
