"""Voice-bridge sessions: the free say, poll and end that follow a paid ``open_voice_bridge``.

``open_voice_bridge`` (``voice-bridge/open``, services.comms.handlers) is paid by deposit: it dials
the number and answers a ``sessionId``. The node's sessions (services.comms.bridge_calls, on
the ``voice_bridge`` engine) run the call and keep the session this module talks to:

- ``say`` plays speech into the call: text it synthesizes (602 languages, voice by
  description) or caller audio (``mulaw_8000`` or ``pcm_l16_16000``); speech recognition
  is muted while it plays;
- ``poll`` hands out the transcript and system events after a cursor;
- ``end`` hangs up and settles the deposit: the elapsed time is billed, the rest refunded.

:class:`VoiceBridgeSessions` is the seam services.comms.bridge_calls implements; an env
built without an app has none, and :func:`sessions_for` answers from :data:`NO_SESSIONS`
there: every lookup finds nothing.

Both faces use satsgate.operations.comms's :func:`bridge_say`, :func:`bridge_poll` and
:func:`bridge_end` on these sessions: ``POST /api/l402/voice-bridge/say``,
``GET /api/l402/voice-bridge/poll?sessionId=&cursor=`` and ``POST /api/l402/voice-bridge/end``
over HTTP (paths of satsgate's choosing: the spec shows none), ``voice_bridge_say``,
``poll_voice_bridge`` and ``end_voice_bridge`` over MCP. All are free: the session's
deposit pays for the call, and none of them ever issues an invoice. Order on both faces:
the arguments are checked (L402_INVALID_PARAMS), then the engine (SERVICE_UNAVAILABLE),
then the session (VOICE_BRIDGE_SESSION_NOT_FOUND).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, Self

from pydantic import (
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from satsgate.domain.telephony import served_number
from satsgate.domain.voices import (
    MAX_DESCRIPTION_CHARS,
    check_ai_call_locale,
    check_voice_description,
)
from satsgate.services.ai.speech import LANGUAGE_CODE
from satsgate.services.catalog.pricing import voice_bridge_per_minute_msat
from satsgate.services.catalog.rates import RateBook
from satsgate.services.inputs.params import (
    InvalidField,
    MiB,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    decode_file,
    lightning_address,
)

SAY_PATH = "/api/l402/voice-bridge/say"
POLL_PATH = "/api/l402/voice-bridge/poll"
END_PATH = "/api/l402/voice-bridge/end"

SAY_TEXT_MAX_CHARS = 5000  # as text-to-speech
# One say carries at most 1 MiB of raw audio: about 131 s of mulaw_8000 (8000 bytes/s) or
# 33 s of pcm_l16_16000 (32000 bytes/s). Longer speech is several says.
SAY_AUDIO_MAX_BYTES = 1 * MiB
SAY_MAX_BODY_BYTES = body_limit(SAY_AUDIO_MAX_BYTES, slack=32 * 1024)
SMALL_BODY_BYTES = 16 * 1024  # poll and end carry a session id only
# The engine keeps cursors in SQLite: a cursor beyond a signed 64-bit integer is no cursor.
MAX_CURSOR = 2**63 - 1

AudioEncoding = Literal["mulaw_8000", "pcm_l16_16000"]
# The telephony engine's session ids are opaque to satsgate: visible ASCII, bounded so a
# lookup never carries an unbounded or multi-line key (as the AI call's ids).
SessionId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[!-~]+$")]

_SESSION_ID_DOC = "The sessionId from the open_voice_bridge answer."


# -- params --------------------------------------------------------------------------------


class VoiceBridgeOpenParams(ServiceParams):
    phoneNumber: str = Field(
        validation_alias=alias("phoneNumber", "phone_number"), description="E.164 number to dial."
    )
    language: str = Field("en-US", description="Speech-recognition locale (AI-call locales).")
    durationMinutes: int = Field(
        5,
        ge=1,
        le=60,
        validation_alias=alias("durationMinutes", "duration_minutes"),
        description="Deposit in minutes (1 to 60); billing is the elapsed time, the rest is "
        "refunded.",
    )
    codec: Literal["auto", "mulaw_8000", "pcm_l16_16000"] = Field(
        "auto", description="Audio codec; auto picks HD (pcm_l16_16000) when available."
    )
    sttEnabled: bool = Field(True, validation_alias=alias("sttEnabled", "stt_enabled"))
    ttsEnabled: bool = Field(True, validation_alias=alias("ttsEnabled", "tts_enabled"))
    refundAddress: str | None = Field(
        None, max_length=254, validation_alias=alias("refundAddress", "refund_address")
    )

    _route = field_validator("phoneNumber")(served_number)
    _locale = field_validator("language")(check_ai_call_locale)
    _refund = field_validator("refundAddress")(lightning_address)

    def per_minute_msat(self, book: RateBook) -> int:
        """The destination's per-minute rate at the rate ``book``."""
        return voice_bridge_per_minute_msat(book, self.phoneNumber)


