"""What the asynchronous prediction platforms (Replicate, fal) share: one prediction run
from creation to a downloaded output, by webhook or polling (whichever comes first), and
the engines (video, music, 3D, image operations, upscaling) built on it.

A platform adapter (``PredictionPlatform``) says how to create, fetch and cancel a
prediction and how to read a webhook; ``PredictionProvider`` does the rest:

- the run waits on the prediction's webhook event or the next poll, whichever comes
  first; a terminal state is handled once, whichever brought it;
- transient answers while polling (429, 5xx, a dropped connection) are retried until the
  run's deadline; past it the prediction is cancelled upstream and the call fails with
  TIMEOUT (the gate refunds it); a call cancelled here cancels the prediction upstream;
- a failed prediction whose error reads as a content refusal is CONTENT_FILTERED, any
  other failure or an upstream cancellation SERVICE_ERROR; none falls back to another
  provider once a prediction exists (it may have run);
- outputs are downloaded here (size-capped) and returned as bytes: services store them
  in satsgate's own file store, a platform URL never reaches a caller.

Options of the ``[providers.NAME]`` table (besides base_url, api_key, models):
``poll_interval_s`` (default 2; ``webhook_poll_interval_s``, default 15, while a
webhook is expected), ``max_wait_s`` (default 900), ``max_output_bytes``
(default 200 MiB), ``webhooks`` (default true: ask for webhooks at
``<base_url>/api/webhooks/<kind>/<NAME>``), ``input_files`` (see ``file_input``), and per
model ``input_names`` /
``input_values`` tables (see ``shape_input``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.generation import (
    ImageOpRequest,
    ImageOpResult,
    MediaFile,
    Model3dRequest,
    MusicRequest,
    PredictionCheckpoint,
    ProgressFn,
    SavedPrediction,
    VideoRequest,
)
from satsgate.engines.image_generation import (
    GeneratedImage,
    ImageEditRequest,
    ImageGenerationRequest,
)
from satsgate.engines.image_process import Box, Detection, DetectionResult, ImageOutput
from satsgate.engines.providers.upstream import cause_of
from satsgate.engines.refusals import said_by_model
from satsgate.engines.registry import EngineDeps
from satsgate.errors import ErrorCode
from satsgate.files import FileStore

log = logging.getLogger(__name__)

DATA_URI_MAX_BYTES = 256 * 1024
EARLY_WEBHOOKS_KEPT = 1000
INPUT_URL_TTL_S = 3600

Status = Literal["queued", "running", "succeeded", "failed", "canceled"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "canceled"})

# The engine names a prediction platform serves (the services' engine names).
ENGINE_NAMES = frozenset(
    {
        "video",
        "music",
        "3d",
        "remove_background",
        "restore_face",
        "colorize_image",
        "estimate_depth",
        "upscale_image",
        "deblur_image",
        "remove_object",
        "image",  # generate-image, a second source beside the chat providers' image models
        "image_edit",
        "detect_objects",  # open set: what the prompt names, not only the local faces
    }
)

# Words of an upstream error that mean the model or its safety filter refused the content.
_REFUSAL = re.compile(
    r"nsfw|safety|content[ _-]?polic|moderat|flagged|inappropriate|sensitive content"
    r"|violat|prohibited|not allowed content",
    re.IGNORECASE,
)

_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG", 0, "png"),
    (b"\xff\xd8\xff", 0, "jpeg"),
    (b"WEBP", 8, "webp"),
    (b"glTF", 0, "glb"),
    (b"WAVE", 8, "wav"),
    (b"OggS", 0, "ogg"),
    (b"ID3", 0, "mp3"),
    (b"fLaC", 0, "flac"),
    (b"GIF8", 0, "gif"),
)
_CONTENT_TYPE_EXT = {
    "image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp", "video/mp4": "mp4",
    "audio/mpeg": "mp3", "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav",
    "model/gltf-binary": "glb", "audio/ogg": "ogg", "audio/flac": "flac",
}  # fmt: skip


def sniff_ext(data: bytes, content_type: str = "", url: str = "") -> str:
    """The file extension of an output, by its bytes first, then its type or URL."""
    for magic, offset, ext in _MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return ext
    if data[4:8] == b"ftyp":
        return "m4a" if data[8:11] == b"M4A" else "mp4"
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:
        return "mp3"
    ext = _CONTENT_TYPE_EXT.get(content_type.split(";")[0].strip().lower(), "")
    if ext:
        return ext
    suffix = urlsplit(url).path.rsplit(".", 1)[-1].lower() if "." in url else ""
    return suffix if suffix.isalnum() and len(suffix) <= 5 else "bin"


def data_uri(data: bytes) -> str:
    ext = sniff_ext(data)
    kind = {
        "png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
        "wav": "audio/wav", "mp3": "audio/mpeg", "ogg": "audio/ogg", "flac": "audio/flac",
        "m4a": "audio/mp4", "mp4": "video/mp4",
    }.get(ext, "application/octet-stream")  # fmt: skip
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def output_urls(output: Any) -> list[str]:
    """Every file URL in a model's output, in order (a string, a list, or nested objects
    whose values are URLs: {"video": {"url": ...}}, {"model_file": ...})."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if value.startswith(("https://", "http://", "data:")):
                found.append(value)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)

    walk(output)
    return found


