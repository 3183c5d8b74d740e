"""Audiobook narration: a voice reads each chapter in parts, ffmpeg encodes AAC on this
machine and joins the parts into one M4B whose chapter markers come from an ffmetadata
file.

:class:`Narrator` does the reading plan and the assembly for any voice; a
:class:`PartSpeaker` speaks one part into a file. Two exist: eSpeak NG on this machine
(the global tier, model 43: :func:`build`) and any provider's text-to-speech engine
(:class:`TtsSpeaker`: a premium or studio voice, built by the provider's adapter).

A chapter is read in parts of at most ``part_chars`` characters (cut between
paragraphs), so each synthesis and ffmpeg run stays well inside the time limit whatever
the book's size; parts are rendered a few at a time, each encoded as soon as it is
spoken so the temporary space holds a few audio files, not the whole book.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from satsgate.engines.audiobook import (
    ChapterMark,
    NarrationRequest,
    NarrationResult,
    Progress,
)
from satsgate.engines.errors import EngineError
from satsgate.engines.local.espeak import (
    GLOBAL_TIER,
    EspeakEngine,
    Unsupported,
    espeak_languages,
    plan_voice,
)
from satsgate.engines.local.tools import ToolRunner, probe_media
from satsgate.engines.registry import EngineDeps
from satsgate.engines.synthesis import TTS_TIERS, SynthesisEngine, SynthesisRequest
from satsgate.errors import ErrorCode

LABEL = "eSpeak NG narration, ffmpeg M4B"
PART_CHARS = 20_000
AAC_BITRATE = "32k"


def split_text(text: str, limit: int = PART_CHARS) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut between paragraphs, else
    between sentences, else between words."""
    pieces: list[str] = []
    current = ""
    for paragraph in _units(text, limit):
        if current and len(current) + 2 + len(paragraph) > limit:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        pieces.append(current)
    return pieces


def _units(text: str, limit: int) -> list[str]:
    units: list[str] = []
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", text)):
        if not paragraph:
            continue
        if len(paragraph) <= limit:
            units.append(paragraph)
            continue
        sentence_cut = re.split(r"(?<=[.!?;])\s+", paragraph)
        for sentence in sentence_cut:
            while len(sentence) > limit:
                cut = sentence.rfind(" ", 0, limit)
                cut = cut if cut > 0 else limit
                units.append(sentence[:cut])
                sentence = sentence[cut:].lstrip()
            if sentence:
                units.append(sentence)
    return units


def metadata_value(value: str) -> str:
    """A value escaped for an ffmetadata file."""
    return re.sub(r"([=;#\\\n])", r"\\\1", value.replace("\r", " "))


def ffmetadata(title: str | None, marks: list[ChapterMark]) -> str:
    lines = [";FFMETADATA1"]
    if title:
        lines.append(f"title={metadata_value(title)}")
    for mark in marks:
        lines += [
            "[CHAPTER]",
            "TIMEBASE=1/1000",
            f"START={round(mark.start_s * 1000)}",
            f"END={round(mark.end_s * 1000)}",
            f"title={metadata_value(mark.title)}",
        ]
    return "\n".join(lines) + "\n"


class PartSpeaker(Protocol):
    """Speaks one part of a book into an audio file ffmpeg reads."""

    part_chars: int  # the longest part it takes
    parallel: int  # parts it speaks at once

    def unsupported(self, request: NarrationRequest) -> str | None:
        """Why it cannot read ``request`` (tier, language, voice); None if it can."""
        ...

    async def speak(self, text: str, request: NarrationRequest, out: Path) -> Path:
        """Speak ``text`` into a file under ``out``'s name (any extension); its path."""
        ...