def _session_id_field() -> Any:
    return Field(validation_alias=alias("sessionId", "session_id"), description=_SESSION_ID_DOC)


class VoiceBridgeSayParams(ServiceParams):
    """Arguments of ``voice_bridge_say``: exactly one of ``text`` (synthesized, optionally
    with ``language`` and ``voiceDescription``) or ``audioBase64`` (optionally with its
    ``encoding``)."""

    sessionId: SessionId = _session_id_field()
    text: str | None = Field(
        None,
        min_length=1,
        max_length=SAY_TEXT_MAX_CHARS,
        description=f"Text to speak into the call, 1 to {SAY_TEXT_MAX_CHARS} characters.",
    )
    language: str | None = Field(
        None,
        pattern=LANGUAGE_CODE,
        description="Text mode: ISO 639 code of the text's language (602 languages, as the "
        "global text-to-speech tier); default: the session's language.",
    )
    voiceDescription: str | None = Field(
        None,
        max_length=MAX_DESCRIPTION_CHARS,
        validation_alias=alias("voiceDescription", "voice_description"),
        description="Text mode: comma-separated words, one per group: male|female; "
        "child|teenager|young adult|middle-aged|elderly; very low|low|moderate|high|very high "
        "pitch; whisper; american|british|australian|canadian|indian|chinese|korean|japanese|"
        "portuguese|russian.",
    )
    audioBase64: str | None = Field(
        None,
        max_length=b64_chars(SAY_AUDIO_MAX_BYTES),
        validation_alias=alias("audioBase64", "audio_base64"),
        description="Raw audio to play (no container), base64, at most 1 MB decoded.",
    )
    encoding: AudioEncoding | None = Field(
        None,
        description="Audio mode: mulaw_8000 or pcm_l16_16000; default: the session's activeCodec.",
    )

    # The rules that tie a field to the mode name that field: a validator sees the fields
    # declared before it (in info.data) when they are valid.
    @field_validator("language", "voiceDescription")
    @classmethod
    def _text_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("text", "") is None:
            raise ValueError("is for text only; audio is played as is")
        if value is not None and info.field_name == "voiceDescription":
            return check_voice_description(value)
        return value

    @field_validator("encoding")
    @classmethod
    def _audio_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("audioBase64", "") is None:
            raise ValueError("is for audioBase64 only")
        return value

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        if (self.text is None) == (self.audioBase64 is None):
            raise ValueError("send exactly one of text or audioBase64")
        return self

    def check(self) -> Utterance:
        """Decode the audio (in a worker thread, before anything else runs)."""
        if self.audioBase64 is None:
            return Utterance(
                text=self.text, language=self.language, voice_description=self.voiceDescription
            )
        audio = decode_file(self.audioBase64, "audioBase64", SAY_AUDIO_MAX_BYTES)
        if self.encoding == "pcm_l16_16000" and len(audio) % 2:
            raise InvalidField(
                "audioBase64", "pcm_l16_16000 is 16-bit samples: an even number of bytes"
            )
        return Utterance(audio=audio, encoding=self.encoding)


class VoiceBridgePollParams(ServiceParams):
    """Arguments of ``poll_voice_bridge``; HTTP takes them as the query string."""

    sessionId: SessionId = _session_id_field()
    cursor: int = Field(
        0,
        ge=0,
        le=MAX_CURSOR,
        description="nextCursor of the previous poll; 0 (the default) from the start.",
    )


