"""create_app(settings, backend) -> the aiohttp Application.

Resources are cleanup contexts, set up in order and torn down in reverse:
store -> backend -> shared clients and pools -> gate -> background tasks.
Application state lives under typed AppKeys, never in module globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
from aiohttp import web
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from satsgate import __version__, discovery, mcp
from satsgate.config import Settings, ensure_server_secret
from satsgate.discovery.describe import describe
from satsgate.engines import CpuRunner, EngineDeps, Engines, ProviderFactory, build_engines
from satsgate.engines.local import LOCAL_ENGINES
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.errors import ApiError, catalog_document, invalid_params
from satsgate.files import FileStore
from satsgate.http_util import dumps, error_middleware, read_json
from satsgate.jobs import JOB_TYPES, JobRunner, status_body
from satsgate.lightning import BackendError, LightningBackend, SimulatedPayments
from satsgate.mcp import McpServer, PlannedSource, RoadmapPlannedServices
from satsgate.operator import ensure_operator_token
from satsgate.payments.gate import Gate, HandlerResources, build_gate
from satsgate.payments.http import handle_paid_call
from satsgate.payments.proof import proves, without_refund_secrets
from satsgate.payments.refund_request import request_refund
from satsgate.procguard import die_with_parent
from satsgate.ratelimit import LIMITS, Limits, rate_limit_middleware
from satsgate.refunds import RefundService
from satsgate.server_guard import guard_middleware
from satsgate.services import ai_calls, voice_bridge
from satsgate.services.base import ServiceSpec
from satsgate.services.catalog import CATEGORIES, list_models_document
from satsgate.services.comms import AI_CALL, AiCallConfirmParams, AiCallPollParams
from satsgate.services.planned import planned_services
from satsgate.services.pricing import estimate
from satsgate.services.rates import refresh_rates
from satsgate.services.registry import BY_SLUG, ENGINE_NAMES
from satsgate.services.routing import apply_path_model
from satsgate.store import Job, Store
from satsgate.web import checkout, operator_routes
from satsgate.web.operator_routes import OPERATOR_TOKEN

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", Settings)
BACKEND = web.AppKey("backend", LightningBackend)
STORE = web.AppKey("store", Store)
GATE = web.AppKey("gate", Gate)
HANDLERS = web.AppKey("handlers", HandlerResources)  # what handlers' contexts hold
REFUNDS = web.AppKey("refunds", RefundService)
FILES = web.AppKey("files", FileStore)
JOBS = web.AppKey("jobs", JobRunner)
ENGINES = web.AppKey("engines", Engines)
POOL = web.AppKey("cpu_pool", ProcessPoolExecutor)
HTTP = web.AppKey("http", httpx.AsyncClient)
STARTED_AT = web.AppKey("started_at", float)


def create_app(
    settings: Settings,
    backend: LightningBackend,
    *,
    provider_kinds: Mapping[str, ProviderFactory] = PROVIDER_KINDS,
) -> web.Application:
    """The app; EngineConfigError (a ValueError) when the engine configuration cannot
    work. ``provider_kinds``: the adapters ``kind = ...`` may name."""
    settings = ensure_server_secret(settings)
    # Spawned (not forked) workers: a fork of a process with a running loop and threads
    # is unsafe. CPU-heavy engines (rendering, PDF, OCR, speech) run here; workers start
    # on the first job.
    # A worker exits when the server dies, even by SIGKILL (procguard.die_with_parent).
    pool = ProcessPoolExecutor(
        max_workers=2,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=die_with_parent,
        initargs=(os.getpid(),),
    )
    engines = build_engines(
        settings,
        ENGINE_NAMES,
        EngineDeps(settings, CpuRunner(pool, settings.cpu_job_time_limit_s)),
        provider_kinds=provider_kinds,
        local_engines=LOCAL_ENGINES,
    )
    app = web.Application(
        middlewares=[guard_middleware, rate_limit_middleware, error_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[LIMITS] = Limits.from_settings(settings)
    app[SETTINGS] = settings
    app[BACKEND] = backend
    app[POOL] = pool
    app[ENGINES] = engines
    app[STORE] = Store(settings.db_path)
    app[FILES] = FileStore(
        settings.files_dir,
        settings.public_base_url,
        settings.server_secret,
        settings.file_url_ttl_s,
    )
    app.cleanup_ctx.extend([_store_ctx, _backend_ctx, _gate_ctx, _background_ctx])
    _add_routes(app, settings, backend)
    _add_operator_routes(app, settings)
    return app


# -- the operator's routes and the payer's refund recovery (issue 16) -----------------------
# Kept apart from _add_routes: /operator, /api/operator/ledger (the operator token) and
# /recover, /recover/payout (a refund's own secret). Free; never an invoice.


def _add_operator_routes(app: web.Application, settings: Settings) -> None:
    app[OPERATOR_TOKEN] = ensure_operator_token(settings.data_dir)
    operator_routes.install(app, operator_routes.Keys(SETTINGS, STORE, ENGINES, REFUNDS))


# -- resources ------------------------------------------------------------------------------


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    await app[STORE].open()
    yield
    await app[STORE].close()


async def _backend_ctx(app: web.Application) -> AsyncIterator[None]:
    backend, settings = app[BACKEND], app[SETTINGS]
    await backend.start()
    try:
        info = await backend.info()
        if info.network != settings.network:
            message = (
                f"the node is on {info.network} but satsgate is configured for "
                f"{settings.network}; refusing to start. Fix: set network = "
                f'"{info.network}" (--network, SATSGATE_NETWORK or the config file), or point '
                "satsgate at the node of the network you meant"
            )
            log.error("network mismatch: %s", message)
            raise BackendError(message)
        log.info("lightning backend %s on %s, node %s", backend.name, info.network, info.pubkey)
    except BaseException:
        await backend.close()
        raise
    yield
    await backend.close()


async def _gate_ctx(app: web.Application) -> AsyncIterator[None]:
    settings, pool = app[SETTINGS], app[POOL]
    http = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0), follow_redirects=False)
    store = app[STORE]
    refunds = RefundService(settings, store.refunds, app[BACKEND])
    jobs = JobRunner(store.jobs, settings.public_base_url)
    app[REFUNDS] = refunds
    app[JOBS] = jobs
    app[HTTP] = http
    app[HANDLERS] = handlers = HandlerResources(
        settings=settings,
        files=app[FILES],
        http=http,
        cpu=CpuRunner(pool, settings.cpu_job_time_limit_s),
        votes=store.votes,
        engines=app[ENGINES],
    )
    app[GATE] = gate = build_gate(
        settings=settings,
        backend=app[BACKEND],
        store=store,
        refunds=refunds,
        jobs=jobs,
        handlers=handlers,
    )
    orphans = await jobs.fail_orphans(gate.refund_orphaned_job)
    if orphans:
        log.warning("%d job(s) were lost in a restart: failed and refunded", orphans)
    unanswered = await gate.refund_unanswered()
    if unanswered:
        log.warning("%d call(s) were interrupted by a restart: refunded", unanswered)
    yield
    await jobs.close()
    await refunds.wait_payouts()
    await app[ENGINES].aclose()
    await http.aclose()
    pool.shutdown(wait=True, cancel_futures=True)


# An unpaid payment is deleted this long after its invoice expired.
UNPAID_RETENTION_S = 7 * 86400


async def _prune_unpaid(store: Store) -> None:
    pruned = await store.payments.prune_unpaid(int(time.time()) - UNPAID_RETENTION_S)
    if pruned:
        log.info("pruned %d payment(s) never paid", pruned)


async def _background_ctx(app: web.Application) -> AsyncIterator[None]:
    gate, refunds, files = app[GATE], app[REFUNDS], app[FILES]
    await gate.init_settlement_cursor()  # before the site listens and issues invoices
    settle_task = asyncio.create_task(gate.watch_settlements(), name="settlements")
    holds = gate.holds
    hold_task = asyncio.create_task(holds.watch(), name="holds") if holds is not None else None
    scheduler = AsyncIOScheduler()
    scheduler.add_job(
        refunds.reconcile,
        "interval",
        seconds=60,
        id="refunds-reconcile",
        max_instances=1,
        coalesce=True,
    )
    scheduler.add_job(
        files.remove_older_than,
        "interval",
        hours=1,
        id="files-cleanup",
        args=[12 * 3600],
        max_instances=1,
        coalesce=True,
    )
    scheduler.add_job(
        _prune_unpaid,
        "interval",
        hours=1,
        args=[app[STORE]],
        id="payments-prune",
        max_instances=1,
        coalesce=True,
    )
    # BTC-pegged rates: once now, then hourly; without a price source the fallback stays.
    scheduler.add_job(
        refresh_rates,
        "interval",
        hours=1,
        args=[app[HTTP], app[SETTINGS]],
        id="rates-refresh",
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
    )
    scheduler.start()
    app[STARTED_AT] = time.time()
    yield
    scheduler.shutdown(wait=False)
    for task in (settle_task, hold_task):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# -- routes ---------------------------------------------------------------------------------


def _add_routes(app: web.Application, settings: Settings, backend: LightningBackend) -> None:
    r = app.router
    r.add_get("/api/health", health)
    r.add_get("/api/error-codes", error_codes)
    r.add_get("/api/l402/models", models)
    r.add_get("/api/estimate-cost", estimate_cost)
    r.add_get("/api/files/{name}", serve_file)
    r.add_get("/api/lnurlw/{k1}", lnurl_withdraw)
    r.add_get("/api/lnurlw/{k1}/callback", lnurl_withdraw_callback)
    r.add_get("/api/l402/job-status", job_status)
    r.add_get("/api/l402/vote", list_planned)  # POST /api/l402/vote is the paid vote
    r.add_post("/api/l402/voice-bridge/open", open_voice_bridge)
    # The session's free follow-ups (two path segments: never a {slug}).
    r.add_post(voice_bridge.SAY_PATH, voice_bridge_say)
    r.add_get(voice_bridge.POLL_PATH, poll_voice_bridge)
    r.add_post(voice_bridge.END_PATH, end_voice_bridge)
    r.add_post(
        "/api/l402/refund", refund_request_route
    )  # free: refund a paid, unused payment  # the spec's slug form
    # Before /api/l402/{slug}: the same path also takes the free confirm and poll forms.
    r.add_post("/api/l402/ai-call", ai_call_or_confirmation)
    r.add_get("/api/l402/ai-call", ai_call_poll_or_description)
    r.add_post("/api/l402/{slug}", paid_call)
    r.add_post("/api/m/{service}/{model}", paid_call_with_path_model)
    # GET /api/l402/{slug}, well-known, OpenAPI
    discovery.add_routes(app, settings, backend, app[ENGINES])
    mcp.install(
        app,
        mcp_server,
        public_base_url=settings.public_base_url,
        max_body_bytes=settings.max_body_bytes,
        allowed_origins=settings.mcp_allowed_origins,
    )  # POST /api/mcp (JSON-RPC tools, paid with a paymentId)
    checkout.install(app, GATE)  # GET /checkout/<token>, GET /api/payments/<token or id>
    if isinstance(backend, SimulatedPayments):
        # Dev-only routes exist only with a node that simulates payments (the dev node).
        r.add_post("/api/dev/pay", dev_pay)
        r.add_get("/api/dev/outgoing", dev_outgoing)
        r.add_post("/api/dev/outgoing-mode", dev_outgoing_mode)


def mcp_server(
    app: web.Application,
    *,
    services: Sequence[ServiceSpec[Any]] | None = None,
    planned: PlannedSource | None = None,
) -> McpServer:
    """The MCP server over this app's gate, jobs and refunds (once they exist);
    ``services`` and ``planned`` default to the registry and the roadmap's votes."""
    return McpServer(
        app[GATE],
        jobs=app[JOBS],
        refunds=app[REFUNDS],
        settings=app[SETTINGS],
        engines=app[ENGINES],
        services=services,
        planned=planned or RoadmapPlannedServices(app[STORE].votes),
    )


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=dumps)


