"""Speech synthesis (text-to-speech): the capability the ``tts`` engine name serves.

Implemented by remote providers (``engines/providers/openai.py``: ``/audio/speech``) and
by local engines; the text-to-speech service (``services/ai/speech.py``) calls it through
``ctx.engines.run("tts", SynthesisEngine, ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

AudioFormat = Literal["mp3", "wav"]
# The spec's text-to-speech tiers (model ids): 33 premium, 34 premium mini, 43 global, 3 studio.
TTS_TIERS = frozenset({33, 34, 43, 3})


@dataclass(frozen=True)
class SynthesisRequest:
    text: str  # 1 to 5000 characters, already checked
    # The spec's TTS tier: 33 premium, 34 premium mini, 43 global, 3 studio.
    model_id: int
    # The spec voice of that tier ("English_Aria"), or None (no voice asked: the engine's
    # default for the tier / language). Never set on the global tier (43).
    voice: str | None = None
    speed: float = 1.0  # 0.5 to 2.0
    # Global tier (43) only: ISO 639 code (None: "en") and a voice description made of the
    # words of satsgate.domain.voices.DESCRIPTION_GROUPS ("female, elderly, low pitch").
    language: str | None = None
    voice_description: str | None = None
    emotion: str | None = None  # premium tier only: neutral, happy, sad, ...
    format: AudioFormat = "mp3"  # the container the caller wants back
    # The provider's model name for model_id (from [providers.X.models]); None for local
    # engines. engines.run hands it to the call; the service puts it here.
    model_name: str | None = None


@dataclass(frozen=True)
class SynthesisResult:
    audio: bytes  # the whole file, in ``format``
    format: AudioFormat  # must equal the request's format
    duration_s: float | None = None  # when the engine knows it


class SynthesisEngine(Protocol):
    async def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        """Speech for ``request.text``; EngineError (satsgate.engines) on failure."""
        ...