class VoiceBridgeEndParams(ServiceParams):
    """Arguments of ``end_voice_bridge``."""

    sessionId: SessionId = _session_id_field()


# -- what the engine answers ---------------------------------------------------------------


@dataclass(frozen=True)
class Utterance:
    """What one say plays: synthesized ``text`` or raw ``audio``, never both."""

    text: str | None = None
    language: str | None = None  # None: the session's language
    voice_description: str | None = None  # normalized by check_voice_description
    audio: bytes | None = None
    encoding: AudioEncoding | None = None  # None: the session's activeCodec


@dataclass(frozen=True)
class BridgeEvent:
    """One transcript or system event; ``seq`` increases within a session."""

    seq: int
    type: str  # partial transcript, final transcript or system event (the engine's names)
    text: str
    ts_ms: int

    def body(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "text": self.text, "ts_ms": self.ts_ms}


@dataclass(frozen=True)
class BridgePoll:
    """The events after a cursor; polling again with ``next_cursor`` gets the ones after."""

    session_id: str
    state: str
    events: tuple[BridgeEvent, ...]
    next_cursor: int
    call_id: str

    def body(self) -> dict[str, Any]:
        """The spec's ``{ success, sessionId, state, events, nextCursor, callId }``."""
        return {
            "success": True,
            "sessionId": self.session_id,
            "state": self.state,
            "events": [event.body() for event in self.events],
            "nextCursor": self.next_cursor,
            "callId": self.call_id,
        }


@dataclass(frozen=True)
class BridgeSettlement:
    """How a session's deposit was settled: ``used_sats + refundable_sats == deposit_sats``."""

    elapsed_s: int
    used_sats: int
    deposit_sats: int
    refundable_sats: int
    # Sent to the session's refundAddress, or a one-time LNURL-withdraw (as the gate's
    # refunds); None when nothing is refundable.
    refund: Mapping[str, Any] | None
    final_transcript: str

    def body(self) -> dict[str, Any]:
        """The spec's ``{ success, elapsedSec, usedSats, depositSats, refundableSats, refund,
        finalTranscript }``."""
        return {
            "success": True,
            "elapsedSec": self.elapsed_s,
            "usedSats": self.used_sats,
            "depositSats": self.deposit_sats,
            "refundableSats": self.refundable_sats,
            "refund": None if self.refund is None else dict(self.refund),
            "finalTranscript": self.final_transcript,
        }


class VoiceBridgeSessions(Protocol):
    """Where voice-bridge sessions live; the telephony engine opens them and implements this.

    A session id is a bearer capability (whoever holds it ends the call and receives its
    refund), so the engine mints it unguessable. Sessions must outlive a restart: the
    engine keeps them in the store.
    """

    async def say(self, session_id: str, utterance: Utterance) -> int | None:
        """Play ``utterance`` into the open session; the audio bytes sent, or None if no
        session under ``session_id`` is open (never opened, or ended)."""
        ...

    async def poll(self, session_id: str, cursor: int) -> BridgePoll | None:
        """The session's state and its events with ``seq`` above ``cursor``, or None if
        there is no such session. An ended session still answers, with its final state."""
        ...

    async def end(self, session_id: str) -> BridgeSettlement | None:
        """Hang up and settle the deposit, at most once: one conditional update (open ->
        ended) bills the elapsed time at the session's perMinuteSats, capped at the deposit,
        and refunds the rest to refundAddress or as an LNURL-withdraw. Ending an ended
        session (also one the deposit ran out on) settles nothing again and returns that
        settlement; None if there is no such session."""
        ...


class _NoSessions:
    """The sessions of a node without a telephony engine: no session can exist."""

    async def say(self, session_id: str, utterance: Utterance) -> int | None:
        return None

    async def poll(self, session_id: str, cursor: int) -> BridgePoll | None:
        return None

    async def end(self, session_id: str) -> BridgeSettlement | None:
        return None


NO_SESSIONS: VoiceBridgeSessions = _NoSessions()


def sessions_for(sessions: VoiceBridgeSessions | None) -> VoiceBridgeSessions:
    """This node's voice-bridge sessions (``env.voice_bridge``), or none."""
    return NO_SESSIONS if sessions is None else sessions
