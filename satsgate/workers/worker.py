"""``satsgate worker``: a process that takes CPU jobs from the store's queue in
PostgreSQL, runs them with the same engine functions, time limits and output bounds as
the gateway's own pool, and writes their outcomes back (satsgate/store/cpu_queue.py).

- Jobs run in a spawned process pool of ``--concurrency`` processes (each exits with the
  worker, even on SIGKILL: satsgate.procguard), under the job's time limit (SIGALRM in
  the process, as in the gateway's pool). A child decodes the job, runs it and encodes
  its outcome itself: the worker's own loop only moves bytes.
- The lanes are the pool's: long jobs hold at most ``concurrency - 1`` slots, so a quick
  job (a card, an image conversion) always finds one. The claim order is fair between
  payers across all workers (the queue's claim).
- Every ``HEARTBEAT_S`` the worker renews its row in ``cpu_workers`` and the lease of
  each job it runs; killed, it stops renewing, and after ``LEASE_S`` its jobs are
  claimed again by another worker (or failed by their gateway when their time is up).
- A job is claimed when a ``satsgate_cpu_queued`` notification says one was queued, or
  at the latest ``POLL_S`` after the last look (a lost lease, a missed notification).
- SIGTERM or SIGINT: no new claims; the jobs under way finish (within their limits) and
  are written back; then the worker leaves the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import multiprocessing
import os
import secrets
import signal
import socket
from collections.abc import Collection
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from satsgate.config.settings import Settings, output_caps
from satsgate.engines.cpu_jobs import _GRACE_S, CpuTimeLimitExceeded, run_with_time_limit
from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode
from satsgate.procguard import die_with_parent
from satsgate.store.cpu_queue import QUEUED_CHANNEL, TIMEOUT, ClaimedJob, CpuQueueRepository
from satsgate.store.pg_listen import notifications
from satsgate.store.postgres import PostgresDatabase
from satsgate.workers import codec
from satsgate.workers.gateway import MAX_ATTEMPTS

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
# A job whose worker has not renewed its lease for this long is claimed again.
LEASE_S = 4.0
POLL_S = 1.0
# Ended jobs and silent workers are forgotten after this long (each worker sweeps).
KEEP_S = 3600.0
_SWEEP_EVERY_S = 60.0


@dataclass(frozen=True)
class WorkerConfig:
    store_url: str
    concurrency: int = 2
    # Engine names this worker takes (codec.ENGINE_NAMES); None: every job.
    engines: frozenset[str] | None = None
    # The largest outcome kept: the largest output cap of the settings (and a margin for
    # what wraps it); a bigger one fails the job (INVALID_INPUT), as an oversized output
    # file does at the gateway.
    max_outcome_bytes: int = 512 * 1024 * 1024 + 1024 * 1024


def parse_engines(text: str | None) -> frozenset[str] | None:
    """``--engines ocr,tts``: the names, checked (ValueError names the known ones)."""
    if not text:
        return None
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = names - codec.ENGINE_NAMES
    if unknown:
        raise ValueError(
            f"unknown engines: {', '.join(sorted(unknown))} (known: "
            f"{', '.join(sorted(codec.ENGINE_NAMES))})"
        )
    return names


# -- in a pool process ------------------------------------------------------------------


def _child_start(parent_pid: int, modules: Collection[str]) -> None:
    """Pool process initializer: exit with the worker; import the engines' modules once
    (so the first job does not pay for it)."""
    die_with_parent(parent_pid)
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # an engine not installed here: its jobs fail, not all
            log.warning("cannot import %s: %s", module, exc)


def _child_ready() -> int:
    return os.getpid()


def run_encoded(
    ref: str, args: bytes, limit_s: float, max_outcome_bytes: int
) -> tuple[str, bytes | None, str | None]:
    """In a pool process: the job ``ref(*args)`` within ``limit_s``, as (status, outcome,
    error) for :meth:`CpuQueueRepository.finish`."""
    try:
        fn = codec.resolve(ref)
        values = codec.loads(args)
    except Exception as exc:
        log.warning("a job this worker cannot run: %s", exc)
        failure = EngineError(ErrorCode.SERVICE_ERROR, "This node's worker cannot run the job.")
        return "error", codec.error_outcome(failure), None
    try:
        value = run_with_time_limit(limit_s, fn, *values)
    except CpuTimeLimitExceeded:
        return "failed", None, TIMEOUT
    except Exception as exc:
        return "error", codec.error_outcome(exc), None
    outcome = codec.value_outcome(value)
    if len(outcome) > max_outcome_bytes:
        too_big = EngineError(
            ErrorCode.INVALID_INPUT,
            f"The output is larger than this node keeps ({max_outcome_bytes} bytes).",
        )
        return "error", codec.error_outcome(too_big), None
    return "done", outcome, None


# -- the worker ---------------------------------------------------------------------------


class Worker:
    """One ``satsgate worker`` process (see the module docstring)."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.name = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.concurrency = max(1, config.concurrency)
        self._long_max = max(1, self.concurrency - 1)
        # Its queue's work runs on the threads; one lane serves its few single statements
        # (the heartbeat, the worker's row), so it holds no connections it does not use.
        self.db = PostgresDatabase(
            config.store_url, pool_size=min(8, self.concurrency + 3), loop_lanes=1
        )
        self.queue = CpuQueueRepository(self.db)
        self.pool = self._new_pool()
        self._running = 0
        self._running_long = 0
        self._done = 0
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._jobs: set[asyncio.Task[None]] = set()

    def _modules(self) -> list[str]:
        wanted = self.config.engines
        return [m for m, e in codec.ENGINE_OF_MODULE.items() if wanted is None or e in wanted]

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.concurrency,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_child_start,
            initargs=(os.getpid(), self._modules()),
        )

    def stop(self) -> None:
        """Take no new job; the ones under way finish, then :meth:`run` returns."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        await self.db.open()  # migrates a new database: a worker may start first
        background: list[asyncio.Task[None]] = []
        try:
            await self._warm()
            await self._heartbeat()
            background = [
                asyncio.create_task(self._listen(), name="worker-listen"),
                asyncio.create_task(self._heartbeats(), name="worker-heartbeat"),
                asyncio.create_task(self._sweeps(), name="worker-sweep"),
            ]
            log.info(
                "satsgate worker %s: %d slots, engines %s",
                self.name,
                self.concurrency,
                ",".join(sorted(self.config.engines)) if self.config.engines else "all",
            )
            await self._claim_loop()
            if self._jobs:
                await asyncio.gather(*self._jobs, return_exceptions=True)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self.queue.unregister(self.name)
            self.pool.shutdown(wait=False, cancel_futures=True)
            await self.db.close()

    async def _warm(self) -> None:
        """Start every pool process (and its imports) before taking the first job."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(self.pool, _child_ready) for _ in range(self.concurrency))
        )

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            while self._running < self.concurrency and not self._stopping.is_set():
                try:
                    job = await self.queue.claim(
                        self.name,
                        sorted(self.config.engines) if self.config.engines else None,
                        long_ok=self._running_long < self._long_max,
                        lease_s=LEASE_S,
                        max_attempts=MAX_ATTEMPTS,
                    )
                except Exception as exc:  # the store away: look again after the poll
                    log.warning("claiming a job failed: %s", exc)
                    break
                if job is None:
                    break
                self._begin(job)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)

    def _begin(self, job: ClaimedJob) -> None:
        self._running += 1
        if not job.quick:
            self._running_long += 1
        task = asyncio.create_task(self._run_job(job), name=f"cpu-job-{job.id}")
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def _run_job(self, job: ClaimedJob) -> None:
        loop = asyncio.get_running_loop()
        pool = self.pool
        work = loop.run_in_executor(
            pool,
            run_encoded,
            job.fn,
            job.args,
            job.limit_s,
            self.config.max_outcome_bytes,
        )
        try:
            try:
                status, outcome, error = await asyncio.wait_for(
                    asyncio.shield(work), job.limit_s + _GRACE_S
                )
            except TimeoutError:  # stuck inside one C call that missed the signal
                status, outcome, error = "failed", None, TIMEOUT
            except BrokenProcessPool as exc:  # a pool process died (the job crashed it)
                log.error("CPU job %s broke the worker's pool: %s", job.id, exc)
                if self.pool is pool:  # the first job to see it replaces the pool
                    pool.shutdown(wait=False, cancel_futures=True)
                    self.pool = self._new_pool()
                failure = EngineError(ErrorCode.SERVICE_ERROR, "The engine failed on this input.")
                status, outcome, error = "error", codec.error_outcome(failure), None
            await self._finish(job, status, outcome, error)
            # The slot stays taken until the pool's process is free again.
            with contextlib.suppress(Exception):
                await work
        finally:
            self._running -= 1
            if not job.quick:
                self._running_long -= 1
            self._done += 1
            self._wake.set()

    async def _finish(
        self, job: ClaimedJob, status: str, outcome: bytes | None, error: str | None
    ) -> None:
        for attempt in range(5):
            try:
                kept = await self.queue.finish(job, self.name, status, outcome, error)
            except Exception as exc:  # the store away: a few tries, then the lease decides
                log.warning("writing CPU job %s back failed: %s", job.id, exc)
                await asyncio.sleep(0.2 * 2**attempt)
                continue
            if not kept:
                log.info("CPU job %s: outcome not kept (failed or taken over meanwhile)", job.id)
            return

    async def _heartbeat(self) -> None:
        engines = ",".join(sorted(self.config.engines)) if self.config.engines else "all"
        await self.queue.heartbeat(
            self.name,
            host=socket.gethostname(),
            pid=os.getpid(),
            engines=engines,
            concurrency=self.concurrency,
            running=self._running,
            done=self._done,
            lease_s=LEASE_S,
        )

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self._heartbeat()
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)

    async def _sweeps(self) -> None:
        while True:
            try:
                await self.queue.sweep(KEEP_S)
            except Exception as exc:
                log.warning("sweeping the CPU queue failed: %s", exc)
            await asyncio.sleep(_SWEEP_EVERY_S)

    async def _listen(self) -> None:
        wanted = self.config.engines
        async for _channel, payload in notifications(self.config.store_url, [QUEUED_CHANNEL]):
            if wanted is None or not payload or payload in wanted:
                self._wake.set()


async def run_worker(config: WorkerConfig) -> None:
    """Run a worker until SIGTERM or SIGINT."""
    worker = Worker(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, worker.stop)
    await worker.run()


def worker_config(settings: Settings, concurrency: int | None, engines: str | None) -> WorkerConfig:
    """The worker's configuration from the settings (the store URL, the output caps) and
    its options; ValueError when it cannot work."""
    if not settings.store_url:
        raise ValueError("satsgate worker needs the store in PostgreSQL (--store-url)")
    caps = [*output_caps(settings).values(), *settings.output_caps_by_service.values()]
    return WorkerConfig(
        store_url=settings.store_url,
        concurrency=concurrency or settings.cpu_workers,
        engines=parse_engines(engines),
        max_outcome_bytes=max(caps) + 1024 * 1024,
    )
