"""Book narration: the capability the ``audiobook`` engine name serves (epub-audiobook).

The service reads the book, picks and checks the chapters and moves what cannot be read
aloud into the annexe (``engines/local/book.py``); the engine turns the chapters'
text into one M4B (AAC in MP4) with a chapter marker at the start of each chapter.
Implemented locally by ``engines/local/narration.py`` (eSpeak NG and ffmpeg); a provider
may implement it with its own voices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Chapter:
    title: str  # spoken first, and the chapter marker's title
    text: str  # what is read aloud: paragraphs separated by blank lines


@dataclass(frozen=True)
class NarrationRequest:
    chapters: tuple[Chapter, ...]  # at least one, none empty
    # The spec's TTS tier: 33 premium, 34 premium mini, 43 global, 3 studio.
    model_id: int
    language: str  # ISO 639 code of the text (as domain.languages resolves it)
    speed: float = 1.0  # 0.5 to 2.0
    # A voice of the tier ("English_Aria"); on the global tier (43) a voice description
    # ("female, elderly"); None: the tier's default voice.
    voice: str | None = None
    title: str | None = None  # the book's title, for the file's metadata
    model_name: str | None = None  # the provider's model name; None for local engines


@dataclass(frozen=True)
class ChapterMark:
    title: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class NarrationResult:
    m4b: bytes  # AAC audio in an MP4 container with one chapter per request chapter
    duration_s: float
    chapters: tuple[ChapterMark, ...]


# progress(percent 0..100, message)
Progress = Callable[[float, str], None]


class AudiobookEngine(Protocol):
    def unsupported(self, request: object) -> str | None:
        """Why it cannot narrate ``request`` (a language, a voice); None if it can."""
        ...

    async def narrate(self, request: NarrationRequest, progress: Progress) -> NarrationResult:
        """The M4B of ``request.chapters``; EngineError (satsgate.engines) on failure."""
        ...