async def health(request: web.Request) -> web.Response:
    app = request.app
    info = await app[BACKEND].info()
    # Liveness and versions only: business figures are the operator's (/api/operator/ledger).
    return _json(
        {
            "status": "ok",
            "version": __version__,
            "backend": app[BACKEND].name,
            "network": info.network,
            "node_pubkey": info.pubkey,
            "uptime_s": int(time.time() - app[STARTED_AT]),
            "engines": [status.public() for status in app[ENGINES].statuses()],
        }
    )


async def error_codes(request: web.Request) -> web.Response:
    return _json(catalog_document())


async def models(request: web.Request) -> web.Response:
    category = request.query.get("category")
    if category is not None and category not in CATEGORIES:
        raise ApiError(
            "L402_INVALID_PARAMS",
            f"Unknown category {category!r}.",
            extra={"categories": list(CATEGORIES)},
        )
    return web.Response(body=_models_body(category), content_type="application/json")


@functools.lru_cache(maxsize=len(CATEGORIES) + 1)
def _models_body(category: str | None) -> bytes:
    """The catalog is static data: serialize each listing once."""
    return dumps(list_models_document(category)).encode()


async def estimate_cost(request: web.Request) -> web.Response:
    query = dict(request.query)
    service = query.pop("service", None)
    resp = _json(estimate(service, query))
    resp.headers["X-Error-Code"] = "L402_ESTIMATE_ONLY"
    return resp


