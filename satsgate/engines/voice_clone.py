"""Voice cloning: the capability the ``voice_clone`` engine name (clone-voice) serves. The
new voice's id is reusable as the ``voice`` of text-to-speech on the same provider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class VoiceCloneRequest:
    sample: bytes  # the caller's recording (MP3, M4A or WAV), already checked
    format: str  # "mp3", "m4a" or "wav"
    name: str  # a label for the new voice (no personal data)
    remove_background_noise: bool = False
    model_name: str | None = None  # the provider's model family, when it has a choice


@dataclass(frozen=True)
class VoiceCloneResult:
    voice_id: str
    requires_verification: bool = False


class VoiceCloneEngine(Protocol):
    async def clone(self, request: VoiceCloneRequest) -> VoiceCloneResult:
        """A new voice from the sample; EngineError on failure."""
        ...
