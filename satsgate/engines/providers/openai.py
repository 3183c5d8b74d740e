"""``kind = "openai"``: any OpenAI-compatible API, through the official ``openai`` SDK,
except chat completions (``text``, ``vision``, the translations), sent directly
(json_api.py): the paid hot path.

OpenAI itself, OpenRouter, Groq, Together, Mistral, and local servers that speak the same
API (llama.cpp ``llama-server``, Ollama, vLLM): ``base_url`` picks which. Engines served:

- ``text``: ``POST /chat/completions`` (ChatEngine);
- ``vision``: the same, with the image in the user message (VisionEngine);
- ``image`` / ``image_edit``: ``POST /images/generations`` and ``/images/edits``;
- ``tts``: ``POST /audio/speech``, the spec's tier voices mapped to the provider's voices;
- ``transcription``: ``POST /audio/transcriptions`` and ``/audio/translations``
  (``verbose_json`` segments, word timestamps, names as the prompt);
- ``translation`` / ``rare_translation``: the chat model, prompted to translate;
- ``speech_translation``: transcription, then the chat model's translation.

Kind-specific keys of the ``[providers.NAME]`` table:

- ``voices``: ``{ "English_Aria" = "nova", ... }`` over the default voice map below;
- ``speech_instructions``: send tone, accent and language as ``instructions`` to the
  speech model (default: unless its name starts with ``tts-1``, which takes none);
- ``transcription_format``: ``verbose_json`` (default: segments and timestamps) or
  ``json`` (text only, for models that take nothing else);
- ``image_sizes``: ``"openai"`` (default for ``dall-e-*`` and ``gpt-image-*`` model
  names: the nearest size those models take) or ``"exact"`` (the caller's size as asked);
- ``max_retries``: retries of a failed idempotent request (default 1, at most 2);
- ``max_tokens_field``: how the answer's limit is sent: ``max_completion_tokens``
  (default for api.openai.com) or ``max_tokens`` (default for every other base_url:
  OpenRouter, Groq, llama.cpp, Ollama, vLLM ...).

Every upstream request is made once, except that a request with no effect beyond its
answer (chat, vision, speech, transcription) is repeated once after a connection failure
or a 500/502/503/504. Image generation and edits are never repeated: each one is billed
upstream, and the caller pays for one.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar, cast

import httpx
import httpx2
import openai
from openai import AsyncOpenAI

from satsgate.engines.chat import ChatChunk, ChatRequest, ChatResult
from satsgate.engines.chat_translation import ChatTranslator
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.image_generation import (
    GeneratedImage,
    ImageEditRequest,
    ImageGenerationRequest,
)
from satsgate.engines.local.narration import tts_narrator
from satsgate.engines.providers import json_api, upstream
from satsgate.engines.providers.upstream import default_text_model, retries_option
from satsgate.engines.registry import EngineDeps
from satsgate.engines.speech_translation import TranscribeThenTranslate
from satsgate.engines.synthesis import SynthesisRequest, SynthesisResult
from satsgate.engines.transcription import (
    Segment,
    TranscriptionRequest,
    TranscriptionResult,
    Word,
)
from satsgate.engines.vision import ChatVision
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)
KIND = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Characters per speech request when narrating a book (the speech endpoint takes 4,096).
NARRATION_PART_CHARS = 4000
T = TypeVar("T")

# Spec voices -> OpenAI voices, by the voice's gender and then round the set.
_FEMALE = ("nova", "shimmer", "coral", "sage")
_MALE = ("onyx", "echo", "ash", "fable")
_FEMALE_NAMES = frozenset({
    "Aria", "Clara", "Emma", "Olivia", "Lucia", "Camille", "Hanna", "Giulia", "Ana", "Yuki",
    "Mei", "Jiwoo", "Layla", "Sanne", "Zofia", "Elif",
})  # fmt: skip
_MALE_NAMES = frozenset({
    "Brian", "Daniel", "James", "Noah", "Mateo", "Louis", "Felix", "Marco", "Tiago", "Haruto",
    "Wei", "Aarav", "Dmitri",
})  # fmt: skip
DEFAULT_VOICES: dict[str, str] = {}
for _names, _pool in ((_FEMALE_NAMES, _FEMALE), (_MALE_NAMES, _MALE)):
    for _index, _name in enumerate(sorted(_names)):
        DEFAULT_VOICES[_name] = _pool[_index % len(_pool)]
# Studio voices (narration): calm, deep defaults.
DEFAULT_VOICES.update({
    "Narrator": "onyx", "Storyteller": "fable", "Anchor": "echo", "Documentary": "onyx",
    "Audiobook_Female": "shimmer", "Audiobook_Male": "onyx", "Narrador": "onyx",
    "Narrateur": "onyx", "Erzaehler": "onyx",
})  # fmt: skip
DEFAULT_VOICE = "alloy"
MAX_FETCH_BYTES = 64 * 1024 * 1024

_MIME = {"mp3": "audio/mpeg", "wav": "audio/wav", "flac": "audio/flac", "ogg": "audio/ogg",
         "m4a": "audio/mp4"}  # fmt: skip


def _upstream_code(body: object) -> str | None:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            code = inner.get("code") or inner.get("type")
            return code if isinstance(code, str) else None
    return None


ERRORS = upstream.SdkErrors(
    KIND,
    (openai.APITimeoutError, httpx2.TimeoutException, *json_api.TIMEOUTS),
    (openai.APIConnectionError, httpx2.TransportError, *json_api.FAILURES),
    (openai.APIStatusError, upstream.StatusError),
    _upstream_code,
)


class OpenAIProvider:
    """One ``[providers.NAME]`` table of kind ``openai``: one SDK client and one direct
    chat API, shared by the engines it serves."""

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.config = config
        self.deps = deps
        options = config.options
        self.client = AsyncOpenAI(
            api_key=config.api_key or "unused",  # local servers take any key
            base_url=config.base_url or DEFAULT_BASE_URL,
            timeout=config.timeout_s,
            max_retries=0,  # retries are this adapter's (upstream.with_retry): bounded
            # The SDK's own aiohttp transport: a fraction of httpx's CPU per request.
            http_client=openai.DefaultAioHttpClient(timeout=config.timeout_s),
        )
        self.retries = retries_option(config)
        voices = options.get("voices", {})
        if not isinstance(voices, Mapping):
            raise EngineConfigError(f"[providers.{config.name}] voices must be a table")
        self.voices = {str(k): str(v) for k, v in voices.items()}
        self.transcription_format = options.get("transcription_format", "verbose_json")
        if self.transcription_format not in ("verbose_json", "json"):
            raise EngineConfigError(
                f"[providers.{config.name}] transcription_format must be verbose_json or json"
            )
        self.image_sizes = options.get("image_sizes")
        if self.image_sizes not in (None, "openai", "exact"):
            raise EngineConfigError(
                f"[providers.{config.name}] image_sizes must be openai or exact"
            )
        self.speech_instructions = options.get("speech_instructions")
        # OpenAI itself wants max_completion_tokens (max_tokens is deprecated there and
        # refused by its reasoning models); the compatible servers take max_tokens.
        default_field = (
            "max_completion_tokens"
            if "api.openai.com" in (config.base_url or DEFAULT_BASE_URL)
            else "max_tokens"
        )
        self.max_tokens_field = str(options.get("max_tokens_field", default_field))
        if self.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise EngineConfigError(
                f"[providers.{config.name}] max_tokens_field must be max_tokens or "
                "max_completion_tokens"
            )
        self._http = httpx.AsyncClient(timeout=config.timeout_s, follow_redirects=True)
        # The chat URL as the SDK merges it with base_url.
        base = self.client.base_url
        self.chat_url = str(base.copy_with(raw_path=base.raw_path + b"chat/completions"))
        # Chat completions, streamed or not (the paid hot path), go out directly, not
        # through the SDK (json_api.py): the same URL, body, key and timeouts.
        self.api = json_api.JsonApi(
            {"Authorization": f"Bearer {config.api_key or 'unused'}", "User-Agent": "satsgate"},
            config.timeout_s,
        )

    def engine(self, name: str) -> object | None:
        if name == "text":
            return _Chat(self)
        if name == "vision":
            return ChatVision(_Chat(self, "vision"))
        if name == "image":
            return _ImageGeneration(self)
        if name == "image_edit":
            return _ImageEdit(self)
        if name == "tts":
            return _Speech(self)
        if name == "audiobook":  # narration in its voices, parts within one request
            return tts_narrator(self.deps, _Speech(self), self.config.models, NARRATION_PART_CHARS)
        if name == "transcription":
            return _Transcription(self)
        if name in ("translation", "rare_translation", "speech_translation"):
            default = default_text_model(self.config)
            if default is None:
                return None
            translator = ChatTranslator(_Chat(self, name), default)
            if name == "speech_translation":
                return TranscribeThenTranslate(_Transcription(self), translator)
            return translator
        return None

    async def aclose(self) -> None:
        await self.client.close()
        await self._http.aclose()
        await self.api.aclose()

    async def call(self, engine: str, fn: Callable[[], Awaitable[T]], *, idempotent: bool) -> T:
        """Run one SDK request with the retry rule; any failure -> EngineError."""
        try:
            return await upstream.with_retry(
                fn, retries=self.retries if idempotent else 0, retryable=ERRORS.retryable
            )
        except EngineError:
            raise
        except Exception as exc:
            raise ERRORS.mapped(exc, engine) from None

    async def fetch(self, url: str) -> bytes:
        """An output the upstream returned as a URL (older image models), at most
        MAX_FETCH_BYTES; ValueError (malformed) past that."""
        async with self._http.stream("GET", url) as resp:
            resp.raise_for_status()
            data = bytearray()
            async for chunk in resp.aiter_bytes():
                data += chunk
                if len(data) > MAX_FETCH_BYTES:
                    raise ValueError("upstream output too large")
            return bytes(data)


# The SDK's own JSON for a request body (openapi_dumps: compact, UTF-8, no NaN), made
# once: a body encoded here is sent as it is, byte for byte what the SDK would send.
_BODY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _json(raw: Any) -> Any:
    """The JSON body of a raw SDK response; ValueError when it is not JSON."""
    return json.loads(raw.http_response.content)


def _need_model(name: str | None) -> str:
    if not name:
        # The registry hands every call a mapped model name; without one nothing is sent.
        raise EngineError(ErrorCode.SERVICE_ERROR, "No model is configured for this request.")
    return name


# -- chat and vision -----------------------------------------------------------------------


def _chat_messages(request: ChatRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for index, message in enumerate(request.messages):
        last = index == len(request.messages) - 1
        if last and request.images and message.role == "user":
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
            for image in request.images:
                data = base64.b64encode(image.data).decode("ascii")
                parts.append(
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:{image.media_type};base64,{data}"},
                    }
                )
            messages.append({"role": "user", "content": parts})
        else:
            messages.append({"role": message.role, "content": message.content})
    return messages


class _Chat:
    def __init__(self, provider: OpenAIProvider, engine: str = "text") -> None:
        self.provider = provider
        self.engine = engine

    def _payload(self, request: ChatRequest, *, stream: bool = False) -> dict[str, Any]:
        """The chat completion's body: model, messages, with ``stream`` the streaming
        fields, then the caller's limits that are set (the token cap under the provider's
        own field name)."""
        model = _need_model(request.model_name)
        extra: dict[str, Any] = {}
        if request.max_tokens is not None:
            extra[self.provider.max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            extra["temperature"] = request.temperature
        streaming: dict[str, Any] = (
            {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        )
        return {"model": model, "messages": _chat_messages(request), **streaming, **extra}

    async def chat(self, request: ChatRequest) -> ChatResult:
        payload = self._payload(request)
        api, url = self.provider.api, self.provider.chat_url

        async def call() -> Any:
            return await api.post(url, _BODY_ENCODER.encode(payload).encode())

        body = await self.provider.call(self.engine, call, idempotent=True)
        return ERRORS.read(self.engine, _chat_result, body, "refusal or unusable answer")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """``stream: true`` with ``stream_options.include_usage``: the text deltas, then
        the usage from the last chunk (``choices`` empty, ``usage`` set). At most the
        provider's ``timeout_s`` between two chunks (TIMEOUT past it); a chunk with an
        ``error`` fails the stream; closing the iterator closes the upstream response."""
        content = _BODY_ENCODER.encode(self._payload(request, stream=True)).encode()
        # Only opening the stream is repeated after a connection failure (nothing was
        # generated for the caller yet).
        api, url = self.provider.api, self.provider.chat_url
        response = await self.provider.call(
            self.engine, lambda: api.open_events(url, content), idempotent=True
        )
        # A refusal streams its text in ``delta.refusal`` pieces: gathered to its finish,
        # it is the model_said of the refusal (nothing of it goes out as the answer).
        refusal: list[str] = []
        events = json_api.events(response)
        async with ERRORS.reading_stream(self.engine, response):
            async for event in upstream.events_within(events, self.provider.config.timeout_s):
                if event.data == "[DONE]":
                    break
                chunk = json.loads(event.data)
                if event.event == "error" or (isinstance(chunk, dict) and chunk.get("error")):
                    # The upstream failed while answering.
                    error = EngineError(
                        ErrorCode.L402_UPSTREAM_FAILED, upstream.UNAVAILABLE_MESSAGE
                    )
                    upstream.log_failure(self.engine, KIND, error, "error event mid-stream")
                    raise error
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    piece = delta.get("refusal")
                    if piece:
                        refusal.append(piece)
                    finish = choice.get("finish_reason")
                    if finish == "content_filter" or (refusal and finish is not None):
                        raise upstream.refused_error(said="".join(refusal))
                    text = delta.get("content")
                    if text and not refusal:
                        yield ChatChunk(text=text)
                usage = chunk.get("usage")
                if usage is not None and not refusal:
                    yield ChatChunk(
                        input_tokens=usage.get("prompt_tokens"),
                        output_tokens=usage.get("completion_tokens"),
                    )
            if refusal:  # a stream that ended without its finish chunk
                raise upstream.refused_error(said="".join(refusal))


def _chat_result(body: Any) -> ChatResult:
    choice = body["choices"][0]
    message = choice["message"]
    finish = choice.get("finish_reason")
    if message.get("refusal") or finish == "content_filter":
        raise upstream.refused_error(said=message.get("refusal"))
    content = message.get("content")
    if not isinstance(content, str):
        raise ValueError("no content")
    usage = body.get("usage") or {}
    return ChatResult(
        text=content,
        finish="length" if finish == "length" else "stop",
        input_tokens=usage.get("prompt_tokens"),
        output_tokens=usage.get("completion_tokens"),
    )


# -- images --------------------------------------------------------------------------------

_GPT_IMAGE_SIZES = ((1024, 1024), (1536, 1024), (1024, 1536))
_DALLE3_SIZES = ((1024, 1024), (1792, 1024), (1024, 1792))
_DALLE2_SIZES = ((256, 256), (512, 512), (1024, 1024))


def image_size(model: str, width: int, height: int, mode: object) -> str:
    """The size to ask for: the caller's, or for OpenAI's own image models the one they
    take that is nearest in shape (and then in area)."""
    name = model.lower()
    sizes = None
    if mode != "exact":
        if name.startswith("gpt-image"):
            sizes = _GPT_IMAGE_SIZES
        elif name.startswith("dall-e-3"):
            sizes = _DALLE3_SIZES
        elif name.startswith("dall-e-2"):
            sizes = _DALLE2_SIZES
        elif mode == "openai":
            sizes = _GPT_IMAGE_SIZES
    if sizes is None:
        return f"{width}x{height}"
    ratio = width / height
    best = min(sizes, key=lambda s: (abs(s[0] / s[1] - ratio), abs(s[0] * s[1] - width * height)))
    return f"{best[0]}x{best[1]}"


def _wants_response_format(model: str) -> bool:
    # GPT image models always answer b64_json and refuse the parameter.
    return not model.lower().startswith("gpt-image")


async def _image_from(provider: OpenAIProvider, body: Any) -> GeneratedImage:
    item = body["data"][0]
    revised = item.get("revised_prompt")
    if isinstance(item.get("b64_json"), str):
        data = base64.b64decode(item["b64_json"], validate=True)
    elif isinstance(item.get("url"), str):
        data = await provider.fetch(item["url"])
    else:
        raise ValueError("no image")
    if not data:
        raise ValueError("empty image")
    return GeneratedImage(data, revised if isinstance(revised, str) else None)


class _ImageGeneration:
    def __init__(self, provider: OpenAIProvider) -> None:
        self.provider = provider

    async def generate(self, request: ImageGenerationRequest) -> GeneratedImage:
        model = _need_model(request.model_name)
        size = image_size(model, request.width, request.height, self.provider.image_sizes)
        extra: dict[str, Any] = {"size": size, "n": 1}
        if _wants_response_format(model):
            extra["response_format"] = "b64_json"
        images = self.provider.client.images

        async def call() -> Any:
            if request.references:  # image-to-image: the edits endpoint takes references
                files = [
                    (f"reference-{i}.png", ref, "image/png")
                    for i, ref in enumerate(request.references)
                ]
                raw = await images.with_raw_response.edit(
                    image=files if len(files) > 1 else files[0],
                    prompt=request.prompt,
                    model=model,
                    **extra,
                )
            else:
                raw = await images.with_raw_response.generate(
                    prompt=request.prompt, model=model, **extra
                )
            return await _image_from(self.provider, _json(raw))

        return await self.provider.call("image", call, idempotent=False)


class _ImageEdit:
    def __init__(self, provider: OpenAIProvider) -> None:
        self.provider = provider

    async def edit(self, request: ImageEditRequest) -> GeneratedImage:
        model = _need_model(request.model_name)
        extra: dict[str, Any] = {"n": 1}
        if request.aspect_ratio != "auto":
            w, h = (int(x) for x in request.aspect_ratio.split(":"))
            side = {"1K": 1024, "2K": 2048, "4K": 4096}.get(request.resolution, 1024)
            scale = side / max(w, h)
            extra["size"] = image_size(
                model, round(w * scale), round(h * scale), self.provider.image_sizes
            )
        if _wants_response_format(model):
            extra["response_format"] = "b64_json"
        else:
            extra["output_format"] = request.output_format
        edit = self.provider.client.images.with_raw_response.edit

        async def call() -> Any:
            raw = await edit(
                image=("image.png", request.image, "image/png"),
                prompt=request.prompt,
                model=model,
                **extra,
            )
            return await _image_from(self.provider, _json(raw))

        return await self.provider.call("image_edit", call, idempotent=False)


# -- speech --------------------------------------------------------------------------------


def provider_voice(voices: Mapping[str, str], request: SynthesisRequest) -> str:
    """The provider voice for a spec voice: the operator's map, else the default map by
    name (``English_Aria`` -> ``Aria``), else by the global tier's description."""
    if request.voice is not None:
        if request.voice in voices:
            return voices[request.voice]
        name = request.voice.split("_", 1)[1] if "_" in request.voice else request.voice
        if name in DEFAULT_VOICES:
            return DEFAULT_VOICES[name]
        # A cloned studio voice (Custom_...) lives with the engine that cloned it.
        raise EngineError(
            ErrorCode.INVALID_INPUT, f"The voice {request.voice} is not available on this node."
        )
    described = (request.voice_description or "").lower()
    if "female" in described:
        return voices.get("female", _FEMALE[0])
    if "male" in described:
        return voices.get("male", _MALE[0])
    return voices.get("default", DEFAULT_VOICE)