class EspeakSpeaker:
    """The global tier (43) with the local espeak-ng voice."""

    part_chars = PART_CHARS

    def __init__(self, espeak: EspeakEngine) -> None:
        self.espeak = espeak
        self.languages = espeak.languages
        self.parallel = max(1, os.cpu_count() or 1)

    def unsupported(self, request: NarrationRequest) -> str | None:
        if request.model_id != GLOBAL_TIER:
            return f"model {request.model_id} is not served by this node's voice"
        try:
            plan_voice(self.espeak.voices, request.language, request.voice, 1.0)
        except Unsupported as exc:
            return str(exc)
        return None

    async def speak(self, text: str, request: NarrationRequest, out: Path) -> Path:
        plan = plan_voice(self.espeak.voices, request.language, request.voice, request.speed)
        wav = out.with_suffix(".wav")
        await self.espeak.speak_to_file(text, plan, wav)
        return wav


class TtsSpeaker:
    """A provider's text-to-speech engine (premium and studio tiers) reading the book,
    one request per part; the adapter that builds it says which tiers it serves."""

    def __init__(
        self, engine: SynthesisEngine, tiers: frozenset[int], part_chars: int, parallel: int = 2
    ) -> None:
        self.engine = engine
        self.tiers = tiers
        self.part_chars = part_chars
        self.parallel = parallel

    def _synthesis(self, text: str, request: NarrationRequest) -> SynthesisRequest:
        return SynthesisRequest(
            text=text,
            model_id=request.model_id,
            voice=request.voice,
            speed=request.speed,
            language=request.language,
            format="mp3",
            model_name=request.model_name,
        )

    def unsupported(self, request: NarrationRequest) -> str | None:
        if request.model_id not in self.tiers:
            return f"model {request.model_id} is not served by this node's voices"
        check = getattr(self.engine, "unsupported", None)  # the engine's own refusal, if any
        return check(self._synthesis("x", request)) if callable(check) else None

    async def speak(self, text: str, request: NarrationRequest, out: Path) -> Path:
        result = await self.engine.synthesize(self._synthesis(text, request))
        path = out.with_suffix(f".{result.format}")
        await asyncio.to_thread(path.write_bytes, result.audio)
        return path