async def serve_file(request: web.Request) -> web.StreamResponse:
    files = request.app[FILES]
    path = files.resolve(
        request.match_info["name"], request.query.get("exp", ""), request.query.get("sig", "")
    )
    if path is None:
        raise ApiError("NOT_FOUND", "No such file, or the link expired.")
    return web.FileResponse(
        path,
        headers={
            "Content-Type": files.content_type(path.name),
            "Cache-Control": "private, max-age=3600",
        },
    )


async def list_planned(request: web.Request) -> web.Response:
    """GET /api/l402/vote: the vote service's description plus the planned services,
    most voted first (the spec's listing)."""
    description = describe(BY_SLUG["vote"], request.app[SETTINGS], request.app[ENGINES])
    return _json({**description, "services": await planned_services(request.app[STORE].votes)})


class RefundRequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paymentId: str = Field(min_length=1, max_length=100)
    invoice: str = Field(min_length=1, max_length=4000)
    preimage: str | None = Field(None, min_length=64, max_length=64)  # proof, HTTP payments
    email: str | None = Field(None, max_length=320)
    feedback: str | None = Field(None, max_length=2000)


async def refund_request_route(request: web.Request) -> web.Response:
    """POST /api/l402/refund: the HTTP form of the request_refund tool."""
    body = await read_json(request, 64 * 1024)
    try:
        args = RefundRequestBody.model_validate(body)
    except ValidationError as exc:
        raise invalid_params(
            exc, "refund request", '{"paymentId": "pay_...", "invoice": "lnbcrt..."}'
        ) from None
    app = request.app
    return _json(
        await request_refund(
            app[GATE], app[REFUNDS], app[SETTINGS].network, args.paymentId, args.invoice,
            args.feedback, args.preimage,
        )
    )


