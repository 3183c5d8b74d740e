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
leave a worker for the 30 ms card that comes next.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from types import FrameType
from typing import Any, TypeVar

from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode

R = TypeVar("R")

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


class CpuRunner:
    """Runs CPU-bound engine work in the process pool within the configured time limit;
    a job past it raises EngineError TIMEOUT, which the gate refunds. One runner per pool:
    its lanes count that pool's workers."""

    def __init__(self, pool: Executor, limit_s: float, workers: int = 2) -> None:
        self.pool = pool
        self.limit_s = limit_s
        self.workers = workers
        self._long_lane: asyncio.Semaphore | None = None  # made in the loop that uses it

    async def __call__(
        self, fn: Callable[..., R], *args: Any, quick: bool = False, limit_s: float | None = None
    ) -> R:
        """``fn(*args)`` in the pool. ``quick``: short, bounded work that may use any
        worker; other work waits for a place in the long lane. ``limit_s``: a tighter
        time limit than the configured one for this call."""
        limit = min(self.limit_s, limit_s) if limit_s is not None else self.limit_s
        try:
            if quick:
                return await run_cpu_job(self.pool, limit, fn, *args)
            if self._long_lane is None:
                self._long_lane = asyncio.Semaphore(max(1, self.workers - 1))
            async with self._long_lane:
                return await run_cpu_job(self.pool, limit, fn, *args)
        except CpuTimeLimitExceeded:
            raise EngineError(
                ErrorCode.TIMEOUT, f"The engine did not finish within {limit:g} s and was stopped."
            ) from None
