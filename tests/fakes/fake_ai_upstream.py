"""Loopback fakes of two AI provider APIs, for the provider adapters' tests: an
OpenAI-compatible API (under ``/v1``) and the Anthropic Messages API (under
``/anthropic/v1``), one aiohttp app in a thread of its own.

Written from the providers' references (docs in the shared providers notes): paths; auth
(``Authorization: Bearer`` for OpenAI; ``x-api-key`` or ``Authorization: Bearer``,
plus ``anthropic-version``, for Anthropic); JSON bodies and multipart uploads as the
official SDKs send them; error
bodies (``{"error": {message, type, param, code}}`` and ``{"type": "error", "error":
{type, message}, "request_id"}``); 429 with ``retry-after``.

Answers are deterministic and derived from the request, so a test can check the output
itself: a chat echoes the last user text (and the size of an attached image); a
translation prompt is answered from a small dictionary; images are drawn at the size asked
(edits invert the uploaded image); speech is a WAV whose length follows the text;
transcription segments follow the uploaded WAV's duration and spell the prompt's names.

A test scripts failures with ``fake.fail_next(path, mode)``: ``refusal``, ``policy``
(400 content_policy_violation), ``slow`` (answers after ``SLOW_S``), ``429``, ``500``,
``529`` (Anthropic overloaded), ``malformed`` (200 with an unusable JSON body), ``html``
(200 with an HTML page); for a streamed chat (``stream: true``, both APIs, their own SSE
wire): ``slow_stream``, ``stall_stream``, ``error_stream``, ``huge_stream``
(``_stream_words``).

Content refusals as the real models make them depend on the request: a chat or image
prompt containing one of ``fake.refuse_terms`` is refused (a chat with the assistant
message's ``refusal`` text, ``fake.refusal_text``; an image generation with the 400
``content_policy_violation`` error), so a changed prompt is answered.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import threading
import wave
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web
from PIL import Image, ImageOps

from tests.conftest import free_port

OPENAI_KEY = "sk-test-fake-openai-KEY-7f3a9c"
ANTHROPIC_KEY = "sk-ant-test-fake-KEY-51d0e2"
# Text the fakes put in their error bodies: it must never reach a caller.
UPSTREAM_DETAIL = "upstream-internal-detail-9b1e"
SLOW_S = 6.0
HUGE_CHUNKS = 8192  # words of a "huge_stream" answer (8 KiB each: 64 MiB in all)
RETRY_AFTER = "7"
REFUSAL_TEXT = "I'm sorry, I can't help with that."

TRANSLATIONS = {  # english -> (spanish, german)
    "good morning": ("buenos días", "guten Morgen"),
    "the cat sleeps": ("el gato duerme", "die Katze schläft"),
    "welcome": ("bienvenido", "willkommen"),
}


@dataclass
class Seen:
    """One request as the fake received it."""

    path: str
    headers: dict[str, str]
    json: dict[str, Any] | None = None
    form: dict[str, list[Any]] = field(default_factory=dict)  # multipart: name -> values
    raw: bytes = b""  # a JSON body's bytes as they came


def _openai_error(
    status: int,
    message: str,
    etype: str,
    code: str | None,
    headers: dict[str, str] | None = None,
    *,
    marked: bool = True,
) -> web.Response:
    """An error body; ``marked`` adds UPSTREAM_DETAIL to the message (text that must never
    reach a caller). A content-policy refusal's message is the model's refusal, which the
    caller is shown as model_said: it comes unmarked, as the API writes it."""
    body = {
        "error": {
            "message": f"{message} ({UPSTREAM_DETAIL})" if marked else message,
            "type": etype,
            "param": None,
            "code": code,
        }
    }
    return web.json_response(body, status=status, headers=headers)


def _anthropic_error(
    status: int, etype: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = {
        "type": "error",
        "error": {"type": etype, "message": f"{message} ({UPSTREAM_DETAIL})"},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
    return web.json_response(body, status=status, headers=headers)


def wav(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x00" * int(seconds * rate))
    return out.getvalue()


def png(width: int, height: int, color: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def _translate(text: str, target: str) -> str:
    column = {"Spanish": 0, "German": 1}.get(target)
    lines = []
    for line in text.split("\n"):
        key = line.strip().lower().rstrip(".")
        if not key:
            lines.append(line)
            continue
        known = column is not None and key in TRANSLATIONS
        lines.append(TRANSLATIONS[key][column] if known else f"[{target}] {line}")  # type: ignore[index]
    return "\n".join(lines)


def _chat_answer(system: str, user_text: str, image_sizes: list[tuple[int, int]]) -> str:
    match = re.search(r"Translate the user's text into (\w+)", system)
    if match:
        answer = _translate(user_text, match.group(1))
        return ("SOURCE: en\n" + answer) if "SOURCE:" in system else answer
    if "QUESTION_LANGUAGE" in system:
        language = re.search(r"question in (\w+)", system)
        return f"QUESTION_LANGUAGE: de\nAnswer in {language.group(1) if language else '?'}."
    answer = f"You said: {user_text}"
    for width, height in image_sizes:
        answer += f" [image {width}x{height}]"
    if system:
        answer += f" [system {len(system)} chars]"
    return answer


def _image_size(data_uri_or_b64: str) -> tuple[int, int]:
    raw = (
        data_uri_or_b64.split(",", 1)[1]
        if data_uri_or_b64.startswith("data:")
        else (data_uri_or_b64)
    )
    with Image.open(io.BytesIO(base64.b64decode(raw))) as img:
        return img.size


class FakeAIUpstream:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.compressed = 0  # chat answers sent gzip-compressed
        self.streams_done = 0  # streamed chat answers sent to their end
        self.streams_cut = 0  # streamed chat answers the reader went away from
        self.stream_chunks_sent = 0  # text chunks written into streamed answers
        # Streams cut by their reader, by the mode that scripted them ("" for none): a
        # stalled stream notices its reader left only when it wakes, maybe in a later test.
        self.cuts: Counter[str] = Counter()
        self.files: dict[str, bytes] = {}  # images answered by URL
        self._script: dict[str, deque[str]] = {}
        # Prompts containing one of these are refused on content (see the module).
        self.refuse_terms: set[str] = set()
        self.refusal_text = REFUSAL_TEXT
        self.latency_s = 0.0  # every OpenAI-compatible answer waits this long first
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._runner: web.AppRunner | None = None
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    # -- control (from the test's thread) ---------------------------------------------------

    def fail_next(self, path: str, mode: str, times: int = 1) -> None:
        with self._lock:
            self._script.setdefault(path, deque()).extend([mode] * times)

    def clear(self) -> None:
        with self._lock:
            self._script.clear()
            self.seen.clear()
            self.refuse_terms = set()
            self.refusal_text = REFUSAL_TEXT
            self.latency_s = 0.0

    def requests(self, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.path == path]

    def stop(self) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    # -- server ------------------------------------------------------------------------------

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/images/generations", self._generate)
        app.router.add_post("/v1/images/edits", self._edit)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/translations", self._transcribe)
        app.router.add_post("/anthropic/v1/messages", self._messages)
        app.router.add_get("/files/{name}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _record(self, request: web.Request) -> Seen:
        seen = Seen(request.path, {k.lower(): v for k, v in request.headers.items()})
        if request.content_type == "application/json":
            seen.raw = await request.read()
            seen.json = json.loads(seen.raw)
        elif request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                assert isinstance(part, BodyPartReader)
                value: Any = (
                    (part.filename, await part.read()) if part.filename else (await part.text())
                )
                seen.form.setdefault(str(part.name), []).append(value)
        with self._lock:
            self.seen.append(seen)
        return seen

    def _mode(self, path: str) -> str | None:
        with self._lock:
            queue = self._script.get(path)
            return queue.popleft() if queue else None

    async def _openai_gate(self, request: web.Request) -> tuple[Seen, str | None] | web.Response:
        seen = await self._record(request)
        if seen.headers.get("authorization") != f"Bearer {OPENAI_KEY}":
            return _openai_error(
                401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
            )
        mode = self._mode(request.path)
        await asyncio.sleep(self.latency_s)
        if mode == "slow":
            await asyncio.sleep(SLOW_S)
        elif mode == "429":
            return _openai_error(
                429,
                "Rate limit reached for requests",
                "requests",
                "rate_limit_exceeded",
                {"retry-after": RETRY_AFTER},
            )
        elif mode == "500":
            return _openai_error(
                500, "The server had an error while processing your request", "server_error", None
            )
        elif mode == "policy":
            return _openai_error(
                400,
                "Your request was rejected as a result of our safety system",
                "invalid_request_error",
                "content_policy_violation",
                marked=False,
            )
        elif mode == "html":
            return web.Response(
                text="<html><body>Bad gateway</body></html>", content_type="text/html"
            )
        return seen, mode

    # -- OpenAI-compatible endpoints -------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        gated = await self._openai_gate(request)
        if isinstance(gated, web.Response):
            return gated
        seen, mode = gated
        body = seen.json or {}
        if mode == "malformed":
            return web.json_response({"id": "chatcmpl-1", "object": "chat.completion"})
        system = " ".join(m["content"] for m in body["messages"] if m["role"] == "system")
        last = body["messages"][-1]
        sizes: list[tuple[int, int]] = []
        if isinstance(last["content"], list):
            text = " ".join(p["text"] for p in last["content"] if p["type"] == "text")
            sizes = [
                _image_size(p["image_url"]["url"])
                for p in last["content"]
                if p["type"] == "image_url"
            ]
        else:
            text = last["content"]
        answer = _chat_answer(system, text, sizes)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": answer,
            "refusal": None,
            "annotations": [],
        }
        if mode == "refusal" or self._refused(text):
            message = {
                "role": "assistant",
                "content": None,
                "refusal": self.refusal_text,
                "annotations": [],
            }
        if body.get("stream"):
            refusal = message["refusal"]
            return await self._chat_stream(request, body, answer, mode, refusal)
        resp = web.json_response(
            {
                "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
                "object": "chat.completion",
                "created": 1741569952,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29},
            }
        )
        # As real APIs do when the client accepts it: the answer goes gzip-compressed.
        if "gzip" in seen.headers.get("accept-encoding", ""):
            resp.enable_compression(web.ContentCoding.gzip)
            self.compressed += 1
        return resp

    async def _chat_stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        answer: str,
        mode: str | None,
        refusal: str | None = None,
    ) -> web.StreamResponse:
        """OpenAI's streamed completion: chat.completion.chunk events (a word each), a
        finish chunk, with stream_options.include_usage a last chunk of usage and no
        choices, then [DONE]. Stream modes: see :meth:`_stream_words`; "error_stream"
        ends after two words with a data chunk holding ``error`` (how the API fails
        mid-stream: the SDK raises it). A refused prompt streams ``refusal`` a word at a
        time in ``delta.refusal`` (``content`` null), as the API does."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        base = {
            "id": "chatcmpl-stream-1",
            "object": "chat.completion.chunk",
            "created": 1741569952,
            "model": body["model"],
        }
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def send(chunk: dict[str, Any]) -> None:
            if include_usage:
                chunk = {**chunk, "usage": chunk.get("usage")}
            await resp.write(f"data: {json.dumps({**base, **chunk})}\n\n".encode())

        async def word(text: str) -> None:
            await send(
                {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
            )

        async def error() -> None:
            failure = {"message": f"The server had an error ({UPSTREAM_DETAIL})",
                       "type": "server_error", "param": None, "code": None}  # fmt: skip
            await resp.write(f"data: {json.dumps({'error': failure})}\n\n".encode())

        async def refused(text: str) -> None:
            delta = {"content": None, "refusal": text}
            await send({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})

        async def whole() -> None:
            await send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "finish_reason": None}]})  # fmt: skip
            if refusal is not None:
                for piece in re.findall(r"\S+\s*", refusal):
                    await refused(piece)
            elif not await self._stream_words(answer, mode, word, error):
                return
            await send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if include_usage:
                usage = {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29}
                await send({"choices": [], "usage": usage})
            await resp.write(b"data: [DONE]\n\n")

        return await self._streamed(resp, whole(), mode)

    async def _stream_words(
        self,
        answer: str,
        mode: str | None,
        word: Callable[[str], Awaitable[None]],
        error: Callable[[], Awaitable[None]],
    ) -> bool:
        """Send the answer a word at a time; False when the stream ended with an error.
        Modes: "slow_stream" 0.2 s between words; "stall_stream" stops for ``SLOW_S`` after
        two words; "error_stream" sends the provider's mid-stream error after two words;
        "huge_stream" sends ``HUGE_CHUNKS`` words of 8 KiB (for backpressure)."""
        words = re.findall(r"\S+\s*", answer)
        if mode == "huge_stream":
            words = ["x" * 8191 + " "] * HUGE_CHUNKS
        for index, text in enumerate(words):
            if index == 2 and mode == "error_stream":
                await error()
                return False
            if index == 2 and mode == "stall_stream":
                await asyncio.sleep(SLOW_S)
            await word(text)
            with self._lock:
                self.stream_chunks_sent += 1
            if mode == "slow_stream":
                await asyncio.sleep(0.2)
        return True

    async def _streamed(
        self, resp: web.StreamResponse, sending: Coroutine[Any, Any, None], mode: str | None
    ) -> web.StreamResponse:
        """Run a stream's sending, counting it done, or cut (also by its mode) when its
        reader went away."""
        try:
            await sending
        except (ConnectionResetError, ConnectionError):
            with self._lock:
                self.streams_cut += 1
                self.cuts[mode or ""] += 1
            return resp
        with self._lock:
            self.streams_done += 1
        return resp

    async def _generate(self, request: web.Request) -> web.Response:
        gated = await self._openai_gate(request)
        if isinstance(gated, web.Response):
            return gated
        seen, mode = gated
        if mode == "malformed":
            return web.json_response({"created": 1713833628, "data": [{}]})
        if self._refused(str((seen.json or {}).get("prompt", ""))):
            return _openai_error(
                400,
                "Your request was rejected as a result of our safety system. Your prompt may "
                "contain text that is not allowed by our safety system.",
                "invalid_request_error",
                "content_policy_violation",
                marked=False,
            )
        width, height = (int(x) for x in str((seen.json or {})["size"]).split("x"))
        image = png(width, height)
        if "url" in str((seen.json or {})["model"]):  # as dall-e answers by default
            name = f"img-{len(self.files)}.png"
            self.files[name] = image
            return web.json_response(
                {"created": 1713833628, "data": [{"url": f"{self.url}/files/{name}"}]}
            )
        data = base64.b64encode(image).decode()
        return web.json_response(
            {"created": 1713833628, "data": [{"b64_json": data, "revised_prompt": "a cat"}]}
        )

    def _refused(self, text: str) -> bool:
        lowered = text.lower()
        return any(term in lowered for term in self.refuse_terms)

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        if data is None:
            raise web.HTTPNotFound()
        return web.Response(body=data, content_type="image/png")

    async def _edit(self, request: web.Request) -> web.Response:
        gated = await self._openai_gate(request)
        if isinstance(gated, web.Response):
            return gated
        seen, _mode = gated
        images = seen.form.get("image", []) + seen.form.get("image[]", [])
        _name, data = images[0]
        with Image.open(io.BytesIO(data)) as img:
            edited = ImageOps.invert(img.convert("RGB"))
            out = io.BytesIO()
            edited.save(out, "PNG")
        data = base64.b64encode(out.getvalue()).decode()
        return web.json_response({"created": 1713833628, "data": [{"b64_json": data}]})

    async def _speech(self, request: web.Request) -> web.Response:
        gated = await self._openai_gate(request)
        if isinstance(gated, web.Response):
            return gated
        seen, mode = gated
        body = seen.json or {}
        if mode == "malformed":
            return web.json_response({"object": "not audio"})
        seconds = 0.05 * len(body["input"]) / float(body.get("speed", 1.0))
        return web.Response(body=wav(seconds), content_type="application/octet-stream")

    async def _transcribe(self, request: web.Request) -> web.Response:
        gated = await self._openai_gate(request)
        if isinstance(gated, web.Response):
            return gated
        seen, mode = gated
        if mode == "malformed":
            return web.json_response({"segments": "none"})
        _name, audio = seen.form["file"][0]
        with wave.open(io.BytesIO(audio)) as w:
            duration = w.getnframes() / w.getframerate()
        names = ""
        prompt = seen.form.get("prompt", [""])[0]
        if prompt.startswith("Names: "):
            names = " " + prompt[len("Names: ") :].rstrip(".").split(", ")[0]
        translating = request.path.endswith("/translations")
        first = "Hello from the harbour." if translating else "Hola desde el puerto."
        second = f"Meet{names} at noon." if translating else f"Nos vemos{names} a mediodía."
        half = round(duration / 2, 2)
        segments = [
            {
                "id": 0,
                "seek": 0,
                "start": 0.0,
                "end": half,
                "text": " " + first,
                "tokens": [1],
                "temperature": 0.0,
                "avg_logprob": -0.2,
                "compression_ratio": 1.2,
                "no_speech_prob": 0.01,
            },
            {
                "id": 1,
                "seek": 0,
                "start": half,
                "end": round(duration, 2),
                "text": " " + second,
                "tokens": [2],
                "temperature": 0.0,
                "avg_logprob": -0.2,
                "compression_ratio": 1.2,
                "no_speech_prob": 0.01,
            },
        ]
        body: dict[str, Any] = {
            "task": "translate" if translating else "transcribe",
            "language": "english" if translating else "spanish",
            "duration": round(duration, 2),
            "text": f" {first} {second}",
            "segments": segments,
        }
        if "word" in seen.form.get("timestamp_granularities[]", []):
            body["words"] = [
                {"word": w, "start": round(i * half / 4, 3), "end": round((i + 1) * half / 4, 3)}
                for i, w in enumerate(first.rstrip(".").split())
            ]
        return web.json_response(body)

    # -- Anthropic Messages ------------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        seen = await self._record(request)
        # The key comes as x-api-key, or (the alternative the API documents, and what the
        # SDK 2.14 sends for an API key) as Authorization: Bearer.
        keys = {seen.headers.get("x-api-key"), seen.headers.get("authorization", "")[7:]}
        if ANTHROPIC_KEY not in keys:
            return _anthropic_error(401, "authentication_error", "invalid x-api-key")
        if not seen.headers.get("anthropic-version"):
            return _anthropic_error(400, "invalid_request_error", "anthropic-version missing")
        body = seen.json or {}
        if "max_tokens" not in body:
            return _anthropic_error(400, "invalid_request_error", "max_tokens: Field required")
        mode = self._mode(request.path)
        if mode == "slow":
            await asyncio.sleep(SLOW_S)
        elif mode == "429":
            return _anthropic_error(
                429, "rate_limit_error", "Number of requests exceeded", {"retry-after": RETRY_AFTER}
            )
        elif mode == "500":
            return _anthropic_error(500, "api_error", "Internal server error")
        elif mode == "529":
            return _anthropic_error(529, "overloaded_error", "Overloaded")
        elif mode == "malformed":
            return web.json_response({"id": "msg_1", "type": "message", "role": "assistant"})
        elif mode == "html":
            return web.Response(text="<html>oops</html>", content_type="text/html")
        system = body.get("system") or ""
        if isinstance(system, list):
            system = " ".join(block["text"] for block in system)
        last = body["messages"][-1]
        sizes: list[tuple[int, int]] = []
        if isinstance(last["content"], list):
            text = " ".join(b["text"] for b in last["content"] if b["type"] == "text")
            sizes = [
                _image_size(b["source"]["data"]) for b in last["content"] if b["type"] == "image"
            ]
        else:
            text = last["content"]
        stop: dict[str, Any] = {
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "stop_details": None,
        }
        content = [{"type": "text", "text": _chat_answer(system, text, sizes)}]
        if body.get("stream"):
            return await self._messages_stream(request, body, content[0]["text"], mode)
        if mode == "refusal":
            content = []
            stop = {
                "stop_reason": "refusal",
                "stop_sequence": None,
                "stop_details": {"type": "refusal", "category": None, "explanation": None},
            }
        return web.json_response(
            {
                "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                **stop,
                "usage": {
                    "input_tokens": 11,
                    "output_tokens": 6,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            }
        )

    async def _messages_stream(
        self, request: web.Request, body: dict[str, Any], answer: str, mode: str | None
    ) -> web.StreamResponse:
        """The Messages API streamed: named events (message_start, content_block_start,
        ping, a content_block_delta per word, content_block_stop, message_delta with the
        stop reason and cumulative usage, message_stop). Stream modes as for OpenAI
        (:meth:`_stream_words`); "error_stream" sends ``event: error`` (overloaded_error);
        "refusal" ends with ``stop_reason: refusal`` after two words."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(name: str, data: dict[str, Any]) -> None:
            line = f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"
            await resp.write(line.encode())

        async def word(text: str) -> None:
            delta = {"type": "text_delta", "text": text}
            await event("content_block_delta", {"index": 0, "delta": delta})

        async def error() -> None:
            failure = {"type": "overloaded_error", "message": f"Overloaded ({UPSTREAM_DETAIL})"}
            await event("error", {"error": failure})

        async def whole() -> None:
            message = {
                "id": "msg_01Stream",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": body["model"],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 11, "output_tokens": 1},
            }
            await event("message_start", {"message": message})
            block = {"type": "text", "text": ""}
            await event("content_block_start", {"index": 0, "content_block": block})
            await event("ping", {})
            words = answer
            if mode == "refusal":
                words = " ".join(answer.split()[:2])
            if mode == "refusal_first":  # refused before writing anything, with a reason
                words = ""
            if not await self._stream_words(words, mode, word, error):
                return
            await event("content_block_stop", {"index": 0})
            stop: dict[str, Any] = {"stop_reason": "end_turn", "stop_sequence": None}
            if mode in ("refusal", "refusal_first"):
                explanation = self.refusal_text if mode == "refusal_first" else None
                stop = {"stop_reason": "refusal", "stop_sequence": None,
                        "stop_details": {"type": "refusal", "category": None,
                                         "explanation": explanation}}  # fmt: skip
            await event("message_delta", {"delta": stop, "usage": {"output_tokens": 6}})
            await event("message_stop", {})

        return await self._streamed(resp, whole(), mode)
