"""``kind = "anthropic"``: the Anthropic Messages API (``POST /v1/messages`` with
``x-api-key`` and ``anthropic-version``), called directly (json_api.py: the official SDK's
request building and typed stream events cost several times the exchange itself on this,
the paid hot path). Engines served: ``text`` (ChatEngine), ``vision`` (VisionEngine: the image as a
base64 block of the user message) and ``translation`` / ``rare_translation`` (the chat
model, prompted to translate).

``base_url`` defaults to ``https://api.anthropic.com`` (a trailing ``/v1`` is dropped:
the path adds it). Kind-specific keys: ``max_tokens`` (the answer's limit when the caller
sets none, and the most ever asked: the API requires one, and refuses more than the
model's own limit; default 4096), ``max_retries`` (as for ``openai``).

``text`` also streams (ChatStreamEngine: ``stream: true``, the named server-sent events).
A refusal (``stop_reason: "refusal"``) is CONTENT_FILTERED; 529 (overloaded) is
L402_UPSTREAM_FAILED with the retry hint, so a chain falls back to its next provider.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from satsgate.engines.chat import ChatChunk, ChatRequest, ChatResult
from satsgate.engines.chat_translation import ChatTranslator
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.providers import json_api, upstream
from satsgate.engines.providers.upstream import default_text_model, retries_option
from satsgate.engines.registry import EngineDeps
from satsgate.engines.vision import ChatVision
from satsgate.errors import ErrorCode

KIND = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
API_VERSION = "2023-06-01"  # the anthropic-version header
T = TypeVar("T")


def _upstream_type(body: object) -> str | None:
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping) and isinstance(inner.get("type"), str):
            return str(inner["type"])
    return None


# The error type only names the failure in the log: no Anthropic type is a policy code.
ERRORS = upstream.SdkErrors(
    KIND,
    json_api.TIMEOUTS,
    json_api.FAILURES,
    upstream.StatusError,
    _upstream_type,
    code_decides=False,
)


class AnthropicProvider:
    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.config = config
        base_url = config.base_url or DEFAULT_BASE_URL
        if base_url.endswith("/v1"):
            base_url = base_url[: -len("/v1")]
        self.messages_url = f"{base_url.rstrip('/')}/v1/messages"
        self.api = json_api.JsonApi(
            {
                "x-api-key": config.api_key or "unused",
                "anthropic-version": API_VERSION,
                "User-Agent": "satsgate",
            },
            config.timeout_s,
        )
        self.retries = retries_option(config)
        max_tokens = config.options.get("max_tokens", DEFAULT_MAX_TOKENS)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise EngineConfigError(f"[providers.{config.name}] max_tokens must be a number")
        self.max_tokens = max_tokens

    def engine(self, name: str) -> object | None:
        if name == "text":
            return _Chat(self)
        if name == "vision":
            return ChatVision(_Chat(self, "vision"))
        if name in ("translation", "rare_translation"):
            default = default_text_model(self.config)
            return None if default is None else ChatTranslator(_Chat(self), default)
        return None

    async def aclose(self) -> None:
        await self.api.aclose()

    async def call(self, engine: str, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await upstream.with_retry(fn, retries=self.retries, retryable=ERRORS.retryable)
        except EngineError:
            raise
        except Exception as exc:
            raise ERRORS.mapped(exc, engine) from None


def _messages(request: ChatRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.messages and request.messages[0].role == "assistant":
        # The Messages API starts with the user's turn.
        messages.append({"role": "user", "content": "(The conversation so far.)"})
    for index, message in enumerate(request.messages):
        last = index == len(request.messages) - 1
        if last and request.images and message.role == "user":
            blocks: list[dict[str, Any]] = [
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": image.media_type,
                        "data": base64.b64encode(image.data).decode("ascii"),
                    },
                }
                for image in request.images
            ]
            blocks.append({"type": "text", "text": message.content})
            messages.append({"role": "user", "content": blocks})
        else:
            messages.append({"role": message.role, "content": message.content})
    return messages


def chat_result(body: Any) -> ChatResult:
    """A Messages API body -> ChatResult; CONTENT_FILTERED on a refusal, ValueError or
    KeyError (malformed) on anything else unusable."""
    stop = body["stop_reason"]
    if stop == "refusal":
        details = body.get("stop_details") or {}
        said = details.get("explanation") if isinstance(details, dict) else None
        if not said:  # the text the model wrote before it stopped, if any
            said = "".join(
                b.get("text", "") for b in body.get("content") or () if b.get("type") == "text"
            )
        raise upstream.refused_error(said=said)
    texts = [b["text"] for b in body["content"] if b.get("type") == "text"]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("no text")
    usage = body.get("usage") or {}
    return ChatResult(
        text="".join(texts),
        finish="length" if stop == "max_tokens" else "stop",
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
    )


class _Chat:
    def __init__(self, provider: AnthropicProvider, engine: str = "text") -> None:
        self.provider = provider
        self.engine = engine

    def _payload(self, request: ChatRequest) -> dict[str, Any]:
        model = request.model_name
        if not model:
            raise EngineError(ErrorCode.SERVICE_ERROR, "No model is configured for this request.")
        extra: dict[str, Any] = {}
        if request.system:
            extra["system"] = request.system
        # ``temperature`` is not sent: the SDK's Messages API takes none (2.x).
        cap = self.provider.max_tokens
        return {
            "model": model,
            "max_tokens": min(request.max_tokens or cap, cap),
            "messages": _messages(request),
            **extra,
        }

    async def chat(self, request: ChatRequest) -> ChatResult:
        payload = self._payload(request)
        api, url = self.provider.api, self.provider.messages_url

        async def call() -> Any:
            return await api.post(url, json.dumps(payload, separators=(",", ":")).encode())

        body = await self.provider.call(self.engine, call)
        return ERRORS.read(self.engine, chat_result, body, "refusal")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """``stream: true``: the text deltas (``content_block_delta`` with a
        ``text_delta``), then the usage: input tokens from ``message_start``, output tokens
        from the last ``message_delta`` (cumulative). ``stop_reason: refusal`` is
        CONTENT_FILTERED; an ``error`` event fails the stream (the SDK raises it); at most
        the provider's ``timeout_s`` between two events (TIMEOUT past it). Closing the
        iterator closes the upstream response."""
        content = json.dumps({**self._payload(request), "stream": True}, separators=(",", ":"))
        api, url = self.provider.api, self.provider.messages_url
        # Only opening the stream is repeated after a connection failure (nothing was
        # generated for the caller yet).
        response = await self.provider.call(
            self.engine, lambda: api.open_events(url, content.encode())
        )
        input_tokens: int | None = None
        output_tokens: int | None = None
        timeout_s = self.provider.config.timeout_s
        async with ERRORS.reading_stream(self.engine, response):
            async for event in upstream.events_within(json_api.events(response), timeout_s):
                if event.event == "ping":
                    continue
                data = json.loads(event.data)
                kind = data.get("type", event.event)
                if kind == "error" or event.event == "error":
                    # The upstream failed while answering (overloaded, ...).
                    error = EngineError(
                        ErrorCode.L402_UPSTREAM_FAILED, upstream.UNAVAILABLE_MESSAGE
                    )
                    cause = f"error event mid-stream ({_upstream_type(data) or 'untyped'})"
                    upstream.log_failure(self.engine, KIND, error, cause)
                    raise error
                if kind == "message_start":
                    usage = data["message"].get("usage") or {}
                    input_tokens = usage.get("input_tokens")
                    output_tokens = usage.get("output_tokens")
                elif kind == "content_block_delta":
                    delta = data["delta"]
                    if delta.get("type") == "text_delta" and delta.get("text"):
                        yield ChatChunk(text=delta["text"])
                elif kind == "message_delta":
                    delta = data.get("delta") or {}
                    if delta.get("stop_reason") == "refusal":
                        details = delta.get("stop_details") or {}
                        said = details.get("explanation") if isinstance(details, dict) else None
                        error = upstream.refused_error(said=said)
                        upstream.log_failure(self.engine, KIND, error, "refusal")
                        raise error
                    usage = data.get("usage") or {}
                    if usage.get("output_tokens") is not None:
                        output_tokens = usage["output_tokens"]
                    if usage.get("input_tokens") is not None:
                        input_tokens = usage["input_tokens"]
                elif kind == "message_stop":
                    break
            if input_tokens is not None or output_tokens is not None:
                yield ChatChunk(input_tokens=input_tokens, output_tokens=output_tokens)


def create(config: ProviderConfig, deps: EngineDeps) -> AnthropicProvider:
    return AnthropicProvider(config, deps)
