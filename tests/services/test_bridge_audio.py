"""The voice bridge's audio helpers: G.711 mu-law decoding against the standard's values,
and the silence segmenter on synthetic speech-like bursts (fast, no tools needed)."""

from __future__ import annotations

import math

import numpy as np

from satsgate.services.comms.bridge_audio import (
    FRAME_BYTES,
    Segmenter,
    mulaw_to_pcm16,
    rms,
    wav_of_mulaw,
)

RATE = 8000


def _encode(samples: np.ndarray) -> bytes:
    """G.711 mu-law encoding (the standard's bias-and-segment form), for test inputs."""
    out = bytearray()
    for value in samples.astype(np.int32):
        sign = 0x80 if value < 0 else 0
        magnitude = min(abs(int(value)), 32635) + 0x84
        exponent = max(0, magnitude.bit_length() - 8)
        mantissa = (magnitude >> (exponent + 3)) & 0x0F
        out.append(~(sign | (exponent << 4) | mantissa) & 0xFF)
    return bytes(out)


def _tone(seconds: float, amplitude: float = 8000.0) -> bytes:
    n = np.arange(int(RATE * seconds))
    return _encode(amplitude * np.sin(2 * math.pi * 300 * n / RATE))


def _silence(seconds: float) -> bytes:
    return b"\xff" * int(RATE * seconds)


def test_mulaw_decodes_to_the_standard_values() -> None:
    decoded = mulaw_to_pcm16(bytes([0xFF, 0x7F, 0x00, 0x80, 0xF0, 0x70]))
    assert decoded.tolist() == [0, 0, -32124, 32124, 120, -120]
    # Encoding then decoding keeps a sine within mu-law's step at each level.
    tone = 8000 * np.sin(2 * math.pi * 300 * np.arange(800) / RATE)
    back = mulaw_to_pcm16(_encode(tone)).astype(float)
    assert np.max(np.abs(back - tone)) < 260
    assert 5500 < rms(_encode(tone)) < 5800  # 8000 / sqrt(2)


def test_a_wav_of_mulaw_is_16_bit_8_khz() -> None:
    wav = wav_of_mulaw(_tone(0.5))
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
    assert int.from_bytes(wav[24:28], "little") == RATE
    assert int.from_bytes(wav[34:36], "little") == 16
    assert len(wav) == 44 + 2 * 4000


def test_utterances_are_cut_at_pauses_and_clicks_are_dropped() -> None:
    stream = (
        _silence(0.5)
        + _tone(0.04)  # a click: too short to be speech
        + _silence(1.0)
        + _tone(1.0)
        + _silence(0.3)  # a pause inside an utterance
        + _tone(0.5)
        + _silence(1.0)  # ends it
        + _tone(0.8)  # still under way when the stream ends
    )
    segmenter = Segmenter()
    done: list[bytes] = []
    for at in range(0, len(stream), 333):  # arbitrary chunking, not frame-aligned
        done += segmenter.feed(stream[at : at + 333])
    assert len(done) == 1
    # 1.8 s of speech and pause, with up to 200 ms of pre-roll and trailing silence.
    assert 1.8 <= len(done[0]) / RATE <= 2.3
    assert len(done[0]) % FRAME_BYTES == 0
    tail = segmenter.flush()
    assert tail is not None and 0.7 <= len(tail) / RATE <= 1.1
    assert segmenter.flush() is None


def test_quiet_lines_and_resets_hear_nothing() -> None:
    segmenter = Segmenter()
    assert segmenter.feed(_tone(2.0, amplitude=200) + _silence(1.0)) == []  # line hum
    segmenter.feed(_tone(0.5))
    segmenter.reset()  # muted: what was heard is dropped
    assert segmenter.feed(_silence(1.0)) == [] and segmenter.flush() is None
