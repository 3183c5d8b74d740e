"""Loopback fakes of Replicate's predictions API and fal's queue API, written from their
API references (/work/shared/docs/providers.md sections 3 and 4), each in its own thread
and event loop as a remote platform would be.

What a prediction does is scripted per test (``Script``): how many polls it stays
``starting`` / ``processing``, how it ends (succeeded, failed with an error text,
canceled by the platform, never), whether its end comes by webhook only (the status a
poll sees stays ``processing``), forged webhooks sent before the real one, and 429 / 5xx
answers to polls or to the create. Outputs are files the fake serves itself; tests read
satsgate's copies and check no URL of the fake reaches the caller.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import secrets
import struct
import threading
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from PIL import Image

from satsgate.engines.providers.replicate import sign
from tests.conftest import at_origin, free_port

WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"satsgate-test-webhook-key-32byte").decode()
API_KEY = "r8_test_key"
FAL_KEY = "fal_id:fal_secret"


# -- outputs ---------------------------------------------------------------------------------


def mp4(seconds: float) -> bytes:
    """An MP4 whose movie header says ``seconds`` (ftyp + moov/mvhd, version 0)."""
    ftyp = struct.pack(">I4s4sI4s4s", 24, b"ftyp", b"isom", 512, b"isom", b"mp41")
    mvhd_body = struct.pack(">B3xIIII", 0, 0, 0, 1000, int(seconds * 1000)) + bytes(80)
    mvhd = struct.pack(">I4s", 8 + len(mvhd_body), b"mvhd") + mvhd_body
    moov = struct.pack(">I4s", 8 + len(mvhd), b"moov") + mvhd
    return ftyp + moov


def wav(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(b"\x80" * int(seconds * rate))
    return out.getvalue()


def glb() -> bytes:
    """A minimal GLB 2.0: header and a JSON chunk describing an empty scene."""
    doc = json.dumps({"asset": {"version": "2.0"}, "scenes": [{"nodes": []}], "scene": 0})
    chunk = doc.encode() + b" " * (-len(doc) % 4)
    body = struct.pack("<I4s", len(chunk), b"JSON") + chunk
    return struct.pack("<4sII", b"glTF", 2, 12 + len(body)) + body


def png(mode: str = "RGB", size: tuple[int, int] = (48, 32)) -> bytes:
    img = Image.new(mode, size)
    px = img.load()
    assert px is not None
    for x in range(size[0]):
        for y in range(size[1]):
            if mode == "L":
                px[x, y] = x * 255 // (size[0] - 1)  # depth: a left-to-right ramp
            elif mode == "RGBA":
                px[x, y] = (200, 40, 40, 255 if x < size[0] // 2 else 0)  # cut-out
            else:
                px[x, y] = (x * 5 % 256, 90, y * 7 % 256)
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


@dataclass
class Script:
    """What the next predictions do."""

    outcome: str = "succeeded"  # succeeded | failed | canceled | never
    error: str = "the model crashed"
    outputs: Callable[[], list[bytes]] = lambda: [png()]
    starting_polls: int = 1  # polls answered "starting" (IN_QUEUE)
    processing_polls: int = 2  # then "processing" (IN_PROGRESS)
    by_webhook: bool = False  # the end comes by webhook only; polls stay "processing"
    webhook_after_s: float = 0.3
    forged_webhook: bool = False  # a webhook with a wrong signature comes first
    # The end comes by a webhook sent before the create call is answered, as a fast
    # model's can; polls keep saying "processing".
    early_webhook: bool = False
    polls_lag: bool = True  # with early_webhook: polls still say "processing"
    answer_after_webhook_s: float = 0.0  # with early_webhook: the create answers this late
    poll_errors: list[int] = field(default_factory=list)  # statuses of the first polls
    create_error: int | None = None  # the create answers this status
    sync: bool = False  # done within the create (Prefer: wait)
    json_output: Any = None  # the output is this JSON (a detection model's), not files


@dataclass
class Record:
    id: str
    model: str
    input: dict[str, Any]
    script: Script
    webhook: str | None
    polls: int = 0
    status: str = "starting"
    ended_by_webhook: bool = False
    canceled_by_client: bool = False
    outputs: list[str] = field(default_factory=list)
    fetched: dict[str, bytes] = field(default_factory=dict)  # input URLs, read at create


class FakePlatform:
    """Shared: thread, loop, file serving, records."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.script = Script()
        self.records: dict[str, Record] = {}
        self.files: dict[str, bytes] = {}
        self.webhook_answers: list[int] = []
        # Where a load balancer sends the webhooks (scheme and host put in place of the
        # requested URL's); None: the URL as requested.
        self.webhook_origin: str | None = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._sender: httpx.AsyncClient | None = None  # webhooks, made in the fake's loop
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/files/{name}", self._file)
        self.routes(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        async def down() -> None:
            for task in list(self._tasks):
                task.cancel()
            if self._sender is not None:
                await self._sender.aclose()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    def _publish_outputs(self, rec: Record) -> None:
        if not rec.outputs:
            for data in rec.script.outputs():
                name = secrets.token_hex(8)
                self.files[name] = data
                rec.outputs.append(f"{self.url}/files/{name}")

    async def fetch_inputs(self, rec: Record) -> None:
        """Read every input given as a URL, as a model would."""
        async with httpx.AsyncClient(timeout=10) as client:
            for key, value in rec.input.items():
                if isinstance(value, str) and value.startswith("http"):
                    resp = await client.get(value)
                    rec.fetched[key] = resp.content if resp.status_code == 200 else b""

    def last(self) -> Record:
        return list(self.records.values())[-1]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post_webhook(self, url: str, body: bytes, headers: dict[str, str]) -> None:
        if self._sender is None:
            self._sender = httpx.AsyncClient(timeout=10)
        try:
            resp = await self._sender.post(
                at_origin(url, self.webhook_origin), content=body, headers=headers
            )
            self.webhook_answers.append(resp.status_code)
        except httpx.HTTPError:
            self.webhook_answers.append(0)

    def advance(self, rec: Record) -> None:
        """One poll: the scripted status for the poll count."""
        rec.polls += 1
        if rec.status in ("succeeded", "failed", "canceled"):
            return
        s = rec.script
        if rec.polls <= s.starting_polls:
            rec.status = "starting"
        elif (
            rec.polls <= s.starting_polls + s.processing_polls
            or s.by_webhook
            or (s.outcome == "never")
        ):
            rec.status = "processing"
        else:
            self.end(rec)

    def end(self, rec: Record) -> None:
        rec.status = rec.script.outcome
        if rec.status == "succeeded":
            self._publish_outputs(rec)


# -- Replicate -------------------------------------------------------------------------------


class FakeReplicate(FakePlatform):
    def __init__(self) -> None:
        self.key = base64.b64decode(WEBHOOK_SECRET.removeprefix("whsec_"))
        self.prefer: list[str] = []
        self.secret_reads = 0  # GET /v1/webhooks/default/secret answered
        super().__init__()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/models/{owner}/{name}/predictions", self._create)
        app.router.add_post("/v1/predictions", self._create)
        app.router.add_get("/v1/predictions/{id}", self._get)
        app.router.add_post("/v1/predictions/{id}/cancel", self._cancel)
        app.router.add_get("/v1/webhooks/default/secret", self._secret)

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {API_KEY}"

    @staticmethod
    def _problem(status: int, detail: str, **headers: str) -> web.Response:
        return web.json_response(
            {"type": "about:blank", "title": "error", "status": status, "detail": detail},
            status=status,
            headers=headers,
            content_type="application/problem+json",
        )

    def doc(self, rec: Record) -> dict[str, Any]:
        done = rec.status in ("succeeded", "failed", "canceled")
        output: Any = None
        if rec.status == "succeeded":
            output = rec.outputs[0] if len(rec.outputs) == 1 else list(rec.outputs)
            if rec.script.json_output is not None:
                output = rec.script.json_output
        return {
            "id": rec.id, "model": rec.model, "version": "0" * 64, "input": rec.input,
            "logs": f"step {rec.polls}\n 50%|#####     | 5/10\n" if rec.polls > 1 else "",
            "output": output,
            "error": rec.script.error if rec.status == "failed" else None,
            "status": rec.status, "source": "api",
            "created_at": "2026-11-25T12:00:00.000000Z",
            "started_at": None if rec.status == "starting" else "2026-11-25T12:00:01.0Z",
            "completed_at": "2026-11-25T12:00:09.0Z" if done else None,
            "metrics": {"predict_time": 3.8} if done else {},
            "urls": {"get": f"{self.url}/v1/predictions/{rec.id}",
                     "cancel": f"{self.url}/v1/predictions/{rec.id}/cancel",
                     "web": f"https://replicate.com/p/{rec.id}"},
        }  # fmt: skip

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._problem(401, "Invalid token.")
        script = self.script
        if script.create_error is not None:
            return self._problem(
                script.create_error, "Request was throttled.", **{"Retry-After": "1"}
            )
        body = await request.json()
        self.prefer.append(request.headers.get("Prefer", ""))
        model = (
            f"{request.match_info['owner']}/{request.match_info['name']}"
            if "owner" in request.match_info
            else body["version"]
        )
        rec = Record(secrets.token_hex(13), model, body["input"], script, body.get("webhook"))
        self.records[rec.id] = rec
        await self.fetch_inputs(rec)
        if script.sync:
            self.end(rec)
        elif script.early_webhook and rec.webhook:
            answer = self.doc(rec)  # the create's answer: still starting
            self.end(rec)
            rec.ended_by_webhook = True
            await self.send_webhook(rec.webhook, self.doc(rec))
            await asyncio.sleep(script.answer_after_webhook_s)
            return web.json_response(answer, status=201)
        elif (
            rec.webhook
            and script.by_webhook
            and "completed" in body.get("webhook_events_filter", ["completed"])
        ):
            self._spawn(self._webhook_later(rec))
        return web.json_response(self.doc(rec), status=201)

    async def _webhook_later(self, rec: Record) -> None:
        await asyncio.sleep(rec.script.webhook_after_s)
        assert rec.webhook is not None
        if rec.script.forged_webhook:
            fake = dict(self.doc(rec), status="succeeded", output=f"{self.url}/files/forged")
            await self.send_webhook(rec.webhook, fake, key=b"not the account's secret key!!")
        if rec.status not in ("succeeded", "failed", "canceled"):
            self.end(rec)
        rec.ended_by_webhook = True
        await self.send_webhook(rec.webhook, self.doc(rec))

    async def send_webhook(self, url: str, doc: dict[str, Any], key: bytes | None = None) -> None:
        body, headers = self.signed(doc, key)
        await self._post_webhook(url, body, headers)

    def signed(self, doc: dict[str, Any], key: bytes | None = None) -> tuple[bytes, dict[str, str]]:
        """A webhook's body and headers, signed with ``key`` (default: the account's)."""
        body = json.dumps(doc).encode()
        msg_id, stamp = f"msg_{secrets.token_hex(8)}", str(int(time.time()))
        headers = {
            "content-type": "application/json", "webhook-id": msg_id,
            "webhook-timestamp": stamp,
            "webhook-signature": sign(key or self.key, msg_id, stamp, body),
        }  # fmt: skip
        return body, headers

    async def _get(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._problem(401, "Invalid token.")
        rec = self.records.get(request.match_info["id"])
        if rec is None:
            return self._problem(404, "Not found.")
        if rec.script.poll_errors:
            status = rec.script.poll_errors.pop(0)
            return self._problem(status, "Overloaded.", **{"Retry-After": "0"})
        self.advance(rec)
        doc = self.doc(rec)
        if rec.script.early_webhook and rec.script.polls_lag:  # only the webhook can end it
            doc.update(status="processing", output=None, completed_at=None)
        return web.json_response(doc)

    async def _cancel(self, request: web.Request) -> web.Response:
        rec = self.records.get(request.match_info["id"])
        if rec is None:
            return self._problem(404, "Not found.")
        rec.canceled_by_client = True
        if rec.status not in ("succeeded", "failed"):
            rec.status = "canceled"
        return web.json_response(self.doc(rec))

    async def _secret(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._problem(401, "Invalid token.")
        self.secret_reads += 1
        return web.json_response({"key": WEBHOOK_SECRET})


# -- fal ---------------------------------------------------------------------------------


class FakeFal(FakePlatform):
    def __init__(self) -> None:
        self.signing_key = Ed25519PrivateKey.generate()
        self.other_key = Ed25519PrivateKey.generate()
        super().__init__()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/.well-known/jwks.json", self._jwks)
        app.router.add_get("/{owner}/{app}/requests/{id}/status", self._status)
        app.router.add_put("/{owner}/{app}/requests/{id}/cancel", self._cancel)
        app.router.add_get("/{owner}/{app}/requests/{id}", self._result)
        app.router.add_post("/{model:.+}", self._submit)

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/.well-known/jwks.json"

    async def _jwks(self, request: web.Request) -> web.Response:
        raw = self.signing_key.public_key().public_bytes_raw()
        x = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        return web.json_response(
            {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "k1", "use": "sig"}]}
        )

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Key {FAL_KEY}"

    def payload(self, rec: Record) -> dict[str, Any]:
        files = [
            {
                "url": u,
                "content_type": "application/octet-stream",
                "file_name": "out",
                "file_size": len(self.files[u.rsplit("/", 1)[1]]),
            }
            for u in rec.outputs
        ]
        if len(files) == 1:
            return {"audio_file": files[0], "seed": 7}
        return {"images": files, "seed": 7}

    async def _submit(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"detail": "Unauthorized"}, status=401)
        script = self.script
        if script.create_error is not None:
            return web.json_response(
                {"detail": "Too many requests"},
                status=script.create_error,
                headers={"Retry-After": "1"},
            )
        model = request.match_info["model"]
        rec = Record(
            secrets.token_hex(16),
            model,
            await request.json(),
            script,
            request.query.get("fal_webhook"),
        )
        self.records[rec.id] = rec
        app = "/".join(model.split("/")[:2])
        base = f"{self.url}/{app}/requests/{rec.id}"
        if rec.webhook and script.by_webhook:
            self._spawn(self._webhook_later(rec))
        return web.json_response({
            "request_id": rec.id, "gateway_request_id": rec.id, "response_url": base,
            "status_url": f"{base}/status", "cancel_url": f"{base}/cancel", "queue_position": 0,
        })  # fmt: skip

    async def _status(self, request: web.Request) -> web.Response:
        rec = self.records.get(request.match_info["id"])
        if not self._authorized(request) or rec is None:
            return web.json_response({"detail": "Not found"}, status=404)
        if rec.script.poll_errors:
            status = rec.script.poll_errors.pop(0)
            return web.json_response(
                {"detail": "busy"}, status=status, headers={"Retry-After": "0"}
            )
        self.advance(rec)
        base = f"{self.url}/{request.match_info['owner']}/{request.match_info['app']}"
        response_url = f"{base}/requests/{rec.id}"
        if rec.status == "starting":
            return web.json_response(
                {"status": "IN_QUEUE", "queue_position": 0, "response_url": response_url}
            )
        if rec.status == "processing":
            return web.json_response(
                {"status": "IN_PROGRESS", "logs": None, "response_url": response_url}
            )
        error = rec.script.error if rec.status != "succeeded" else None
        return web.json_response({
            "status": "COMPLETED", "logs": None, "metrics": {"inference_time": 2.3},
            "response_url": response_url, "error": error,
            "error_type": "runner_error" if error else None,
        })  # fmt: skip

    async def _result(self, request: web.Request) -> web.Response:
        rec = self.records.get(request.match_info["id"])
        if not self._authorized(request) or rec is None:
            return web.json_response({"detail": "Not found"}, status=404)
        if rec.status == "succeeded":
            return web.json_response(self.payload(rec))
        if rec.status in ("failed", "canceled"):
            return web.json_response({"detail": rec.script.error}, status=422)
        return web.json_response({"detail": "Request is still in progress"}, status=400)

    async def _cancel(self, request: web.Request) -> web.Response:
        rec = self.records.get(request.match_info["id"])
        if rec is None:
            return web.json_response({"status": "NOT_FOUND"}, status=404)
        rec.canceled_by_client = True
        if rec.status in ("succeeded", "failed"):
            return web.json_response({"status": "ALREADY_COMPLETED"}, status=400)
        rec.status = "canceled"
        return web.json_response({"status": "CANCELLATION_REQUESTED"}, status=202)

    async def _webhook_later(self, rec: Record) -> None:
        await asyncio.sleep(rec.script.webhook_after_s)
        assert rec.webhook is not None
        if rec.script.forged_webhook:
            await self.send_webhook(
                rec,
                {
                    "request_id": rec.id,
                    "gateway_request_id": rec.id,
                    "status": "OK",
                    "payload": {"audio_file": {"url": f"{self.url}/files/forged"}},
                },
                key=self.other_key,
            )
        if rec.status not in ("succeeded", "failed", "canceled"):
            self.end(rec)
        rec.ended_by_webhook = True
        if rec.status == "succeeded":
            doc: dict[str, Any] = {
                "request_id": rec.id,
                "gateway_request_id": rec.id,
                "status": "OK",
                "payload": self.payload(rec),
            }
        else:
            doc = {
                "request_id": rec.id,
                "gateway_request_id": rec.id,
                "status": "ERROR",
                "error": rec.script.error,
                "payload": {"detail": rec.script.error},
            }
        await self.send_webhook(rec, doc)

    async def send_webhook(
        self, rec: Record, doc: dict[str, Any], key: Ed25519PrivateKey | None = None
    ) -> None:
        assert rec.webhook is not None
        body = json.dumps(doc).encode()
        stamp, user = str(int(time.time())), "user_42"
        message = f"{rec.id}\n{user}\n{stamp}\n{hashlib.sha256(body).hexdigest()}"
        signature = (key or self.signing_key).sign(message.encode()).hex()
        headers = {
            "content-type": "application/json", "x-fal-webhook-request-id": rec.id,
            "x-fal-webhook-user-id": user, "x-fal-webhook-timestamp": stamp,
            "x-fal-webhook-signature": signature,
        }  # fmt: skip
        await self._post_webhook(rec.webhook, body, headers)


