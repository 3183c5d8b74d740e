"""The voice bridge's audio: G.711 mu-law, utterances cut by silence, and conversions.

- :func:`mulaw_to_pcm16` decodes telephone audio with a 256-entry table (numpy; the
  ``audioop`` module is deprecated and gone in Python 3.13);
- :class:`Segmenter` cuts the called party's audio into utterances with a simple energy
  detector (20 ms frames, an adaptive noise floor, a pre-roll, 0.7 s of silence ends an
  utterance, 15 s at most): each frame costs microseconds, so it runs where the frames
  arrive; the transcription of an utterance runs in the engine (process pool);
- :func:`to_mulaw` converts speech to play (a WAV from text-to-speech, or the caller's
  ``pcm_l16_16000``) to mu-law 8 kHz with ffmpeg, an asyncio subprocess with a time limit.
"""

from __future__ import annotations

import functools
import io
import wave
from typing import Any

import numpy as np

from satsgate.engines.local.tools import ToolRunner

RATE = 8000  # mu-law telephone audio, samples (and bytes) per second
FRAME_BYTES = 160  # 20 ms
FRAME_S = FRAME_BYTES / RATE
MULAW_SILENCE = b"\xff"

# The energy detector, in 16-bit sample units (RMS of a 20 ms frame).
MIN_SPEECH_RMS = 400.0  # never quieter than this counts as speech (about -38 dBFS)
NOISE_FACTOR = 3.0  # speech is this many times louder than the noise floor
START_FRAMES = 3  # 60 ms of speech starts an utterance
END_FRAMES = 35  # 700 ms of silence ends one
PREROLL_FRAMES = 10  # 200 ms before the start is kept (soft onsets)
MIN_VOICED_FRAMES = 8  # 160 ms of speech at least, else it was a click
MAX_FRAMES = 15 * 50  # 15 s: longer speech is cut into several utterances


@functools.cache
def _ulaw_table() -> Any:
    """G.711 mu-law byte -> 16-bit linear sample."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (u >> 4) & 0x07
    magnitude = (((u & 0x0F) << 3) + 0x84) << exponent
    return np.where(u & 0x80, -(magnitude - 0x84), magnitude - 0x84).astype(np.int16)


def mulaw_to_pcm16(data: bytes) -> Any:
    """Decoded samples (numpy int16) of mu-law bytes."""
    return _ulaw_table()[np.frombuffer(data, dtype=np.uint8)]


def wav_of_mulaw(data: bytes) -> bytes:
    """A 16-bit PCM WAV (8 kHz mono) of mu-law audio, for the transcription engine."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(mulaw_to_pcm16(data).astype("<i2").tobytes())
    return out.getvalue()


def rms(frame: bytes) -> float:
    samples = mulaw_to_pcm16(frame).astype(np.float64)
    return float(np.sqrt(np.mean(samples * samples))) if samples.size else 0.0


class Segmenter:
    """Utterances of a stream of mu-law audio, cut where the speaker pauses."""

    def __init__(self) -> None:
        self._pending = b""  # less than a frame, waiting for the rest
        self._noise = 100.0  # RMS of the background, followed while nobody speaks
        self.reset()

    def reset(self) -> None:
        """Drop what was heard (speech recognition is muted while we speak)."""
        self._preroll: list[bytes] = []
        self._frames: list[bytes] = []
        self._voiced = 0
        self._run = 0  # consecutive speech frames before the start
        self._silent = 0  # consecutive silent frames inside an utterance
        self._pending = b""

    @property
    def speaking(self) -> bool:
        return bool(self._frames)

    def feed(self, data: bytes) -> list[bytes]:
        """Audio in; the utterances it completed (mu-law bytes each)."""
        data = self._pending + data
        whole = len(data) - len(data) % FRAME_BYTES
        self._pending = data[whole:]
        done: list[bytes] = []
        for at in range(0, whole, FRAME_BYTES):
            utterance = self._frame(data[at : at + FRAME_BYTES])
            if utterance is not None:
                done.append(utterance)
        return done

    def flush(self) -> bytes | None:
        """The utterance under way when the stream ends, if it is one."""
        utterance = self._finish()
        self.reset()
        return utterance

    def _frame(self, frame: bytes) -> bytes | None:
        level = rms(frame)
        speech = level >= max(MIN_SPEECH_RMS, self._noise * NOISE_FACTOR)
        if not self._frames:
            if not speech:
                self._noise = 0.95 * self._noise + 0.05 * level
                self._run = 0
            else:
                self._run += 1
            self._preroll = [*self._preroll[-(PREROLL_FRAMES - 1) :], frame]
            if self._run >= START_FRAMES:
                self._frames, self._preroll = self._preroll, []
                self._voiced, self._silent = self._run, 0
            return None
        self._frames.append(frame)
        if speech:
            self._voiced += 1
            self._silent = 0
        else:
            self._silent += 1
        if self._silent >= END_FRAMES or len(self._frames) >= MAX_FRAMES:
            utterance = self._finish()
            self._frames, self._voiced, self._run, self._silent = [], 0, 0, 0
            return utterance
        return None

    def _finish(self) -> bytes | None:
        if self._voiced < MIN_VOICED_FRAMES:
            return None
        # Trailing silence beyond 200 ms carries nothing for the recognizer.
        keep = len(self._frames) - max(0, self._silent - 10)
        return b"".join(self._frames[:keep])


async def to_mulaw(tools: ToolRunner, audio: bytes, source: str) -> bytes:
    """``audio`` as mu-law 8 kHz mono: ``source`` is ``"wav"`` (any WAV ffmpeg reads) or
    ``"pcm_l16_16000"`` (raw 16-bit little-endian samples at 16 kHz, mono)."""
    if source == "pcm_l16_16000":
        decode = ["-f", "s16le", "-ar", "16000", "-ac", "1", "-i", "pipe:0"]
    else:
        decode = ["-f", "wav", "-i", "pipe:0"]
    return await tools.run(
        [
            "ffmpeg", "-nostdin", "-v", "error", *decode,
            "-ac", "1", "-ar", str(RATE), "-c:a", "pcm_mulaw", "-f", "mulaw", "pipe:1",
        ],
        stdin=audio,
        what="audio conversion",
    )  # fmt: skip
