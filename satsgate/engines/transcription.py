"""Speech recognition: the capability the ``transcription`` engine name serves
(transcribe-audio and the first step of transcribe-translate).

Implemented by remote providers (``engines/providers/openai.py``: ``/audio/transcriptions``
and ``/audio/translations``) and by local engines. Subtitles (SRT and WebVTT) are made
here, once, from the segments: engines return segments, never subtitle text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

Task = Literal["transcription", "translation"]


@dataclass(frozen=True)
class Word:
    start: float  # seconds from the start of the audio
    end: float
    text: str


@dataclass(frozen=True)
class Segment:
    start: float  # seconds from the start of the audio
    end: float
    text: str  # stripped of surrounding whitespace
    words: tuple[Word, ...] = ()  # filled when word timestamps were asked and known


@dataclass(frozen=True)
class TranscriptionRequest:
    audio: bytes  # the caller's file: mp3, wav, flac, ogg or m4a (checked before payment)
    format: str  # its container as sniffed: "mp3", "wav", "flac", "ogg", "m4a"
    # One of the 13 transcription codes (en, zh, hi, es, ar, fr, pt, ru, de, ja, ko, it, nl);
    # None: detect.
    language: str | None = None
    # "translation": transcribe into English (whatever the spoken language).
    task: Task = "transcription"
    # Names of people and places to spell right (an engine may use them as a prompt).
    names: tuple[str, ...] = ()
    word_timestamps: bool = False
    # The provider's model name for the spec model (10); None for local engines.
    model_name: str | None = None


@dataclass(frozen=True)
class TranscriptionResult:
    text: str  # the whole transcript
    segments: tuple[Segment, ...]  # in time order; may be empty if the engine has none
    language: str | None = None  # detected or given, an ISO 639-1 code when known
    duration_s: float | None = None  # of the audio, when the engine knows it


class TranscriptionEngine(Protocol):
    async def transcribe(self, request: TranscriptionRequest) -> TranscriptionResult:
        """The transcript of ``request.audio``; EngineError (satsgate.engines) on failure."""
        ...


def _timestamp(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cues(segments: Iterable[Segment]) -> list[Segment]:
    return [s for s in segments if s.text.strip()]


def to_srt(segments: Iterable[Segment]) -> str:
    """SubRip subtitles: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``."""
    blocks = [
        f"{index}\n{_timestamp(s.start, ',')} --> {_timestamp(max(s.end, s.start), ',')}\n"
        f"{s.text.strip()}\n"
        for index, s in enumerate(_cues(segments), start=1)
    ]
    return "\n".join(blocks)


def to_vtt(segments: Iterable[Segment]) -> str:
    """WebVTT subtitles: ``WEBVTT`` header, ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` cues."""
    blocks = ["WEBVTT\n"]
    blocks += [
        f"{_timestamp(s.start, '.')} --> {_timestamp(max(s.end, s.start), '.')}\n"
        f"{s.text.strip().replace('-->', '->')}\n"
        for s in _cues(segments)
    ]
    return "\n".join(blocks)