# -- ElevenLabs ----------------------------------------------------------------------------

ELEVEN_KEY = "xi_test_key"
ELEVEN_VOICES = {"21m00Tcm4TlvDq8ikWAM": "Rachel", "EXAVITQu4vr4xnSDxMaL": "Bella"}


class FakeElevenLabs(FakePlatform):
    """Text to speech and instant voice cloning (ElevenLabs' API reference)."""

    def __init__(self) -> None:
        self.voices = dict(ELEVEN_VOICES)
        self.calls: list[dict[str, Any]] = []
        self.busy = 0  # answer this many calls 429 too_many_concurrent_requests
        super().__init__()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/text-to-speech/{voice_id}", self._tts)
        app.router.add_post("/v1/voices/add", self._add)

    @staticmethod
    def _error(status: int, code: str) -> web.Response:
        return web.json_response({"detail": {"status": code, "message": code}}, status=status)

    async def _tts(self, request: web.Request) -> web.Response:
        if request.headers.get("xi-api-key") != ELEVEN_KEY:
            return self._error(401, "invalid_api_key")
        if self.busy:
            self.busy -= 1
            return self._error(429, "too_many_concurrent_requests")
        voice = request.match_info["voice_id"]
        body = await request.json()
        self.calls.append({"voice": voice, "query": dict(request.query), **body})
        if voice not in self.voices:
            return self._error(400, "voice_not_found")
        if not body.get("text"):
            return web.json_response(
                {
                    "detail": [
                        {
                            "loc": ["body", "text"],
                            "msg": "field required",
                            "type": "value_error.missing",
                        }
                    ]
                },
                status=422,
            )
        seconds = 0.06 * len(body["text"])
        fmt = request.query.get("output_format", "mp3_44100_128")
        if fmt.startswith("wav_"):
            return web.Response(body=wav(seconds, int(fmt.split("_")[1])), content_type="audio/wav")
        frame = b"\xff\xfb\x90\x64" + bytes(413)  # MPEG-1 layer III, 128 kb/s, 44.1 kHz
        return web.Response(body=frame * max(1, int(seconds * 38.28)), content_type="audio/mpeg")

    async def _add(self, request: web.Request) -> web.Response:
        if request.headers.get("xi-api-key") != ELEVEN_KEY:
            return self._error(401, "invalid_api_key")
        form = await request.post()
        sample = form.get("files")
        if not isinstance(sample, web.FileField) or not form.get("name"):
            return web.json_response(
                {"detail": [{"loc": ["body", "files"], "msg": "field required"}]}, status=422
            )
        voice_id = secrets.token_hex(10)[:20]
        self.voices[voice_id] = str(form["name"])
        self.calls.append(
            {
                "add": str(form["name"]),
                "bytes": len(sample.file.read()),
                "noise": form.get("remove_background_noise"),
            }
        )
        return web.json_response({"voice_id": voice_id, "requires_verification": False})