async def open_voice_bridge(request: web.Request) -> web.Response:
    return await handle_paid_call(request, request.app[GATE], BY_SLUG["voice-bridge-open"])


async def voice_bridge_say(request: web.Request) -> web.Response:
    """POST /api/l402/voice-bridge/say: speak into an open session (free, never an invoice)."""
    settings = request.app[SETTINGS]
    body = await read_json(request, min(voice_bridge.SAY_MAX_BODY_BYTES, settings.max_body_bytes))
    try:
        params = voice_bridge.VoiceBridgeSayParams.model_validate(body)
    except ValidationError as exc:
        raise invalid_params(exc, "say", '{"sessionId": "<sessionId>", "text": "Hello"}') from None
    sessions = voice_bridge.sessions_for(settings)
    return _json(await voice_bridge.say(settings, request.app[ENGINES], sessions, params))


async def poll_voice_bridge(request: web.Request) -> web.Response:
    """GET /api/l402/voice-bridge/poll?sessionId=&cursor=: the events after cursor (free).
    Query parameters other than these are ignored, as cache busters are common."""
    query: dict[str, str] = {}
    for name in ("sessionId", "session_id", "cursor"):
        values = request.query.getall(name, [])
        if len(values) > 1:
            raise ApiError("L402_INVALID_PARAMS", f"Give {name} once.")
        if values:
            query[name] = values[0]
    try:
        params = voice_bridge.VoiceBridgePollParams.model_validate(query)
    except ValidationError as exc:
        raise invalid_params(
            exc, "poll", f"GET {voice_bridge.POLL_PATH}?sessionId=<sessionId>&cursor=0"
        ) from None
    settings = request.app[SETTINGS]
    sessions = voice_bridge.sessions_for(settings)
    resp = _json(await voice_bridge.poll(settings, request.app[ENGINES], sessions, params))
    resp.headers["Cache-Control"] = "no-store"  # the call moves on between polls
    return resp


