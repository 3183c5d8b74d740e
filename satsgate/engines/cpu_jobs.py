"""CPU-bound engine work in the process pool, with a time limit.

A render or PDF job that never ends (a pathological HTML layout, a huge page
count) would otherwise hold one of the pool's few workers for good and leave its
paid call waiting forever. Each job is run under a SIGALRM timer inside the
worker: when it fires, the job raises in the worker and unwinds, the worker
stays usable, and the caller gets CpuTimeLimitExceeded (a service's
``ctx.run_cpu`` makes it ``EngineError("TIMEOUT")``, which the gate refunds).
A job stuck inside one long C call sees the signal only when that call returns;
for that case the caller stops waiting a grace period later (the worker then
stays busy until the call ends).

Two lanes share the pool, so that long work cannot starve short work: a job marked
``quick`` (a card, an image conversion: bounded and short) may take any worker, every
other job may hold at most ``workers - 1`` of them at once. Two long renders therefore
leave a worker for the short card that comes next.

Jobs waiting for a worker are served fairly between payers: the runner hands the pool at
most one job per worker, and a worker that comes free goes to the waiting payer served
least recently (a payer not served since it began waiting goes first; ties in order of
arrival). One payer's twenty queued renders therefore hold up another payer's single
job by at most one of theirs, per worker. The payer is :data:`PAYER` in the job's
context: the client address (an IPv6 client's /64) the rate limiter keys on, which the
HTTP edge sets for the paid routes (satsgate/edge/ratelimit.py); a job started elsewhere
(a job resumed after a restart) is the anonymous payer "".
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from contextvars import ContextVar
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode

R = TypeVar("R")

# Who a CPU job is done for (see the module docstring); "" when nobody said.
PAYER: ContextVar[str] = ContextVar("satsgate_cpu_payer", default="")

# How much longer than the limit the caller waits for a job whose worker missed the signal.
_GRACE_S = 10.0


class CpuTimeLimitExceeded(BaseException):
    """Raised inside the worker when the job's time limit passes.

    A BaseException, like KeyboardInterrupt, so that an engine's own ``except
    Exception`` cannot swallow it and carry on past the limit.
    """


def _expired(signum: int, frame: FrameType | None) -> None:
    raise CpuTimeLimitExceeded


def run_with_time_limit(limit_s: float, fn: Callable[..., R], *args: Any) -> R:
    """In a pool worker: ``fn(*args)``, interrupted after ``limit_s`` seconds.

    The timer needs the process's main thread, where a process pool runs its jobs;
    elsewhere (a thread pool) the job runs without it.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


async def run_cpu_job(pool: Executor, limit_s: float, fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` in ``pool`` within ``limit_s`` seconds; raises CpuTimeLimitExceeded."""
    job = asyncio.get_running_loop().run_in_executor(pool, run_with_time_limit, limit_s, fn, *args)
    try:
        return await asyncio.wait_for(job, limit_s + _GRACE_S)
    except TimeoutError:
        raise CpuTimeLimitExceeded from None


@dataclass
class _Waiting:
    quick: bool
    granted: asyncio.Future[None]


class CpuRunner:
    """Runs CPU-bound engine work in the process pool within the configured time limit;
    a job past it raises EngineError TIMEOUT, which the gate refunds. One runner per pool:
    it counts that pool's workers, keeps the lanes, and queues what waits by payer."""

    def __init__(self, pool: Executor, limit_s: float, workers: int = 2) -> None:
        self.pool = pool
        self.limit_s = limit_s
        self.workers = max(1, workers)
        self._long_max = max(1, self.workers - 1)
        self._running = 0
        self._running_long = 0
        # Waiting jobs by payer; each payer with work here (waiting or running): how many
        # jobs, and when it was last served (its turn; -1: not yet).
        self._waiting: dict[str, deque[_Waiting]] = {}
        self._jobs: dict[str, int] = {}
        self._turn: dict[str, int] = {}
        self._turns = itertools.count()

    async def __call__(
        self, fn: Callable[..., R], *args: Any, quick: bool = False, limit_s: float | None = None
    ) -> R:
        """``fn(*args)`` in the pool. ``quick``: short, bounded work that may use any
        worker; other work waits for a place in the long lane. ``limit_s``: a tighter
        time limit than the configured one for this call. Waits for a worker in the
        payer's turn (:data:`PAYER`)."""
        limit = min(self.limit_s, limit_s) if limit_s is not None else self.limit_s
        payer = PAYER.get()
        await self._admit(payer, quick)
        try:
            return await run_cpu_job(self.pool, limit, fn, *args)
        except CpuTimeLimitExceeded:
            raise EngineError(
                ErrorCode.TIMEOUT, f"The engine did not finish within {limit:g} s and was stopped."
            ) from None
        finally:
            self._release(payer, quick)

    @property
    def waiting(self) -> int:
        """Jobs waiting for a worker."""
        return sum(len(queue) for queue in self._waiting.values())

    async def _admit(self, payer: str, quick: bool) -> None:
        entry = _Waiting(quick, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(payer, deque()).append(entry)
        self._jobs[payer] = self._jobs.get(payer, 0) + 1
        self._turn.setdefault(payer, -1)  # new here: before everyone already served
        self._dispatch()
        try:
            await entry.granted
        except asyncio.CancelledError:
            if entry.granted.done() and not entry.granted.cancelled():
                self._release(payer, quick)  # granted, then cancelled before it ran
            else:
                self._unqueue(payer, entry)
                self._done(payer)
            raise

    def _eligible(self, entry: _Waiting) -> bool:
        return entry.quick or self._running_long < self._long_max

    def _dispatch(self) -> None:
        """Hand free workers to the waiting payers, least recently served first."""
        while self._running < self.workers and self._waiting:
            chosen: tuple[str, _Waiting] | None = None
            for payer in sorted(self._waiting, key=self._turn.__getitem__):  # stable: ties
                # go in order of arrival
                entry = next((e for e in self._waiting[payer] if self._eligible(e)), None)
                if entry is not None:
                    chosen = payer, entry
                    break
            if chosen is None:
                return  # only long work waits, and the long lane is full
            payer, entry = chosen
            self._unqueue(payer, entry)
            self._turn[payer] = next(self._turns)
            self._running += 1
            if not entry.quick:
                self._running_long += 1
            entry.granted.set_result(None)

    def _unqueue(self, payer: str, entry: _Waiting) -> None:
        queue = self._waiting[payer]
        queue.remove(entry)
        if not queue:
            del self._waiting[payer]

    def _done(self, payer: str) -> None:
        """One job of ``payer`` left (ran or gave up); a payer with none left is forgotten."""
        self._jobs[payer] -= 1
        if not self._jobs[payer]:
            del self._jobs[payer], self._turn[payer]

    def _release(self, payer: str, quick: bool) -> None:
        self._running -= 1
        if not quick:
            self._running_long -= 1
        self._done(payer)
        self._dispatch()
