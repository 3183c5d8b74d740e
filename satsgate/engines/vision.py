"""Image understanding: the capability the ``vision`` engine name serves (analyze-image).

Provider kinds serve it with their chat model and an image in the user message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from satsgate.engines.chat import ChatEngine, ChatMessage, ChatRequest, ImageInput

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


class ChatVision:
    """The vision engine of a provider kind whose chat model sees images: the prompt as
    the user's message with the image beside it."""

    def __init__(self, chat: ChatEngine) -> None:
        self.chat = chat

    async def analyze(self, request: VisionRequest) -> VisionResult:
        result = await self.chat.chat(
            ChatRequest(
                messages=(ChatMessage("user", request.prompt),),
                images=(request.image,),
                max_tokens=request.max_tokens,
                model_name=request.model_name,
            )
        )
        return VisionResult(result.text)