def is_refusal(text: str) -> bool:
    return bool(_REFUSAL.search(text))


def retry_after_s(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


@dataclass
class Prediction:
    """A platform's prediction, in the common vocabulary."""

    id: str
    status: Status
    output: Any = None  # the model's output JSON when succeeded (None: fetch it)
    error: str = ""
    progress: float | None = None  # 0..100 when the platform says
    # Platform-specific handles (fal's status/result/cancel URLs).
    handle: dict[str, str] = field(default_factory=dict)
    # The platform's own words for a failure when ``error`` holds more (fal's error
    # documents): what a refusal shows as model_said. None: ``error`` is its words.
    said: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


class _Watch:
    """A prediction a run is waiting on: the latest state a webhook brought."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.state: Prediction | None = None


# Canonical input fields per operation: what the services know. Each platform maps them
# onto a model's own input names (its defaults for the documented models, then the
# operator's ``input_names``), drops those mapped to "" and the unset ones, and adds
# the operator's ``input_values``.


class PredictionProvider:
    """Base of the prediction platform adapters (``replicate``, ``fal``)."""

    KIND = ""
    LABEL = ""  # what a result's ``method`` says ran: "hosted model"
    # model name -> canonical field -> the model's input name ("" drops it)
    DEFAULT_INPUT_NAMES: Mapping[str, Mapping[str, str]] = {}
    # model name -> fixed inputs it needs (before the operator's ``input_values``)
    DEFAULT_INPUT_VALUES: Mapping[str, Mapping[str, Any]] = {}
    # canonical field -> input name, for models the tables above do not list
    GENERIC_INPUT_NAMES: Mapping[str, str] = {}

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.config = config
        self.settings = deps.settings
        opts = config.options
        where = f"[providers.{config.name}]"

        def positive(key: str, default: float) -> float:
            value = opts.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise EngineConfigError(f"{where} {key} must be a positive number")
            return float(value)

        def tables(key: str) -> dict[str, dict[str, Any]]:
            value = opts.get(key, {})
            if not isinstance(value, Mapping) or not all(
                isinstance(v, Mapping) for v in value.values()
            ):
                raise EngineConfigError(
                    f'{where} {key} is a table of tables: {key}."<model>" = {{ ... }}'
                )
            return {str(k): dict(v) for k, v in value.items()}

        self.poll_interval_s = positive("poll_interval_s", 2.0)
        # Polls of a prediction whose webhook is on its way: a safety net only.
        self.webhook_poll_interval_s = positive("webhook_poll_interval_s", 15.0)
        self.max_wait_s = positive("max_wait_s", 900.0)
        self.max_output_bytes = int(positive("max_output_bytes", 200 * 1024 * 1024))
        webhooks = opts.get("webhooks", True)
        if not isinstance(webhooks, bool):
            raise EngineConfigError(f"{where} webhooks must be true or false")
        self.webhooks = webhooks
        self._input_names: Mapping[str, Mapping[str, str]] = tables("input_names")
        if not all(isinstance(n, str) for t in self._input_names.values() for n in t.values()):
            raise EngineConfigError(f"{where} input_names map field names to input names")
        self._input_values: Mapping[str, Mapping[str, Any]] = tables("input_values")
        self._watches: dict[str, _Watch] = {}
        self._early: dict[str, Prediction] = {}  # webhooks that came before their run waited
        self.input_files = str(opts.get("input_files", "auto"))
        if self.input_files not in ("auto", "url", "data_uri"):
            raise EngineConfigError(
                f"[providers.{config.name}] input_files is auto, url or data_uri"
            )
        # The app's file store (same directory, base URL and secret): its signed URLs
        # are served by GET /api/files.
        self._inputs = FileStore(
            self.settings.files_dir,
            self.settings.public_base_url,
            self.settings.server_secret,
            INPUT_URL_TTL_S,
        )
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s, connect=10.0), follow_redirects=True
        )

    # -- the Provider protocol ----------------------------------------------------------

    def engine(self, name: str) -> object | None:
        return self if name in ENGINE_NAMES else None

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- what a platform adapter implements ---------------------------------------------

    async def create(self, model: str, inputs: dict[str, Any], call_id: str) -> Prediction:
        raise NotImplementedError

    async def fetch(self, prediction: Prediction) -> Prediction:
        raise NotImplementedError

    async def cancel(self, prediction: Prediction) -> None:
        raise NotImplementedError

    async def result(self, prediction: Prediction) -> Any:
        """The output of a succeeded prediction whose state did not carry it."""
        return prediction.output

    def verify_webhook(self, headers: Mapping[str, str], body: bytes) -> Prediction | None:
        """The prediction a genuine webhook reports; None when its signature is wrong."""
        raise NotImplementedError

    async def file_input(self, data: bytes | None) -> str | None:
        """How a caller's file reaches the model: a data URI, or (``input_files = "url"``,
        or "auto" for a file past 256 KiB on a node with an HTTPS base URL) an expiring
        signed URL of satsgate's file store, valid for an hour."""
        if data is None:
            return None
        by_url = self.input_files == "url" or (
            self.input_files == "auto"
            and len(data) > DATA_URI_MAX_BYTES
            and self.settings.public_base_url.startswith("https://")
        )
        if not by_url:
            return data_uri(data)
        stored = await self._inputs.save(data, sniff_ext(data), ttl_s=INPUT_URL_TTL_S)
        return stored.url

    async def _webhook_target(self) -> str | None:
        """The webhook URL to ask for, once the means to verify its calls are at hand;
        None: poll only."""
        return None

    def webhook_url(self) -> str | None:
        if not self.webhooks:
            return None
        return f"{self.settings.public_base_url}/api/webhooks/{self.KIND}/{self.config.name}"

    # -- webhooks -------------------------------------------------------------------------

    webhook_kind: str = ""

    async def receive_webhook(self, headers: Mapping[str, str], body: bytes) -> int:
        """POST /api/webhooks/<kind>/<name>: 401 for a bad signature, else 200 (also for a
        prediction no run waits on: the platform must not retry it)."""
        prediction = self.verify_webhook(headers, body)
        if prediction is None:
            return 401
        watch = self._watches.get(prediction.id)
        if watch is None:
            # It may have come before the create call's answer: kept a while for the run
            # that is about to wait on it (genuine webhooks only, a bounded number).
            self._early[prediction.id] = prediction
            while len(self._early) > EARLY_WEBHOOKS_KEPT:
                self._early.pop(next(iter(self._early)))
            return 200
        previous = watch.state
        if previous is None or not previous.terminal:
            watch.state = prediction
            watch.event.set()
        return 200

    # -- one run ------------------------------------------------------------------------

    def shape_input(self, model: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The model's input from the canonical fields: renamed by the operator's
        ``[providers.NAME.input_names."<model>"]`` (else the built-in names of the
        documented models, else the generic ones), a field renamed to "" dropped, unset
        (None) fields dropped, then ``input_values."<model>"`` added as they are."""
        names = {
            **self.GENERIC_INPUT_NAMES,
            **self.DEFAULT_INPUT_NAMES.get(model, {}),
            **self._input_names.get(model, {}),
        }
        shaped: dict[str, Any] = {}
        for key, value in fields.items():
            name = names.get(key, key)
            if value is None or not name:
                continue
            shaped[name] = value
        shaped.update(self.DEFAULT_INPUT_VALUES.get(model, {}))
        shaped.update(self._input_values.get(model, {}))
        return shaped

    async def run_output(
        self,
        model: str,
        inputs: dict[str, Any],
        call_id: str,
        progress: ProgressFn,
        checkpoint: PredictionCheckpoint | None = None,
    ) -> Any:
        """Create a prediction (or, with a checkpoint that holds one of this provider's,
        take it up again), wait for its end; its output JSON."""
        saved = await checkpoint.load() if checkpoint is not None else None
        if saved is not None and saved.provider != self.config.name:
            # Another provider of the chain made it: that one takes it up. A job is never
            # run a second time elsewhere (no binding took it up: refunded).
            raise EngineError(
                ErrorCode.L402_UPSTREAM_FAILED,
                "The job was lost in a restart; the payment was refunded.",
                may_fall_back=True,
            )
        if saved is not None:
            log.info("%s: resuming prediction %s", self.KIND, saved.prediction_id)
            prediction = Prediction(saved.prediction_id, "running", handle=dict(saved.handle))
            if prediction.handle.get("webhook"):
                await self._webhook_target()  # its verification key, read once per process
        else:
            prediction = await self.create(model, inputs, call_id)
            if checkpoint is not None:
                await checkpoint.save(
                    SavedPrediction(self.config.name, prediction.id, dict(prediction.handle))
                )
        watch = self._watches.setdefault(prediction.id, _Watch())
        early = self._early.pop(prediction.id, None)
        if early is not None:
            watch.state = early
            watch.event.set()
        deadline = time.monotonic() + self.max_wait_s
        try:
            prediction = await self._await_end(prediction, watch, deadline, progress)
        except asyncio.CancelledError:
            # A job with a checkpoint is cancelled only by shutdown, which keeps it for
            # the next start: its prediction must go on. Anything else is abandoned.
            if checkpoint is None:
                await asyncio.shield(self._cancel_quietly(prediction))
            raise
        finally:
            self._watches.pop(prediction.id, None)
        if prediction.status == "failed":
            if is_refusal(prediction.error):
                raise refusal_error(
                    prediction.error if prediction.said is None else prediction.said
                )
            log.warning(
                "%s prediction %s failed: %s", self.KIND, prediction.id, prediction.error[:300]
            )
            raise EngineError(
                ErrorCode.SERVICE_ERROR,
                "The model failed to produce an output.",
                may_fall_back=False,
            )
        if prediction.status == "canceled":
            raise EngineError(
                ErrorCode.SERVICE_ERROR,
                "The generation was cancelled upstream.",
                may_fall_back=False,
            )
        output = prediction.output
        if output is None:
            output = await self.result(prediction)
        return output

    async def run(
        self,
        model: str,
        inputs: dict[str, Any],
        call_id: str,
        progress: ProgressFn,
        checkpoint: PredictionCheckpoint | None = None,
    ) -> list[MediaFile]:
        """:meth:`run_output`, then its output files downloaded (at most four)."""
        output = await self.run_output(model, inputs, call_id, progress, checkpoint)
        progress(90.0, "downloading the output")
        urls = output_urls(output)
        if not urls:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The model returned no output file.", may_fall_back=False
            )
        files = [await self.download(url) for url in urls[:4]]
        progress(95.0, "storing the output")
        return files

    async def _await_end(
        self, prediction: Prediction, watch: _Watch, deadline: float, progress: ProgressFn
    ) -> Prediction:
        started = time.monotonic()
        interval = (
            self.webhook_poll_interval_s
            if prediction.handle.get("webhook")
            else self.poll_interval_s
        )
        while not prediction.terminal:
            self._report(prediction, started, deadline, progress)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                await self._cancel_quietly(prediction)
                raise EngineError(
                    ErrorCode.TIMEOUT,
                    "The generation took too long and was stopped.",
                    may_fall_back=False,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.event.wait(), min(interval, remaining))
            if watch.event.is_set() and watch.state is not None:
                watch.event.clear()
                prediction = _merge(prediction, watch.state)
                continue
            try:
                fetched = await self.fetch(prediction)
            except _Transient as exc:
                log.info("%s: polling %s: %s; retrying", self.KIND, prediction.id, exc)
                await asyncio.sleep(min(max(exc.retry_after, 0.0), max(0.0, remaining), 30.0))
                continue
            # A webhook may have ended it while the poll was on its way: keep the end.
            if watch.state is not None and watch.state.terminal:
                fetched = _merge(prediction, watch.state)
            prediction = _merge(prediction, fetched)
        return prediction

    def _report(
        self, prediction: Prediction, started: float, deadline: float, progress: ProgressFn
    ) -> None:
        if prediction.progress is not None:
            share = prediction.progress
        else:  # no figure from upstream: the time spent, against a typical run
            share = min(80.0, 10.0 + 70.0 * (time.monotonic() - started) / 120.0)
        message = "queued" if prediction.status == "queued" else "generating"
        progress(max(1.0, min(89.0, share)), message)

    async def _cancel_quietly(self, prediction: Prediction) -> None:
        try:
            await self.cancel(prediction)
        except Exception as exc:  # the caller's outcome does not depend on it
            log.warning("%s: cancelling %s failed (%s)", self.KIND, prediction.id, cause_of(exc))

    # -- HTTP -----------------------------------------------------------------------------

    def raise_for_create(self, resp: httpx.Response) -> None:
        """An answer to a create that made no prediction -> EngineError (may fall back)."""
        if resp.status_code < 400:
            return
        detail = _detail(resp)
        log.warning(
            "%s %s: create answered %d: %s",
            self.KIND,
            self.config.name,
            resp.status_code,
            detail[:300],
        )
        if resp.status_code == 429:
            raise EngineError(
                ErrorCode.RATE_LIMITED,
                "The model is busy; try again shortly.",
                retry_after_s=retry_after_s(resp),
            )
        if resp.status_code in (400, 422) and is_refusal(detail):
            raise refusal_error(detail)
        raise EngineError(ErrorCode.SERVICE_ERROR, "The model could not take the request.")

    def check_poll(self, resp: httpx.Response) -> None:
        """A poll's answer: transient ones (429, 5xx) retried, others end the run."""
        if resp.status_code == 429 or resp.status_code >= 500:
            wait = retry_after_s(resp)
            raise _Transient(f"HTTP {resp.status_code}", 1.0 if wait is None else wait)
        if resp.status_code >= 400:
            log.warning(
                "%s: poll answered %d: %s", self.KIND, resp.status_code, _detail(resp)[:300]
            )
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The generation was lost upstream.", may_fall_back=False
            )

    async def get(self, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.http.get(url, **kwargs)
        except httpx.HTTPError as exc:
            raise _Transient(cause_of(exc), 1.0) from exc

    async def download(self, url: str) -> MediaFile:
        """An output's bytes, at most ``max_output_bytes``; the platform's key goes only
        to the platform's own host."""
        if url.startswith("data:"):
            try:
                _, encoded = url.split(",", 1)
                data = base64.b64decode(encoded, validate=False)
            except ValueError as exc:
                raise EngineError(
                    ErrorCode.SERVICE_ERROR,
                    "The model's output could not be read.",
                    may_fall_back=False,
                ) from exc
            return MediaFile(data, sniff_ext(data))
        parts = urlsplit(url)
        base = urlsplit(self.config.base_url)
        if parts.scheme != "https" and not (parts.scheme == "http" and base.scheme == "http"):
            raise EngineError(
                ErrorCode.SERVICE_ERROR,
                "The model's output could not be fetched.",
                may_fall_back=False,
            )
        headers = self.auth_headers() if parts.netloc == base.netloc else {}
        for attempt in range(4):
            try:
                async with self.http.stream("GET", url, headers=headers) as resp:
                    if resp.status_code == 429 or resp.status_code >= 500:
                        raise _Transient(f"HTTP {resp.status_code}", retry_after_s(resp) or 1.0)
                    if resp.status_code >= 400:
                        break
                    buf = io.BytesIO()
                    async for chunk in resp.aiter_bytes():
                        buf.write(chunk)
                        if buf.tell() > self.max_output_bytes:
                            raise EngineError(
                                ErrorCode.SERVICE_ERROR,
                                "The model's output is too large.",
                                may_fall_back=False,
                            )
                    data = buf.getvalue()
                    return MediaFile(
                        data, sniff_ext(data, resp.headers.get("content-type", ""), url)
                    )
            except (_Transient, httpx.HTTPError) as exc:
                wait = exc.retry_after if isinstance(exc, _Transient) else 1.0
                cause = str(exc) if isinstance(exc, _Transient) else cause_of(exc)
                log.info("%s: output download: %s (attempt %d)", self.KIND, cause, attempt + 1)
                await asyncio.sleep(min(wait, 5.0) * (attempt + 1) * 0.25)
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The model's output could not be fetched.", may_fall_back=False
        )

    def auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    # -- the engines --------------------------------------------------------------------

    def _model(self, model_name: str | None) -> str:
        if not model_name:  # the registry sends only mapped model ids; be safe anyway
            raise EngineError(ErrorCode.SERVICE_ERROR, "No model is configured for this request.")
        return model_name

    async def generate_video(self, request: VideoRequest) -> MediaFile:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "duration": request.duration_s,
            "resolution": request.resolution,
            "generate_audio": request.generate_audio,
            "mode": request.mode,
            "image": await self.file_input(request.image),
            "reference_image": await self.file_input(request.reference_image),
            "reference_audio": await self.file_input(request.reference_audio),
        }
        files = await self.run(
            model,
            self.shape_input(model, fields),
            request.call_id,
            request.progress,
            request.checkpoint,
        )
        return _first(files, ("mp4", "webm", "mov"), "a video")

    async def generate_music(self, request: MusicRequest) -> MediaFile:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "lyrics": request.lyrics,
            "duration": request.duration_s,
            "instrumental": request.instrumental,
            "output_format": "wav" if request.audio_format == "pcm" else request.audio_format,
            "sample_rate": request.sample_rate,
            "bitrate": request.bitrate,
        }
        files = await self.run(
            model, self.shape_input(model, fields), request.call_id, request.progress
        )
        return _first(files, ("wav", "mp3", "flac", "ogg", "m4a"), "audio")

    async def generate_model(self, request: Model3dRequest) -> MediaFile:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "image": await self.file_input(request.image),
        }
        files = await self.run(
            model,
            self.shape_input(model, fields),
            request.call_id,
            request.progress,
            request.checkpoint,
        )
        return _first(files, ("glb",), "a GLB model")

    async def process_image(self, request: ImageOpRequest) -> ImageOpResult:
        model = self._model(request.model_name)
        fields: dict[str, Any] = {"image": await self.file_input(request.image), **request.options}
        files = await self.run(
            model, self.shape_input(model, fields), request.call_id, request.progress
        )
        images = tuple(f for f in files if f.ext in ("png", "jpeg", "webp"))
        if not images:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The model returned no image.", may_fall_back=False
            )
        return ImageOpResult(images, self.LABEL)

    async def generate(self, request: ImageGenerationRequest) -> GeneratedImage:
        """generate-image: canonical fields prompt, width, height, aspect_ratio (the
        nearest of the common ratios), image (the first reference), images (all)."""
        model = self._model(request.model_name)
        refs = [await self.file_input(r) for r in request.references]
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "width": request.width,
            "height": request.height,
            "aspect_ratio": nearest_ratio(request.width, request.height),
            "image": refs[0] if refs else None,
            "images": refs if len(refs) > 1 else None,
        }
        files = await self.run(model, self.shape_input(model, fields), "", lambda _p, _m: None)
        return GeneratedImage(_first(files, ("png", "jpeg", "webp"), "an image").data)

    async def edit(self, request: ImageEditRequest) -> GeneratedImage:
        """edit-image: canonical fields prompt, image, aspect_ratio ("match_input_image" for
        "auto"), output_format, resolution."""
        model = self._model(request.model_name)
        fields: dict[str, Any] = {
            "prompt": request.prompt,
            "image": await self.file_input(request.image),
            "aspect_ratio": (
                "match_input_image" if request.aspect_ratio == "auto" else request.aspect_ratio
            ),
            "output_format": request.output_format,
            "resolution": request.resolution,
        }
        files = await self.run(model, self.shape_input(model, fields), "", lambda _p, _m: None)
        return GeneratedImage(_first(files, ("png", "jpeg", "webp"), "an image").data)

    async def _image_output(
        self, model: str | None, fields: dict[str, Any], method: str
    ) -> ImageOutput:
        name = self._model(model)
        files = await self.run(name, self.shape_input(name, fields), "", lambda _p, _m: None)
        out = _first(files, ("png", "jpeg", "webp"), "an image")
        width, height = await asyncio.to_thread(_image_size, out.data)
        fmt: Literal["png", "jpeg", "webp"] = (
            "jpeg" if out.ext == "jpeg" else "webp" if out.ext == "webp" else "png"
        )
        return ImageOutput(out.data, fmt, width, height, method)

    async def upscale(
        self, image: bytes, scale: int, face_enhance: bool, *, model: str | None = None
    ) -> ImageOutput:
        """upscale-image: canonical fields image, scale, face_enhance."""
        fields = {
            "image": await self.file_input(image),
            "scale": scale,
            "face_enhance": face_enhance,
        }
        return await self._image_output(
            model, fields, f"AI super-resolution ({scale}x, {self.LABEL})"
        )

    async def deblur(self, image: bytes, mode: str, *, model: str | None = None) -> ImageOutput:
        """deblur-image: canonical fields image, mode (both, deblur, denoise)."""
        fields = {"image": await self.file_input(image), "mode": mode}
        return await self._image_output(model, fields, f"AI restoration ({self.LABEL})")

    async def detect(
        self, image: bytes, prompt: str, threshold: float, *, model: str | None = None
    ) -> DetectionResult:
        """detect-objects, open set: canonical fields image, query (the prompt),
        box_threshold; the output's boxes (see :func:`parse_detections`)."""
        name = self._model(model)
        fields = {
            "image": await self.file_input(image),
            "query": prompt,
            "box_threshold": threshold,
        }
        output = await self.run_output(
            name, self.shape_input(name, fields), "", lambda _p, _m: None
        )
        width, height = await asyncio.to_thread(_image_size, image)
        objects = parse_detections(output, width, height, threshold)
        return DetectionResult(
            objects,
            width,
            height,
            f"open-set detection ({self.LABEL})",
            "the model's own score for each box, 0 to 1",
        )

    async def erase(
        self, image: bytes, mask: bytes, method: str, *, model: str | None = None
    ) -> ImageOutput:
        """remove-object: canonical fields image, mask (white erased); the local engine's
        inpainting ``method`` does not apply."""
        fields = {"image": await self.file_input(image), "mask": await self.file_input(mask)}
        return await self._image_output(model, fields, f"AI inpainting ({self.LABEL})")