async def end_voice_bridge(request: web.Request) -> web.Response:
    """POST /api/l402/voice-bridge/end: hang up and settle the deposit (free)."""
    settings = request.app[SETTINGS]
    body = await read_json(request, voice_bridge.SMALL_BODY_BYTES)
    try:
        params = voice_bridge.VoiceBridgeEndParams.model_validate(body)
    except ValidationError as exc:
        raise invalid_params(exc, "end", '{"sessionId": "<sessionId>"}') from None
    sessions = voice_bridge.sessions_for(settings)
    return _json(await voice_bridge.end(settings, request.app[ENGINES], sessions, params))


_CONFIRM_EXAMPLE = (
    '{"action": "confirm", "session_id": "<session_id>", "answers": {"<question>": "<answer>"}}'
)


async def ai_call_or_confirmation(request: web.Request) -> web.Response:
    """POST /api/l402/ai-call: a body with ``action`` confirms a pending_confirm call on its
    original payment (free, never an invoice); any other body is the paid call."""
    gate, settings = request.app[GATE], request.app[SETTINGS]
    body = await read_json(request, min(AI_CALL.max_body_bytes, settings.max_body_bytes))
    if isinstance(body, dict) and "action" in body:
        return _json(await _confirm_ai_call(settings, request.app[ENGINES], body))
    # The body stream can be read only once: the paid path gets the body parsed here.
    return await handle_paid_call(request, gate, AI_CALL, lambda _reread: body)


async def _confirm_ai_call(
    settings: Settings, engines: Engines, body: dict[str, Any]
) -> dict[str, Any]:
    try:
        params = AiCallConfirmParams.model_validate(body)
    except ValidationError as exc:
        raise invalid_params(exc, "confirmation", _CONFIRM_EXAMPLE) from None
    records = ai_calls.records_for(settings)
    return await ai_calls.confirm(settings, engines, records, params.session_id, params.answers)


async def ai_call_poll_or_description(request: web.Request) -> web.Response:
    """GET /api/l402/ai-call: with ``call_id`` the free poll of that call, else the
    service description like every GET /api/l402/<slug>."""
    if "call_id" not in request.query:
        return discovery.service_description(request.app, AI_CALL.slug)
    call_ids = request.query.getall("call_id")
    if len(call_ids) > 1:
        raise ApiError("L402_INVALID_PARAMS", "Give call_id once.")
    try:
        params = AiCallPollParams.model_validate({"call_id": call_ids[0]})
    except ValidationError as exc:
        raise invalid_params(exc, "poll", "GET /api/l402/ai-call?call_id=<call_id>") from None
    settings = request.app[SETTINGS]
    records = ai_calls.records_for(settings)
    record = await ai_calls.poll(settings, request.app[ENGINES], records, params.call_id)
    resp = _json(record)
    resp.headers["Cache-Control"] = "no-store"  # the call moves on between polls
    return resp


async def paid_call_with_path_model(request: web.Request) -> web.Response:
    """/api/m/{service}/{model}: the path names the model; a body field wins."""
    spec = BY_SLUG.get(request.match_info["service"])
    if spec is None:
        raise ApiError("NOT_FOUND", f"No service {request.match_info['service']!r}.")
    model = request.match_info["model"]

    def with_model(body: Any) -> Any:
        return apply_path_model(body, model) if isinstance(body, dict) else body

    return await handle_paid_call(request, request.app[GATE], spec, with_model)


