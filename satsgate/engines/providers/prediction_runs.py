"""One prediction run on a platform, from its creation to its output: the hooks a
platform adapter implements, the run waiting on a webhook or the next poll (whichever
comes first) until its deadline, its cancellation, and the output's download.
``PredictionProvider`` (predictions.py) builds the engines on :class:`PredictionRunner`."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import httpx

from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.generation import MediaFile, PredictionCheckpoint, ProgressFn, SavedPrediction
from satsgate.engines.providers.prediction_parsing import (
    data_uri,
    is_refusal,
    output_urls,
    refusal_error,
    sniff_ext,
)
from satsgate.engines.providers.upstream import cause_of
from satsgate.engines.registry import EarlyAsks, EngineDeps
from satsgate.errors import ErrorCode
from satsgate.files import FileStore

log = logging.getLogger("satsgate.engines.providers.predictions")  # one logger for the runs

DATA_URI_MAX_BYTES = 256 * 1024
EARLY_WEBHOOKS_KEPT = 1000
INPUT_URL_TTL_S = 3600
# At most one read of the webhooks' verification keys a minute for webhooks that fail to
# verify (a forgery must not make satsgate call the platform at each try).
KEY_READ_SPACING_S = 60.0

Status = Literal["queued", "running", "succeeded", "failed", "canceled"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "canceled"})


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


Kept = TypeVar("Kept")


def _keep_bounded(kept: dict[str, Kept], key: str, value: Kept) -> None:
    """Keep ``key`` among the last EARLY_WEBHOOKS_KEPT of ``kept`` (oldest dropped)."""
    kept[key] = value
    while len(kept) > EARLY_WEBHOOKS_KEPT:
        kept.pop(next(iter(kept)))


class _Watch:
    """A prediction a run is waiting on: the latest state a webhook brought."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.state: Prediction | None = None
        # A webhook about it reached another instance: ask the platform now.
        self.ask_now = False


# Canonical input fields per operation: what the services know. Each platform maps them
# onto a model's own input names (its defaults for the documented models, then the
# operator's ``input_names``), drops those mapped to "" and the unset ones, and adds
# the operator's ``input_values``.


class PredictionRunner:
    """One platform's prediction runs: the base of ``PredictionProvider``."""

    KIND = ""
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
        # Predictions whose webhook another instance heard before a run here waited on
        # them: the run asks the platform as it starts waiting.
        self._asked_early = EarlyAsks()
        self._unwatched: list[Callable[[str], None]] = []
        self._keys_read_at = -KEY_READ_SPACING_S  # time.monotonic() of the last such read
        self._keys_reading = asyncio.Lock()
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

    def on_unwatched(self, listener: Callable[[str], None]) -> None:
        """UpstreamWatches: a webhook about a prediction no run of this process waits on."""
        self._unwatched.append(listener)

    def ask_now(self, upstream_id: str) -> None:
        """UpstreamWatches: the run waiting on the prediction polls it now."""
        watch = self._watches.get(upstream_id)
        if watch is None:
            self._asked_early.add(upstream_id)
            return
        watch.ask_now = True
        watch.event.set()

    async def receive_webhook(self, headers: Mapping[str, str], body: bytes) -> int:
        """POST /api/webhooks/<kind>/<name>: 401 for a bad signature, else 200 (also for a
        prediction no run waits on: the platform must not retry it)."""
        prediction = self.verify_webhook(headers, body)
        if prediction is None:
            prediction = await self._verify_after_reading_keys(headers, body)
        if prediction is None:
            return 401
        watch = self._watches.get(prediction.id)
        if watch is None:
            # It may have come before the create call's answer: kept a while for the run
            # that is about to wait on it (genuine webhooks only, a bounded number).
            _keep_bounded(self._early, prediction.id, prediction)
            for listener in self._unwatched:
                listener(prediction.id)
            return 200
        previous = watch.state
        if previous is None or not previous.terminal:
            watch.state = prediction
            watch.event.set()
        return 200

    async def _verify_after_reading_keys(
        self, headers: Mapping[str, str], body: bytes
    ) -> Prediction | None:
        """A webhook that did not verify, tried again after reading the keys: this process
        reads them when it first asks for a webhook, and a webhook about a prediction
        another instance made can come before that. One read at a time (the webhooks
        waiting meanwhile verify with what it read), at most one a minute."""
        async with self._keys_reading:
            prediction = self.verify_webhook(headers, body)
            if prediction is not None:
                return prediction
            if time.monotonic() - self._keys_read_at < KEY_READ_SPACING_S:
                return None
            self._keys_read_at = time.monotonic()
            if await self._webhook_target() is None:
                return None
            return self.verify_webhook(headers, body)

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
        if self._asked_early.take(prediction.id):
            watch.ask_now = True
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
            if watch.event.is_set():
                watch.event.clear()
                if watch.ask_now:  # heard elsewhere: the platform says what it said there
                    watch.ask_now = False
                elif watch.state is not None:
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
