"""Image understanding: the capability the ``vision`` engine name serves (analyze-image).

Provider kinds serve it with their chat model and an image in the user message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from satsgate.engines.chat import ImageInput

DEFAULT_PROMPT = "Describe this image in detail."


@dataclass(frozen=True)
class VisionRequest:
    image: ImageInput
    prompt: str = DEFAULT_PROMPT  # the caller's question about the image
    max_tokens: int | None = None
    model_name: str | None = None  # the provider's model name for the spec model (5)


@dataclass(frozen=True)
class VisionResult:
    content: str


class VisionEngine(Protocol):
    async def analyze(self, request: VisionRequest) -> VisionResult:
        """What the image shows, or the answer to the prompt; EngineError on failure."""
        ...
