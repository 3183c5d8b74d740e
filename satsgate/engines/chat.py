"""Chat completion: the capability the ``text`` engine name serves (generate-text,
multilingual-ask) and that chat-model translation builds on.

Implemented by the ``openai`` (any OpenAI-compatible API) and ``anthropic`` provider
kinds (``engines/providers/``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(frozen=True)
class ImageInput:
    data: bytes
    media_type: str  # image/png, image/jpeg, image/webp, image/gif


@dataclass(frozen=True)
class ChatRequest:
    # The conversation, oldest first; the last message is the user's. System text goes in
    # ``system``, never in a message.
    messages: tuple[ChatMessage, ...]
    system: str | None = None
    max_tokens: int | None = None  # None: the engine's default (an adapter may need one)
    # Images the last user message carries (vision input).
    images: tuple[ImageInput, ...] = ()
    temperature: float | None = None
    # The provider's model name for the spec model (from [providers.X.models]).
    model_name: str | None = None


@dataclass(frozen=True)
class ChatResult:
    text: str
    # Why the model stopped: "stop" (it finished), "length" (max_tokens reached).
    finish: Literal["stop", "length"] = "stop"
    input_tokens: int | None = None
    output_tokens: int | None = None


class ChatEngine(Protocol):
    async def chat(self, request: ChatRequest) -> ChatResult:
        """The model's answer; EngineError (satsgate.engines) on failure: CONTENT_FILTERED
        when the model refused, TIMEOUT, RATE_LIMITED, SERVICE_ERROR ..."""
        ...


@dataclass(frozen=True)
class ChatChunk:
    """A piece of a streamed answer: its text, or (once, at the end, when the provider
    reports it) the usage of the whole answer."""

    text: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None


@runtime_checkable
class ChatStreamEngine(Protocol):
    """A chat engine that can stream its answer (the ``openai`` and ``anthropic`` kinds)."""

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """The answer as it is generated, then one chunk with the usage when the
        provider gives it; EngineError on failure, as :meth:`ChatEngine.chat`."""
        ...
