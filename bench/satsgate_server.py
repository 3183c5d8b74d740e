"""satsgate as the bench serves it: the real app (dev node) plus one trivial paid route.

    python bench/satsgate_server.py --data-dir /tmp/x --port 8402 [--cprofile out.prof]
        [--store-url postgresql://...]

The app is built with ``create_app`` exactly as the service builds it; the bench
adds ``POST /bench/noop``, a paid call whose handler does no work, so that
verify + atomic spend + dispatch can be measured on their own; ``GET /bench/hello``
(the baseline's handler inside satsgate's app, for diagnosis); and ``GET
/bench/stats``, the submit -> result times of the gate's CPU pool (wrapped at
start-up, see ``TimedPool``) since the last call. Prints
``READY <url>`` once listening; stops on SIGTERM/SIGINT or when stdin closes.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import logging
import sys
import time
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import experiments
from _serve import serve  # bench/ is on sys.path: run as a script
from aiohttp import web
from experiments import dev_backend, pool_attribute, pool_holder

from satsgate.payments.http import handle_paid_call
from satsgate.services.base import Params, ServiceContext, ServiceResult, ServiceSpec

try:  # satsgate.config.settings first: see experiments.py
    from satsgate.config.settings import Settings
    from satsgate.server.app import GATE, create_app
    from satsgate.server.runner import freeze_startup_heap
except ImportError:  # a tree before the root was grouped into packages (ab.py, older trees)
    from satsgate.app import GATE, create_app  # type: ignore[import-not-found,no-redef]
    from satsgate.runner import freeze_startup_heap  # type: ignore[import-not-found,no-redef]

    from satsgate.config import Settings  # type: ignore[attr-defined,no-redef]

try:
    from satsgate.engines.cpu_jobs import run_with_time_limit
except ImportError:  # a tree before the engines package (ab.py runs this file on older trees)
    from satsgate.services.cpu_jobs import run_with_time_limit  # type: ignore[import-not-found,no-redef]

NOOP_SLUG = "bench-noop"
NOOP_PRICE_MSAT = 1000  # 1 sat


class NoopParams(Params):
    """No fields: the body is ``{}``."""


async def _noop_handler(ctx: ServiceContext, params: NoopParams) -> ServiceResult:
    return ServiceResult({"ok": True})


def _noop_price(_params: object, _book: object = None) -> int:
    """1 sat whatever the request (the book is optional: older trees pass none)."""
    return NOOP_PRICE_MSAT


NOOP_SPEC: ServiceSpec[Any] = ServiceSpec(
    slug=NOOP_SLUG,
    tool_name="bench_noop",
    category="utility",
    title="Bench no-op",
    description="A paid call that does nothing (benchmark only).",
    params=NoopParams,
    price_msat=_noop_price,
    handler=_noop_handler,
    max_body_bytes=1024,
)


async def bench_noop(request: web.Request) -> web.StreamResponse:
    # app[GATE] exists only after start-up, so it is looked up per request.
    return await handle_paid_call(request, request.app[GATE], NOOP_SPEC)


class TimedPool(Executor):
    """Wraps the gate's CPU process pool: records each job's submit -> result time.

    That is what a paid render-card call waits for its image (render + pickling + IPC),
    measured on the very calls wrk makes; read (and reset) with ``GET /bench/stats``.
    """

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.samples_ns: dict[str, list[int]] = {}  # by the job function's name

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        job = args[1] if fn is run_with_time_limit else fn  # (limit_s, job, *args)
        samples = self.samples_ns.setdefault(getattr(job, "__name__", "?"), [])
        t0 = time.perf_counter_ns()
        future = self.inner.submit(fn, *args, **kwargs)
        future.add_done_callback(lambda _: samples.append(time.perf_counter_ns() - t0))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)


POOL = web.AppKey("bench_pool", TimedPool)


async def _time_pool(app: web.Application) -> None:
    # The gate exists now: cleanup contexts run before on_startup handlers added later.
    holder = pool_holder(app)
    name = pool_attribute(holder)
    app[POOL] = timed = TimedPool(getattr(holder, name))
    setattr(holder, name, timed)


async def bench_stats(request: web.Request) -> web.Response:
    pool = request.app[POOL]
    samples, pool.samples_ns = pool.samples_ns, {}
    return web.json_response(
        {"pool_ms": {name: [round(ns / 1e6, 3) for ns in v] for name, v in samples.items()}}
    )


async def bench_hello(request: web.Request) -> web.Response:
    """The baseline's handler inside satsgate's app (middleware, router): a diagnostic."""
    return web.json_response({"status": "ok"})


async def _freeze_heap(app: web.Application) -> None:
    freeze_startup_heap()


def build_app(settings: Settings) -> web.Application:
    app = create_app(settings, dev_backend(settings.data_dir))
    app.router.add_post("/bench/noop", bench_noop)
    app.router.add_get("/bench/hello", bench_hello)
    app.router.add_get("/bench/stats", bench_stats)
    app.on_startup.append(_time_pool)
    app.on_startup.append(_freeze_heap)  # last: after every start-up step, as `satsgate serve`
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument(
        "--store-url", default="", help="the store on PostgreSQL (default: the SQLite file)"
    )
    parser.add_argument("--cprofile", type=Path, help="profile the whole run, write pstats here")
    parser.add_argument(
        "--experiment",
        action="append",
        default=[],
        choices=experiments.CHOICES,
        help="apply a proposed change in this process (see experiments.py)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # The throughput bench is one client: the per-client challenge limit, and the node's
    # cap on unpaid invoices outstanding (each 402 makes two: the call's and the session
    # deposit's; a 402 scenario makes thousands a second), would answer its 402 scenarios
    # with 429s (bench/availability.py measures the limits). Older trees (ab.py) lack
    # some of these settings.
    limits: dict[str, Any] = {"challenge_rate_per_min": 0, "max_unpaid_challenges": 0}
    known = {f.name for f in dataclasses.fields(Settings)}
    store: dict[str, Any] = {"store_url": args.store_url} if args.store_url else {}
    settings = Settings(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        **{k: v for k, v in limits.items() if k in known},
        **store,
    )
    print(
        "bench server: limits off for the bench's one address: "
        + ", ".join(f"{k}=0" for k in limits if k in known),
        file=sys.stderr,
        flush=True,
    )
    app = build_app(settings)
    experiments.apply(app, args.experiment)
    profiler = cProfile.Profile() if args.cprofile else None
    if profiler is not None:
        profiler.enable()
    try:
        serve(app, args.host, args.port)
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(args.cprofile))


if __name__ == "__main__":
    main()