def speech_instructions(request: SynthesisRequest) -> str | None:
    """Tone, accent and language for a model that takes instructions."""
    from satsgate.domain.languages import language_name

    parts: list[str] = []
    if request.language and request.language.split("-")[0].lower() not in ("en", "eng"):
        parts.append(f"Speak in {language_name(request.language.split('-')[0].lower())}.")
    if request.voice_description:
        parts.append(f"Voice: {request.voice_description}.")
    if request.emotion and request.emotion != "neutral":
        parts.append(f"Tone: {request.emotion}.")
    return " ".join(parts) or None


class _Speech:
    def __init__(self, provider: OpenAIProvider) -> None:
        self.provider = provider

    async def synthesize(self, request: SynthesisRequest) -> SynthesisResult:
        model = _need_model(request.model_name)
        voice = provider_voice(self.provider.voices, request)
        extra: dict[str, Any] = {}
        takes_instructions = self.provider.speech_instructions
        if takes_instructions is None:
            takes_instructions = not model.lower().startswith("tts-1")
        instructions = speech_instructions(request)
        if takes_instructions and instructions:
            extra["instructions"] = instructions
        create = self.provider.client.audio.speech.with_raw_response.create

        async def call() -> bytes:
            raw = await create(
                model=model,
                input=request.text,
                voice=cast(Any, voice),
                response_format=request.format,
                speed=request.speed,
                **extra,
            )
            data: bytes = raw.http_response.content
            if not data or data.lstrip()[:1] in (b"{", b"<"):
                raise ValueError("not audio")
            return data

        audio = await self.provider.call("tts", call, idempotent=True)
        return SynthesisResult(audio, request.format)