async def paid_call(request: web.Request) -> web.Response:
    spec = BY_SLUG.get(request.match_info["slug"])
    if spec is None:
        raise ApiError("NOT_FOUND", f"No service {request.match_info['slug']!r}.")
    return await handle_paid_call(request, request.app[GATE], spec)


async def job_status(request: web.Request) -> web.Response:
    """Poll a job (free). The same answer serves check_job_status and get_job_result."""
    job_id = (
        request.query.get("requestId") or request.query.get("jobId") or request.query.get("job_id")
    )
    job_type = request.query.get("jobType")
    if not job_id:
        raise ApiError("L402_INVALID_PARAMS", "The query parameter requestId is required.")
    if job_type is not None and job_type not in JOB_TYPES:
        raise ApiError(
            "L402_INVALID_PARAMS",
            f"Unknown jobType {job_type!r}.",
            extra={"jobTypes": list(JOB_TYPES)},
        )
    jobs = request.app[JOBS]
    job = await jobs.get(job_id)
    if job is None or (job_type is not None and job.job_type != job_type):
        raise ApiError(
            "NOT_FOUND", f"No job {job_id!r}" + (f" of type {job_type}." if job_type else ".")
        )
    body = status_body(job, jobs.progress(job.job_id))
    if job.error is not None and not await _payer_polls(request, job):
        body = without_refund_secrets(body)  # a job id alone shows no refund link
    resp = _json(body)
    if job.error is not None:
        resp.headers["X-Error-Code"] = str(job.error.get("error_code", ""))
    return resp


async def _payer_polls(request: web.Request, job: Job) -> bool:
    """The poll proves the job's payment: the credential it was paid with in
    Authorization, or (a payment made with create_payment) its paymentId."""
    payment = await request.app[GATE].get_payment(job.payment_id)
    return payment is not None and proves(
        payment,
        authorization=request.headers.getall("Authorization", []),
        payment_id=request.query.get("paymentId"),
    )


async def lnurl_withdraw(request: web.Request) -> web.Response:
    return _json(await request.app[REFUNDS].withdraw_request(request.match_info["k1"]))


async def lnurl_withdraw_callback(request: web.Request) -> web.Response:
    k1_path = request.match_info["k1"]
    k1, pr = request.query.get("k1", ""), request.query.get("pr", "")
    if k1 != k1_path or not pr:
        return _json({"status": "ERROR", "reason": "k1 and pr are required."})
    # LUD-03: HTTP 200 with a JSON status in both outcomes.
    return _json(await request.app[REFUNDS].withdraw_callback(k1, pr))


def _simulating(request: web.Request) -> SimulatedPayments:
    backend = request.app[BACKEND]
    assert isinstance(backend, SimulatedPayments)  # the routes exist only then
    return backend


async def dev_pay(request: web.Request) -> web.Response:
    backend = _simulating(request)
    try:
        body = await request.json()
        invoice = str(body["invoice"])
    except (ValueError, KeyError, TypeError):
        raise ApiError("INVALID_INPUT", 'Send {"invoice": "<bolt11>"}.') from None
    try:
        preimage = await backend.simulate_payment(invoice)
    except BackendError as exc:
        raise ApiError("INVALID_INPUT", f"Cannot pay: {exc}.") from None
    return _json({"preimage": preimage})


async def dev_outgoing(request: web.Request) -> web.Response:
    backend = _simulating(request)
    return _json({"payments": await backend.outgoing_payments()})


async def dev_outgoing_mode(request: web.Request) -> web.Response:
    backend = _simulating(request)
    body = await request.json()
    mode = body.get("mode")
    if mode not in ("succeed", "fail", "pending"):
        raise ApiError("INVALID_INPUT", "mode must be succeed, fail or pending.")
    backend.outgoing_mode = mode
    if body.get("resolve_pending") in ("succeed", "fail"):
        await backend.complete_pending(body["resolve_pending"] == "succeed")
    return _json({"mode": mode})