_RATIOS = ("1:1", "16:9", "9:16", "4:3", "3:4", "3:2", "2:3", "21:9", "9:21", "5:4", "4:5")


def nearest_ratio(width: int, height: int) -> str:
    """The common aspect ratio nearest to width:height (models that take a ratio)."""

    def value(ratio: str) -> float:
        w, h = ratio.split(":")
        return int(w) / int(h)

    return min(_RATIOS, key=lambda r: abs(value(r) - width / height))


class _Transient(Exception):
    def __init__(self, what: str, retry_after: float) -> None:
        super().__init__(what)
        self.retry_after = retry_after


def _merge(old: Prediction, new: Prediction) -> Prediction:
    return Prediction(
        old.id,
        new.status,
        new.output if new.output is not None else old.output,
        new.error or old.error,
        new.progress if new.progress is not None else old.progress,
        {**old.handle, **new.handle},
        new.said if new.error else old.said,
    )


_DETECTION_LISTS = ("detections", "objects", "predictions", "boxes", "results")
_LABEL_KEYS = ("label", "class", "class_name", "name", "phrase")
_SCORE_KEYS = ("confidence", "score", "prob", "probability")


def parse_detections(
    output: Any, width: int, height: int, threshold: float
) -> tuple[Detection, ...]:
    """The boxes of a detection model's output, in pixels of the input image, at least
    ``threshold`` confident, most confident first.

    The output is a list of detections or an object holding one (under ``detections``,
    ``objects``, ``predictions``, ``boxes`` or ``results``). A detection names its label
    (``label``, ``class``, ``name``, ``phrase``), its score (``confidence``, ``score``,
    ``prob``) and its box: ``bbox``/``box`` as ``[x1, y1, x2, y2]``, or an object with
    ``x1 y1 x2 y2``, ``xmin ymin xmax ymax`` or ``x y width height``. Coordinates all
    within 0..1 are taken as fractions of the image. Anything else is SERVICE_ERROR.
    """
    items: Any = output
    if isinstance(output, Mapping):
        items = next((output[k] for k in _DETECTION_LISTS if k in output), None)
    if not isinstance(items, list):
        raise EngineError(
            ErrorCode.SERVICE_ERROR,
            "The model answered no list of detections.",
            may_fall_back=False,
        )
    found: list[Detection] = []
    for item in items:
        try:
            detection = _detection(item, width, height)
        except (KeyError, TypeError, ValueError, StopIteration):
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The model answered a detection without a box.",
                may_fall_back=False,
            ) from None  # fmt: skip
        if detection is not None and detection.confidence >= threshold:
            found.append(detection)
    return tuple(sorted(found, key=lambda d: -d.confidence))