# -- transcription -------------------------------------------------------------------------


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a number")
    return float(value)


def transcription_result(body: Any) -> TranscriptionResult:
    """A ``json`` or ``verbose_json`` transcription body -> TranscriptionResult; ValueError
    (malformed) when it is neither."""
    from satsgate.domain.languages import UnknownLanguage, resolve_translation_language

    if not isinstance(body, Mapping) or not isinstance(body.get("text"), str):
        raise ValueError("no text")
    words = [
        Word(_float(w["start"]), _float(w["end"]), str(w["word"]).strip())
        for w in body.get("words") or []
    ]
    segments: list[Segment] = []
    for raw in body.get("segments") or []:
        start, end = _float(raw["start"]), _float(raw["end"])
        inside = tuple(w for w in words if start <= w.start < end or (w.start == end == start))
        segments.append(Segment(start, end, str(raw["text"]).strip(), inside))
    language = body.get("language")
    code: str | None = None
    if isinstance(language, str) and language:
        try:
            code = resolve_translation_language(language)
        except UnknownLanguage:
            code = None
    duration = body.get("duration")
    return TranscriptionResult(
        text=body["text"].strip(),
        segments=tuple(segments),
        language=code,
        duration_s=_float(duration) if duration is not None else None,
    )


class _Transcription:
    def __init__(self, provider: OpenAIProvider) -> None:
        self.provider = provider

    async def transcribe(self, request: TranscriptionRequest) -> TranscriptionResult:
        model = _need_model(request.model_name)
        fmt: Literal["json", "verbose_json"] = (
            "json" if self.provider.transcription_format == "json" else "verbose_json"
        )
        extra: dict[str, Any] = {"response_format": fmt}
        if request.names:
            extra["prompt"] = "Names: " + ", ".join(request.names) + "."
        audio = (f"audio.{request.format}", request.audio, _MIME.get(request.format, "audio/mpeg"))
        audio_api = self.provider.client.audio
        if request.task == "translation":

            async def call() -> Any:
                return _json(
                    await audio_api.translations.with_raw_response.create(
                        file=audio, model=model, **extra
                    )
                )
        else:
            if request.language:
                extra["language"] = request.language
            if fmt == "verbose_json":
                extra["timestamp_granularities"] = (
                    ["segment", "word"] if request.word_timestamps else ["segment"]
                )

            async def call() -> Any:
                return _json(
                    await audio_api.transcriptions.with_raw_response.create(
                        file=audio, model=model, **extra
                    )
                )

        body = await self.provider.call("transcription", call, idempotent=True)
        try:
            result = transcription_result(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise ERRORS.mapped(exc, "transcription") from None
        if request.task == "translation":
            result = TranscriptionResult(result.text, result.segments, "en", result.duration_s)
        return result


def create(config: ProviderConfig, deps: EngineDeps) -> OpenAIProvider:
    return OpenAIProvider(config, deps)
