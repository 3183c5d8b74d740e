"""create_app(settings, backend) -> the aiohttp Application.

Resources are cleanup contexts, set up in order and torn down in reverse:
store -> backend -> shared clients and pools -> gate -> background tasks.
Application state lives under typed AppKeys (satsgate/appkeys.py), never in module
globals. Routes live with their faces; this module only composes them:
web/api.py (health, catalogs, files, LNURL-withdraw, dev), web/operation_routes.py (the free
operations and /api/l402/{slug}), discovery/, mcp/, web/checkout.py.
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
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from satsgate import discovery, mcp
from satsgate.appkeys import (
    AI_CALLS,
    BACKEND,
    CALLBACKS,
    CLUSTER_EVENTS,
    CPU,
    DEPOSITS,
    ENGINES,
    ESIGN,
    FAXES,
    FILES,
    GATE,
    HANDLERS,
    HELD_REQUESTS,
    HTTP,
    JOBS,
    OUTBOUND,
    POOL,
    PRECHECKS,
    PRESENCE,
    RATES,
    REFUNDS,
    SCREENER,
    SETTINGS,
    STARTED_AT,
    STORE,
    VOICE_BRIDGE,
)
from satsgate.cluster.events import ClusterEvents, open_events
from satsgate.cluster.presence import Presence
from satsgate.config.nostr import NostrConfig
from satsgate.config.settings import Settings, ensure_server_secret, output_caps
from satsgate.domain.do_not_contact import NO_OPT_OUTS, OptOuts
from satsgate.domain.telephony import BUILTIN, Destinations, load_rates_file
from satsgate.edge.connection_guard import guard_middleware
from satsgate.edge.http import error_middleware
from satsgate.edge.ratelimit import LIMITS, Limits, rate_limit_middleware
from satsgate.engines import CpuRunner, EngineDeps, Engines, ProviderFactory, build_engines
from satsgate.engines.delivery import WebhookRequest
from satsgate.engines.local import LOCAL_ENGINES
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.engines.registry import (
    UPSTREAM_MOVED,
    UpstreamWatches,
    read_upstream_moved,
    upstream_moved,
    upstream_watches,
)
from satsgate.files import FileStore, OutputCaps
from satsgate.jobs.callbacks import CallbackSender
from satsgate.jobs.lifecycle import JobRunner, resume_jobs
from satsgate.lightning.backend import BackendError, LightningBackend, require_network
from satsgate.mcp import McpServer, PlannedSource
from satsgate.mcp.tools import paid_tools
from satsgate.operations import OPERATIONS, OperationEnv, RoadmapPlannedServices
from satsgate.operations.base import OPERATION_ENV
from satsgate.outreach import retention
from satsgate.outreach.held_requests import HeldIntake, HeldRequestDesk
from satsgate.outreach.screener import NodeScreener
from satsgate.payments.gate import HandlerResources, build_gate
from satsgate.payouts.deposits import DepositSettler
from satsgate.payouts.fees import PayoutFees
from satsgate.payouts.refunds import RefundService
from satsgate.procguard import die_with_parent
from satsgate.public_urls import SYSTEM_OUTBOUND, Outbound
from satsgate.server.scheduler import Scheduler
from satsgate.services.base import PrecheckMemo, ServiceSpec
from satsgate.services.catalog.rates import Rates
from satsgate.services.comms import deliveries
from satsgate.services.comms.ai_call_runner import AiCallRunner
from satsgate.services.comms.bridge_calls import BridgeCalls
from satsgate.services.comms.faxes import FaxDesk
from satsgate.services.documents.esign_desk import ESignDesk
from satsgate.services.registry import BY_SLUG, ENGINE_NAMES, SERVICES
from satsgate.store import Store
from satsgate.store.cpu_queue import CpuQueueRepository
from satsgate.web import api, appeal, checkout, operation_routes, operator_held, operator_routes
from satsgate.web import voice_bridge as voice_bridge_routes
from satsgate.web.operator_signin import OPERATOR, OperatorAccess
from satsgate.workers.gateway import QueueCpuRunner
from satsgate.workers.status import WORKERS_STATE

log = logging.getLogger(__name__)

__all__ = [
    "AI_CALLS",
    "BACKEND",
    "DEPOSITS",
    "ENGINES",
    "FILES",
    "GATE",
    "HANDLERS",
    "HTTP",
    "JOBS",
    "OPERATION_ENV",
    "POOL",
    "REFUNDS",
    "SETTINGS",
    "STARTED_AT",
    "STORE",
    "VOICE_BRIDGE",
    "create_app",
    "mcp_server",
]


def node_engines(
    settings: Settings,
    cpu: CpuRunner,
    provider_kinds: Mapping[str, ProviderFactory] = PROVIDER_KINDS,
    opt_outs: OptOuts = NO_OPT_OUTS,
    destinations: Destinations | None = None,
) -> Engines:
    """This node's engine registry: every engine name the services run on, resolved to
    the providers the settings route it to, else the local engine installed here.
    EngineConfigError when the configuration cannot work. ``destinations``: the app's
    telephony table (None: the one the settings name, :func:`telephony_destinations`)."""
    if destinations is None:
        destinations = telephony_destinations(settings)
    return build_engines(
        settings,
        ENGINE_NAMES,
        EngineDeps(settings, cpu, opt_outs, destinations),
        provider_kinds=provider_kinds,
        local_engines=LOCAL_ENGINES,
    )


def telephony_destinations(settings: Settings) -> Destinations:
    """The destination table this node serves and prices SMS, calls, fax and the voice
    bridge by: ``[telephony] rates_file`` when set (RatesFileError, a ValueError, when it
    is unusable), else the built-in table."""
    path = settings.telephony.get("rates_file")
    return load_rates_file(Path(path).expanduser()) if path else BUILTIN


def create_app(
    settings: Settings,
    backend: LightningBackend,
    *,
    provider_kinds: Mapping[str, ProviderFactory] = PROVIDER_KINDS,
    outbound: Outbound = SYSTEM_OUTBOUND,
) -> web.Application:
    """The app; EngineConfigError (a ValueError) when the engine configuration cannot
    work. ``provider_kinds``: the adapters ``kind = ...`` may name; ``outbound``: the
    outside network callers' URLs are reached through (DNS, public addresses, CAs)."""
    settings = ensure_server_secret(settings)
    destinations = telephony_destinations(settings)
    # Spawned (not forked) workers: a fork of a process with a running loop and threads
    # is unsafe. CPU-heavy engines (rendering, PDF, OCR, speech) run here; workers start
    # on the first job.
    # A worker exits when the server dies, even by SIGKILL (procguard.die_with_parent).
    pool = ProcessPoolExecutor(
        max_workers=settings.cpu_workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=die_with_parent,
        initargs=(os.getpid(),),
    )
    store = Store(settings.db_path, settings.store_url)
    # One runner for handlers and engines alike: its lanes count the pool's workers; or,
    # with [workers] mode = "queue", the queue that `satsgate worker` processes take from.
    cpu = _cpu_runner(settings, pool, store)
    # Inbound webhooks (a STOP reply) reach the do-not-contact list through EngineDeps.
    engines = node_engines(settings, cpu, provider_kinds, store.do_not_contact, destinations)
    app = web.Application(
        middlewares=[guard_middleware, rate_limit_middleware, error_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[LIMITS] = Limits.from_settings(settings)
    app[SETTINGS] = settings
    app[BACKEND] = backend
    app[POOL] = pool
    app[CPU] = cpu
    app[ENGINES] = engines
    app[STORE] = store
    # The BTC rate book pegged prices are quoted at (hourly), with this app's destinations.
    app[RATES] = Rates(destinations)
    caps = OutputCaps(output_caps(settings), settings.output_caps_by_service)
    # Outcomes of checks before any invoice (card fits), and the output caps they check.
    app[PRECHECKS] = PrecheckMemo(caps=caps)
    app[OUTBOUND] = outbound
    app[FILES] = FileStore(
        settings.files_dir,
        settings.public_base_url,
        settings.server_secret,
        settings.file_url_ttl_s,
        caps,
    )
    app.cleanup_ctx.extend([_store_ctx, _backend_ctx, _gate_ctx, _fax_ctx, _background_ctx])
    if isinstance(cpu, QueueCpuRunner):  # listening for outcomes before the gate resumes jobs
        app.cleanup_ctx.insert(1, cpu.cleanup_ctx)
        app[WORKERS_STATE] = cpu.queue.state
    _add_routes(app, settings, backend)
    _add_operator_routes(app, settings)
    _add_nostr(app, settings)
    return app


def _cpu_runner(settings: Settings, pool: ProcessPoolExecutor, store: Store) -> CpuRunner:
    if settings.workers_mode != "queue":
        return CpuRunner(pool, settings.cpu_job_time_limit_s, settings.cpu_workers)
    return QueueCpuRunner(
        pool,
        settings.cpu_job_time_limit_s,
        CpuQueueRepository(store.db),
        settings.store_url,
        settings.workers_queue_wait_s or None,
    )


def _add_nostr(app: web.Application, settings: Settings) -> None:
    """Nostr kind 31402 announcements when [discovery.nostr] names relays (a background
    task: a relay never slows start-up or a request)."""
    if NostrConfig.from_discovery(settings.discovery).enabled:
        from satsgate.nostr.publisher import install

        install(app, settings, lambda: app[discovery.DISCOVERY].catalog)


# -- resources ------------------------------------------------------------------------------


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    """The store, and this instance among those sharing it (satsgate.cluster.presence)."""
    store, settings = app[STORE], app[SETTINGS]
    await store.open()
    sqlite_lock = None if settings.store_url else settings.db_path.with_suffix(".instance-lock")
    app[PRESENCE] = presence = Presence(
        store,
        lease_s=settings.instance_lease_s,
        sqlite_lock=sqlite_lock,
        server_secret=settings.server_secret,
        files_dir=settings.files_dir,
    )
    try:
        await presence.join()
    except BaseException:
        await store.close()
        raise
    yield
    await presence.leave()
    await store.close()


async def _backend_ctx(app: web.Application) -> AsyncIterator[None]:
    backend, settings = app[BACKEND], app[SETTINGS]
    await backend.start()
    try:
        info = await backend.info()
        try:
            require_network("the node", info.network, settings.network)
        except BackendError as exc:
            log.error("%s", exc)
            raise
        log.info("lightning backend %s on %s, node %s", backend.name, info.network, info.pubkey)
    except BaseException:
        await backend.close()
        raise
    yield
    await backend.close()


async def _gate_ctx(app: web.Application) -> AsyncIterator[None]:
    """The node's parts: built in order, each given what it needs; what a restart left
    unfinished taken up; at the stop, each closed."""
    _build_payouts(app)
    _build_desks(app)
    _build_gate(app)
    presence = app[PRESENCE]
    await presence.recover_gone(functools.partial(_take_up_gone, app))
    if presence.alone:
        await _take_up_at_group_start(app)
    yield
    await _close_parts(app)


def _announce_upstream_webhooks(engines: Engines, events: ClusterEvents) -> None:
    """A platform's webhook that reaches an instance where no wait follows its object (a
    prediction, a sent fax) is announced; the instance whose wait follows it asks the
    platform at once, instead of at its next poll."""
    watching: dict[str, UpstreamWatches] = {
        name: watches
        for name, provider in engines.providers_by_name().items()
        if (watches := upstream_watches(provider)) is not None
    }
    for name, provider in watching.items():
        provider.on_unwatched(functools.partial(_announce_upstream, events, name))

    def heard(payload: str) -> None:
        moved = read_upstream_moved(payload)
        provider = watching.get(moved[0]) if moved is not None else None
        if moved is not None and provider is not None:
            provider.ask_now(moved[1])

    if watching:
        events.on(UPSTREAM_MOVED, heard)


def _announce_upstream(events: ClusterEvents, provider: str, upstream_id: str) -> None:
    events.publish(UPSTREAM_MOVED, upstream_moved(provider, upstream_id))


def _build_payouts(app: web.Application) -> None:
    """The shared HTTP client and what pays payers back: refunds, deposit settlement."""
    settings, store = app[SETTINGS], app[STORE]
    app[HTTP] = http = httpx.AsyncClient(
        timeout=httpx.Timeout(60.0, connect=10.0), follow_redirects=False
    )
    fees = PayoutFees(settings, store.payout_fees)
    app[REFUNDS] = refunds = RefundService(settings, store.refunds, app[BACKEND], fees)
    app[DEPOSITS] = DepositSettler(settings, store, refunds, http, app[OUTBOUND])


def _build_desks(app: web.Application) -> None:
    """The desks the services run through (voice bridge, callbacks and jobs, AI calls,
    e-signatures, faxes, the content screen) and the handlers' resources over them."""
    settings, store = app[SETTINGS], app[STORE]
    # Several instances on PostgreSQL: what one instance holds in memory and another's
    # caller needs (a job's progress and end, a say for a call another instance dialed, a
    # platform's webhook about a prediction or a fax another instance waits on; the AI
    # calls' runner announces its own) is announced to every instance.
    events = open_events(settings.store_url, store.db)
    if events is not None:
        app[CLUSTER_EVENTS] = events
        _announce_upstream_webhooks(app[ENGINES], events)
    # Voice-bridge sessions: opened by open_voice_bridge, reached by say/poll/end and by
    # the provider's media WebSocket and status callbacks (web/voice_bridge.py).
    # A callee who asks not to be called again goes on the do-not-contact list.
    app[VOICE_BRIDGE] = BridgeCalls(
        settings, store, app[ENGINES], app[DEPOSITS], store.do_not_contact, events
    )
    app[CALLBACKS] = callbacks = CallbackSender(store.callbacks, app[OUTBOUND])
    app[JOBS] = JobRunner(store.jobs, settings.public_base_url, callbacks, events)
    app[AI_CALLS] = AiCallRunner(settings, store, app[ENGINES], app[DEPOSITS], events)
    # E-signature requests, followed to their signed copy (webhooks, the poll).
    app[ESIGN] = esign = ESignDesk(store.esign, app[ENGINES], settings)
    esign.attach()
    # Sent faxes followed and settled, inbound numbers and leases (started in _fax_ctx).
    app[FAXES] = FaxDesk(
        app[ENGINES],
        store.faxes,
        app[FILES],
        settings,
        store.payments.get,
        app[REFUNDS],
        app[RATES].destinations,
    )
    app[SCREENER] = NodeScreener(
        settings=settings,
        opt_outs=store.do_not_contact,
        screenings=store.screenings,
        payments=store.payments,
    )
    app[HANDLERS] = HandlerResources(
        settings=settings,
        files=app[FILES],
        http=app[HTTP],
        cpu=app[CPU],
        votes=store.votes,
        engines=app[ENGINES],
        voice_bridge=app[VOICE_BRIDGE],
        esign=esign,
        deliveries=store.deliveries,
        screener=app[SCREENER],
        ai_calls=app[AI_CALLS],
        rates=app[RATES],
        faxes=app[FAXES],
    )


def _build_gate(app: web.Application) -> None:
    """The payment gate, the desk of held communications beside it, and the free
    operations' environment."""
    settings, store = app[SETTINGS], app[STORE]
    # The screen's holds: the spender hands a flagged call to the intake; the desk after
    # the gate takes appeal invoices from it and runs a released request through it.
    intake = HeldIntake(
        store=store,
        jobs=app[JOBS],
        server_secret=settings.server_secret,
        public_base_url=settings.public_base_url,
    )
    app[GATE] = gate = build_gate(
        settings=settings,
        backend=app[BACKEND],
        store=store,
        refunds=app[REFUNDS],
        jobs=app[JOBS],
        handlers=app[HANDLERS],
        opt_outs=store.do_not_contact,
        prechecks=app[PRECHECKS],
        held=intake,
    )
    app[HELD_REQUESTS] = HeldRequestDesk(
        intake=intake,
        store=store,
        refunds=app[REFUNDS],
        invoices=gate,
        runner=gate.spender,
        contexts=app[HANDLERS],
        released_screener=app[SCREENER].released(),
        by_slug=dict(BY_SLUG),
    )
    app[OPERATION_ENV] = OperationEnv(
        gate=gate,
        jobs=app[JOBS],
        refunds=app[REFUNDS],
        settings=settings,
        engines=app[ENGINES],
        paid=paid_tools(SERVICES),
        by_slug=BY_SLUG,
        planned=RoadmapPlannedServices(store.votes),
        voice_bridge=app[VOICE_BRIDGE],
        esign=app[ESIGN],
        deliveries=store.deliveries,
        ai_calls=app[AI_CALLS],
        rates=app[RATES],
        faxes=app[FAXES],
    )


async def _take_up_gone(app: web.Application, gone: str) -> None:
    """What the gone instance ``gone`` left unfinished (its predecessor in this
    process's place, or another instance that stopped), each taken up or settled once."""
    gate, jobs, store = app[GATE], app[JOBS], app[STORE]
    resumed = await resume_jobs(store.jobs, BY_SLUG, gate.resume_job, app[RATES].book, gone)
    if resumed:
        log.info("%d job(s) running on remote platforms were taken up again", resumed)
    orphans = await jobs.fail_orphans(gate.refund_orphaned_job, gone)
    if orphans:
        log.warning("%d job(s) were lost in a restart: failed and refunded", orphans)
    interrupted = await app[HELD_REQUESTS].finish_interrupted(gone)
    if interrupted:
        log.warning("%d held request(s) were mid-review at a restart: refunded", interrupted)
    unanswered = await gate.refund_unanswered(gone)
    if unanswered:
        log.warning("%d call(s) were interrupted by a restart: refunded", unanswered)
    if gate.sessions is not None:
        given_back = await gate.sessions.give_back_held(gone)
        if given_back:
            log.warning("%d session(s) had calls a restart interrupted: credited", given_back)
    bridged = await app[VOICE_BRIDGE].recover(gone)
    if bridged:
        log.warning("%d voice-bridge session(s) were cut by a restart: ended and settled", bridged)
    in_flight = await app[AI_CALLS].resume(gone)  # AI calls being watched or waiting to redial
    if in_flight:
        log.info("%d AI call(s) in flight were taken up again", in_flight)
    payouts = await app[DEPOSITS].take_up(gone)  # Lightning-address payouts cut short
    if payouts:
        log.info("%d deposit payout(s) under way were taken up", payouts)


async def _take_up_at_group_start(app: web.Application) -> None:
    """At a start with no other instance live (one instance, or all of them restarting),
    before any call is taken: what is recorded without its instance is settled (it can
    belong to no live call now)."""
    await app[DEPOSITS].resume()  # Lightning-address payouts settled but not started
    await app[AI_CALLS].sweep()  # confirmations past their deadline, settlements missing


async def _close_parts(app: web.Application) -> None:
    """At the stop: live calls hung up and settled, work under way finished, clients
    closed, the process pool shut."""
    gate = app[GATE]
    await app[VOICE_BRIDGE].close()
    await app[ESIGN].close()
    await app[AI_CALLS].close()
    await app[JOBS].close()
    await app[CALLBACKS].close()
    await app[DEPOSITS].wait_payouts()
    await app[REFUNDS].wait_payouts()
    if gate.sessions is not None:
        await gate.sessions.wait_closing()
    if gate.cashu is not None:
        await gate.cashu.aclose()
    await app[ENGINES].aclose()
    await app[HTTP].aclose()
    app[POOL].shutdown(wait=True, cancel_futures=True)


async def _fax_ctx(app: web.Application) -> AsyncIterator[None]:
    """The fax desk: sent faxes followed and settled, inbound numbers, leases, retention."""
    desk = app[FAXES]
    if app[ENGINES].available("fax"):
        await desk.start()
    yield
    await desk.close()


REWORK_SWEEP_S = 60  # how often expired free-retry windows are refunded
HOUR_S = 3600
CALLBACK_SWEEP_S = 15  # how often owed callbacks are looked for (besides the kick at a job's end)

# How often payments never paid are pruned (Settings.unpaid_retention_s after their
# invoice expired); the first run comes this long after start, once the settlements
# missed while down have been read.
UNPAID_PRUNE_EVERY_S = 300


# Gone instances whose work was taken up are forgotten after this long (their rows are
# what `satsgate status` shows of them).
GONE_INSTANCES_KEPT_S = 7 * 24 * HOUR_S


async def _prune_instances(store: Store) -> None:
    await store.instances.prune(int(time.time()) - GONE_INSTANCES_KEPT_S)


async def _prune_unpaid(store: Store, retention_s: int) -> None:
    pruned = await store.payments.prune_unpaid(int(time.time()) - retention_s)
    if pruned:
        log.info("pruned %d payment(s) never paid", pruned)


async def _background_ctx(app: web.Application) -> AsyncIterator[None]:
    gate = app[GATE]
    await gate.init_settlement_cursor()  # before the site listens and issues invoices
    settle_task = asyncio.create_task(gate.watch_settlements(), name="settlements")
    holds = gate.holds
    hold_task = asyncio.create_task(holds.watch(), name="holds") if holds is not None else None
    presence = app[PRESENCE]
    # The heartbeat: this instance's lease and duties, and the work of instances gone.
    events = app.get(CLUSTER_EVENTS)
    if events is not None:
        events.start()
    beat_task = asyncio.create_task(
        presence.run(functools.partial(_take_up_gone, app)), name="instance-heartbeat"
    )
    # Each job runs on one instance at a time: the one holding its duty (named by its id).
    scheduler = Scheduler(holds_duty=presence.holds_duty)
    _schedule_duties(app, scheduler)
    scheduler.start()
    app[STARTED_AT] = time.time()
    yield
    await scheduler.stop()  # the runs going end before what they use is closed
    for task in (settle_task, hold_task, beat_task):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if events is not None:
        await events.close()


def _schedule_duties(app: web.Application, scheduler: Scheduler) -> None:
    """The interval jobs: sweeps, expiries, retries and reconciliations, each run by the
    instance holding its duty (or by every instance, ``each_instance``)."""
    gate, refunds, files = app[GATE], app[REFUNDS], app[FILES]
    every = scheduler.every
    settings, store, now = app[SETTINGS], app[STORE], datetime.now(UTC)
    settings, store, now = app[SETTINGS], app[STORE], datetime.now(UTC)
    every(60, refunds.reconcile, id="refunds-reconcile")
    # Spends whose commit the store's connection cut, found committed: refunded. This
    # instance's own (it alone knows which answers were cut).
    every(15, gate.spender.refund_unserved_in_doubt, id="spends-in-doubt", each_instance=True)
    if app.get(CLUSTER_EVENTS) is not None:
        # Says handed over for this instance's calls whose announcement was lost.
        every(2, app[VOICE_BRIDGE].take_handed_over, id="bridge-says", each_instance=True)
    if gate.sessions is not None:
        # Payment sessions: idle ones closed and paid back, failed payouts retried.
        idle_s = settings.session_idle_timeout_s
        every(max(1, min(30, idle_s // 4)), gate.sessions.sweep, id="sessions-sweep")
    every(60, app[DEPOSITS].resume, id="deposits-resume")
    every(60, app[AI_CALLS].sweep, id="ai-calls-sweep")
    # Sent faxes nobody follows (their instance gone for good): followed to their end here.
    every(300, app[FAXES].follow_unsettled, id="faxes-follow")
    # The watches of this instance's AI calls (each instance watches the calls it serves).
    every(60, app[AI_CALLS].rewatch, id="ai-calls-watch", each_instance=True)
    every(HOUR_S, files.remove_older_than, 12 * HOUR_S, id="files-cleanup")
    every(
        UNPAID_PRUNE_EVERY_S, _prune_unpaid, store, settings.unpaid_retention_s, id="payments-prune"
    )
    every(HOUR_S, _prune_instances, store, id="instances-prune")
    # Held communications: refunded once unresolved for 24 hours.
    every(600, app[HELD_REQUESTS].expire, id="holds-expire")
    # Appeal payments not applied yet (the payer never reopened the page): one asks for its
    # held request's review; one that can buy nothing is refunded once (LNURL-withdraw).
    every(60, app[HELD_REQUESTS].refund_late_appeals, id="holds-late-appeals")
    # Free-retry windows past their deadline: refunded in full (the spec: within 15 min).
    if gate.spender.rework is not None:
        every(REWORK_SWEEP_S, gate.spender.rework.expire_due, id="rework-expire")
    # Message texts, transcripts, fax images and hold evidence (retention_rules.py).
    every(HOUR_S, retention.sweep, store.retention, settings.data_dir, id="retention-sweep")
    # BTC-pegged rates: once now, then hourly; without a price source the fallback stays.
    every(HOUR_S, app[RATES].refresh, app[HTTP], settings, id="rates-refresh", next_run_time=now,
          each_instance=True)  # fmt: skip
    if gate.cashu is not None:
        # Ecash: lost swap answers and melts settled with the mint, held ecash melted into
        # the node; first at start (a crash's leftovers: a swap the dead process sent is
        # restored before its payer retries), then on the interval.
        every(gate.cashu.config.melt_interval_s, gate.cashu.maintain, id="ecash-maintain",
              next_run_time=now)  # fmt: skip
    # SMS and calls whose status webhooks never came: asked again, calls settled.
    sent = deliveries.DeliveryEnv(store.deliveries, store.payments.get, refunds)
    every(300, deliveries.sweep, sent, app[ENGINES], id="deliveries-sweep")
    callbacks = app[CALLBACKS]  # owed deliveries, including those a restart interrupted
    every(CALLBACK_SWEEP_S, callbacks.deliver_due, id="callbacks-deliver", next_run_time=now)
    every(6 * HOUR_S, callbacks.prune, id="callbacks-prune")
    esign = app[ESIGN]  # pending e-signature requests whose webhook may be lost, due deliveries
    if esign.engines.available("esign"):
        every(esign.sweep_interval_s, esign.sweep, id="esign-sweep", next_run_time=now)


# -- routes ---------------------------------------------------------------------------------


def _add_routes(app: web.Application, settings: Settings, backend: LightningBackend) -> None:
    """Compose the faces: every route lives in its own package."""
    api.add_routes(app, backend)  # health, catalogs, files, LNURL-withdraw, dev
    # The free operations on their own paths, and /api/l402/{slug} (paid call, description,
    # and the free forms sharing a service's path), /api/m/{service}/{model}.
    operation_routes.add_routes(app, SERVICES, OPERATIONS)
    # Well-known documents, OpenAPI, llms.txt: priced at the app's rate book.
    discovery.add_routes(app, settings, backend, app[ENGINES], app[RATES])
    # Providers' webhooks (prediction platforms, Documenso), each verified by its provider.
    app.router.add_post("/api/webhooks/{kind}/{name}", provider_webhook)
    mcp.install(
        app,
        mcp_server,
        public_base_url=settings.public_base_url,
        max_body_bytes=settings.max_body_bytes,
        allowed_origins=settings.mcp_allowed_origins,
    )  # POST /api/mcp (JSON-RPC tools, paid with a paymentId)
    checkout.install(app, GATE)  # GET /checkout/<paymentId>
    # The voice bridge's media WebSocket and call-status callbacks (the provider's side).
    voice_bridge_routes.install(app, VOICE_BRIDGE)
    app.on_shutdown.append(_wake_waiting_calls)
    app.on_shutdown.append(_end_voice_bridges)


def _add_operator_routes(app: web.Application, settings: Settings) -> None:
    """/operator and /api/operator/ledger (behind the operator token), /recover and
    /recover/payout (behind a refund's own secret). Free; never an invoice."""
    app[OPERATOR] = OperatorAccess(
        settings.data_dir, https=settings.public_base_url.startswith("https://")
    )
    operator_routes.install(app, operator_routes.Keys(SETTINGS, STORE, ENGINES, REFUNDS))
    # Held communications and the do-not-contact list (operator), /appeal (payers).
    operator_held.install(app, holds_key=HELD_REQUESTS, store_key=STORE)
    appeal.install(app, HELD_REQUESTS)


async def _wake_waiting_calls(app: web.Application) -> None:
    """Shutdown: long polls (a payment's ?wait=) answer at once."""
    env = app.get(OPERATION_ENV)
    if env is not None:
        env.closing.set()


async def _end_voice_bridges(app: web.Application) -> None:
    """Shutdown: live voice-bridge calls are hung up and settled, which also closes their
    media WebSockets (the server would otherwise wait for them)."""
    sessions = app.get(VOICE_BRIDGE)
    if sessions is not None:
        await sessions.close()


def mcp_server(
    app: web.Application,
    *,
    services: Sequence[ServiceSpec[Any]] | None = None,
    planned: PlannedSource | None = None,
) -> McpServer:
    """The MCP server over the app's one OperationEnv (the free operations' too, once it
    exists); ``services`` and ``planned`` narrow it (tests)."""
    env = app[OPERATION_ENV]
    if services is not None:
        env = replace(env, paid=paid_tools(tuple(services)), by_slug={s.slug: s for s in services})
    if planned is not None:
        env = replace(env, planned=planned)  # the same closing event: shutdown wakes both
    return McpServer(env)


async def provider_webhook(request: web.Request) -> web.Response:
    """A provider's webhook: a prediction platform's (satsgate.engines.providers.
    predictions) or a messaging/call/fax provider's delivery reports
    (satsgate.engines.delivery, applied by satsgate.services.comms.deliveries). The provider
    verifies its signature; 404 for a provider that takes none."""
    name = request.match_info["name"]
    provider = request.app[ENGINES].provider(name)
    if getattr(provider, "webhook_kind", None) != request.match_info["kind"]:
        return web.Response(status=404)
    receive_events = getattr(provider, "receive_events", None)
    if receive_events is not None:
        body = await request.read()
        # The URL the provider requested: Twilio signs it, and behind a proxy the
        # request's own URL is not the public one.
        settings = request.app[SETTINGS]
        url = settings.public_base_url.rstrip("/") + request.path_qs
        own = settings.own_base_url + request.path_qs if settings.instance_base_url else ""
        headers = {k.lower(): v for k, v in request.headers.items()}
        events = await receive_events(WebhookRequest(url, request.method, headers, body, own))
        if 200 <= events.status < 300:
            store = request.app[STORE]
            env = deliveries.DeliveryEnv(store.deliveries, store.payments.get, request.app[REFUNDS])
            await deliveries.apply_events(env, name, events)
        return web.Response(
            status=events.status, body=events.body, content_type=events.content_type
        )
    receive = getattr(provider, "receive_webhook", None)
    if (
        provider is None
        or receive is None
        or (getattr(provider, "webhook_kind", None) != request.match_info["kind"])
    ):
        return web.Response(status=404)
    body = await request.read()
    status = await receive({k.lower(): v for k, v in request.headers.items()}, body)
    return web.Response(status=int(status))