class Narrator:
    """AudiobookEngine: the parts spoken by ``speaker``, assembled into one M4B."""

    def __init__(self, speaker: PartSpeaker, tools: ToolRunner) -> None:
        self.speaker = speaker
        self.tools = tools

    def unsupported(self, request: object) -> str | None:
        if not isinstance(request, NarrationRequest):
            return None
        return self.speaker.unsupported(request)

    async def narrate(self, request: NarrationRequest, progress: Progress) -> NarrationResult:
        reason = self.unsupported(request)
        if reason is not None:
            raise EngineError(ErrorCode.INVALID_INPUT, reason[0].upper() + reason[1:] + ".")
        parts: list[tuple[int, str]] = []  # (chapter index, text), in reading order
        for index, chapter in enumerate(request.chapters):
            spoken = f"{chapter.title.strip().rstrip('.')}.\n\n{chapter.text}"
            parts += [(index, piece) for piece in split_text(spoken, self.speaker.part_chars)]
        if not parts:
            raise EngineError(ErrorCode.INVALID_INPUT, "There is nothing to narrate.")
        with tempfile.TemporaryDirectory(prefix="satsgate-book-") as tmp:
            root = Path(tmp)
            durations = await self._render_parts(root, request, [t for _, t in parts], progress)
            marks: list[ChapterMark] = []
            clock = 0.0
            for index, chapter in enumerate(request.chapters):
                start = clock
                clock += sum(d for (c, _t), d in zip(parts, durations, strict=True) if c == index)
                marks.append(ChapterMark(chapter.title, round(start, 3), round(clock, 3)))
            progress(92.0, "joining the chapters")
            out = await self._join(root, request.title, len(parts), marks, clock)
            probed = await probe_media(self.tools, out)
            if len(probed.get("chapters", ())) != len(marks):
                raise EngineError(
                    ErrorCode.SERVICE_ERROR, "The audiobook's chapter markers are missing."
                )
            duration = float(probed.get("format", {}).get("duration") or clock)
            m4b = await asyncio.to_thread(out.read_bytes)
            return NarrationResult(m4b, round(duration, 3), tuple(marks))

    async def _render_parts(
        self, root: Path, request: NarrationRequest, texts: list[str], progress: Progress
    ) -> list[float]:
        """Each text spoken and encoded to ``root/partNNNNNN.m4a`` (``speaker.parallel``
        at a time); the parts' durations in seconds, measured from the files."""
        # Imported here, not with the module: domain.media imports WeasyPrint, which sets
        # Pillow's LOAD_TRUNCATED_IMAGES for the whole process, and this module is
        # imported by every pool worker that imports satsgate.engines.local.
        from satsgate.domain.media import MediaError, audio_duration_s

        durations = [0.0] * len(texts)
        done = 0
        in_flight = asyncio.Semaphore(self.speaker.parallel)

        async def render(number: int, text: str) -> None:
            nonlocal done
            async with in_flight:  # spoken and encoded before the next part starts
                m4a = root / f"part{number:06d}.m4a"
                spoken = await self.speaker.speak(text, request, root / f"part{number:06d}")
                await self.tools.run(
                    [
                        "ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(spoken),
                        "-c:a", "aac", "-aac_coder", "fast", "-b:a", AAC_BITRATE, str(m4a),
                    ],
                    what="audio encoding",
                )  # fmt: skip
                spoken.unlink()
                try:
                    durations[number] = audio_duration_s(await asyncio.to_thread(m4a.read_bytes))
                except MediaError:
                    raise EngineError(
                        ErrorCode.SERVICE_ERROR, "The narration produced no audio."
                    ) from None
            done += 1
            progress(90.0 * done / len(texts), f"narrated {done} of {len(texts)} parts")

        async with asyncio.TaskGroup() as group:
            for number, text in enumerate(texts):
                group.create_task(render(number, text))
        return durations

    async def _join(
        self, root: Path, title: str | None, count: int, marks: list[ChapterMark], length_s: float
    ) -> Path:
        """The ``count`` parts in ``root`` joined, with ``marks`` as chapters, into one M4B."""
        listing = root / "parts.txt"
        listing.write_text("".join(f"file 'part{n:06d}.m4a'\n" for n in range(count)), "utf-8")
        meta = root / "chapters.txt"
        meta.write_text(ffmetadata(title, marks), "utf-8")
        out = root / "book.m4b"
        await self.tools.run(
            [
                "ffmpeg", "-nostdin", "-v", "error", "-y",
                "-f", "concat", "-safe", "0", "-i", str(listing),
                "-f", "ffmetadata", "-i", str(meta),
                "-map", "0:a", "-map_metadata", "1", "-map_chapters", "1",
                "-c", "copy", "-movflags", "+faststart", "-f", "mp4", str(out),
            ],
            timeout_s=max(self.tools.timeout_s, length_s / 50),
            what="joining the audiobook",
        )  # fmt: skip
        return out


def build(deps: EngineDeps) -> Narrator:
    """The local narrator: eSpeak NG's voice (the global tier)."""
    tools = ToolRunner(deps.settings.cpu_job_time_limit_s)
    return Narrator(EspeakSpeaker(EspeakEngine(tools, espeak_languages())), tools)


def tts_narrator(
    deps: EngineDeps, engine: SynthesisEngine, models: Mapping[str, str], part_chars: int
) -> Narrator:
    """A provider's narrator: its text-to-speech ``engine`` reads parts of at most
    ``part_chars`` characters in the tiers its ``models`` table maps; ffmpeg on this
    machine assembles the book."""
    tiers = frozenset(int(k) for k in models if k.isdigit() and int(k) in TTS_TIERS)
    return Narrator(
        TtsSpeaker(engine, tiers, part_chars), ToolRunner(deps.settings.cpu_job_time_limit_s)
    )