def _detection(item: Mapping[str, Any], width: int, height: int) -> Detection | None:
    label = str(next(item[k] for k in _LABEL_KEYS if k in item)).strip()
    score = float(next(item[k] for k in _SCORE_KEYS if k in item))
    raw = item.get("bbox", item.get("box", item))
    if isinstance(raw, list | tuple):
        x1, y1, x2, y2 = (float(v) for v in raw[:4])
    elif "x1" in raw:
        x1, y1, x2, y2 = (float(raw[k]) for k in ("x1", "y1", "x2", "y2"))
    elif "xmin" in raw:
        x1, y1, x2, y2 = (float(raw[k]) for k in ("xmin", "ymin", "xmax", "ymax"))
    else:
        x1, y1 = float(raw["x"]), float(raw["y"])
        x2, y2 = x1 + float(raw["width"]), y1 + float(raw["height"])
    if max(abs(x1), abs(y1), abs(x2), abs(y2)) <= 1.0:  # fractions of the image
        x1, x2, y1, y2 = x1 * width, x2 * width, y1 * height, y2 * height
    left, right = sorted((max(0.0, min(x1, width)), max(0.0, min(x2, width))))
    top, bottom = sorted((max(0.0, min(y1, height)), max(0.0, min(y2, height))))
    if right - left < 1 or bottom - top < 1 or not label:
        return None  # nothing left inside the image
    box = Box(round(left), round(top), round(right - left), round(bottom - top))
    return Detection(label, max(0.0, min(1.0, score)), box)


def _first(files: list[MediaFile], exts: tuple[str, ...], what: str) -> MediaFile:
    for f in files:
        if f.ext in exts:
            return f
    raise EngineError(
        ErrorCode.SERVICE_ERROR, f"The model returned no {what}.", may_fall_back=False
    )


def _image_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.width, img.height
    except Exception as exc:
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The model returned an unreadable image.", may_fall_back=False
        ) from exc


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, Mapping):
        for key in ("detail", "error", "title", "message"):
            if body.get(key):
                return str(body[key])
    return str(body)[:500]


def refusal_error(said: object) -> EngineError:
    """A content refusal of the model; ``said``, the upstream's refusal text, is shown
    by the free-retry answer as model_said when it reads as words (trimmed, unnamed)."""
    shown = said_by_model(said)
    return EngineError(
        ErrorCode.CONTENT_FILTERED,
        "The model refused this request (content policy); rephrase it.",
        may_fall_back=False,
        extra=None if shown is None else {"model_said": shown},
    )
