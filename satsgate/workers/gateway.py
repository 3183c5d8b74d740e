"""The gateway's side of the worker queue: :class:`QueueCpuRunner`, a CpuRunner that
sends each CPU job to the PostgreSQL queue instead of the in-process pool
(``[workers] mode = "queue"``).

A call queues its job (:mod:`satsgate.store.cpu_queue`) and waits on a future. The
future is settled by the job's outcome, read when the worker's ``satsgate_cpu_done``
notification arrives (one LISTEN connection per gateway,
:mod:`satsgate.store.pg_listen`), or by the slow poll that runs beside it (every
``POLL_S``: it catches an outcome whose notification was missed, and fails the jobs
whose time is up). The outcome is the function's value, or the exception it raised,
raised again here as the pool would; a job past its time ends as EngineError TIMEOUT,
which the gate refunds, exactly once: the fail is a conditional UPDATE, and a worker's
late outcome after it changes nothing.

Time bounds: a job may wait for a worker ``queue_wait_s`` (the configured CPU time
limit unless ``[workers] queue_wait_s`` says otherwise) and run within its own limit; the
gateway gives up ``queue_wait_s + limit + grace`` after queueing it in any case. The
lanes and the fairness between payers are the workers' (their claim order and slots).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from satsgate.engines.cpu_jobs import _GRACE_S, PAYER, CpuRunner
from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode
from satsgate.store.cpu_queue import (
    DONE_CHANNEL,
    LOST,
    TIMEOUT,
    UNCLAIMED,
    CpuQueueRepository,
    JobEnd,
)
from satsgate.workers import codec

R = TypeVar("R")

log = logging.getLogger(__name__)

# The slow poll beside the notifications: outcomes whose notification was missed, and
# jobs whose time is up, are seen within this long.
POLL_S = 1.0
# Notified ids remembered in case their enqueue has not returned yet (others' are too).
_EARLY_KEPT = 1024
# How often one job is claimed at most (a job whose workers keep dying with it is failed).
MAX_ATTEMPTS = 3


@dataclass
class _Pending:
    future: asyncio.Future[JobEnd]
    limit_s: float


class QueueCpuRunner(CpuRunner):
    """Runs CPU-bound engine work on ``satsgate worker`` processes through the store's
    queue (see the module docstring). ``start`` before the first job, ``close`` at the
    end (:meth:`cleanup_ctx` does both for an app)."""

    def __init__(
        self,
        pool: Executor,
        limit_s: float,
        queue: CpuQueueRepository,
        store_url: str,
        queue_wait_s: float | None = None,
    ) -> None:
        super().__init__(pool, limit_s)
        self.queue = queue
        self.store_url = store_url
        self.queue_wait_s = limit_s if queue_wait_s is None else queue_wait_s
        self._pending: dict[int, _Pending] = {}
        # Outcomes notified for ids not (yet) waited for here, newest last.
        self._early: dict[int, None] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = asyncio.Event()

    async def __call__(
        self, fn: Callable[..., R], *args: Any, quick: bool = False, limit_s: float | None = None
    ) -> R:
        """``fn(*args)`` on a worker, within the time limit (EngineError TIMEOUT past it,
        or when no worker took the job in time)."""
        limit = min(self.limit_s, limit_s) if limit_s is not None else self.limit_s
        ref = codec.function_ref(fn)
        codec.check_portable(args)
        payload = await asyncio.to_thread(codec.dumps, args)  # a big input: off the loop
        job = await self.queue.enqueue(
            engine=codec.engine_of(ref),
            payer=PAYER.get(),
            quick=quick,
            fn=ref,
            args=payload,
            limit_s=limit,
            wait_s=self.queue_wait_s,
            grace_s=_GRACE_S,
        )
        pending = _Pending(asyncio.get_running_loop().create_future(), limit)
        self._pending[job.id] = pending
        if self._early.pop(job.id, None) is not None:  # it ended before we got here
            self._spawn(self._collect([job.id]))
        try:
            # The poll fails the job at its deadline; this bound is only a backstop.
            end = await asyncio.wait_for(
                asyncio.shield(pending.future),
                self.queue_wait_s + limit + _GRACE_S + 10 * POLL_S,
            )
        except BaseException as exc:
            # Cancelled (the caller went away), or the poll could not reach the store: the
            # job is called off, so that no worker runs it for nobody.
            if not pending.future.done():
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.queue.cancel(job.id))
            if isinstance(exc, TimeoutError):
                raise EngineError(
                    ErrorCode.TIMEOUT, f"The engine did not finish within {limit:g} s."
                ) from None
            raise
        finally:
            self._pending.pop(job.id, None)
        result: R = await asyncio.to_thread(self._outcome, end, limit)
        return result

    def _outcome(self, end: JobEnd, limit: float) -> Any:
        if end.status in ("done", "error") and end.outcome is not None:
            return codec.open_outcome(end.outcome)
        if end.error == UNCLAIMED:
            message = f"No worker took the job within {self.queue_wait_s:g} s; it was not run."
        elif end.error == LOST:
            message = "The workers running the job stopped; it was not finished."
        elif end.error == TIMEOUT:
            message = f"The engine did not finish within {limit:g} s and was stopped."
        else:
            message = "The job was stopped before it finished."
        raise EngineError(ErrorCode.TIMEOUT, message)

    @property
    def waiting(self) -> int:
        """Jobs of this gateway not ended yet (waiting for a worker or running)."""
        return len(self._pending)

    # -- the listener and the poll -------------------------------------------------------

    async def start(self) -> None:
        """Listen for outcomes and start the poll; returns once listening (or after a few
        seconds without: the poll covers until the listener connects)."""
        self._tasks = [
            asyncio.create_task(self._listen(), name="cpu-queue-listen"),
            asyncio.create_task(self._poll(), name="cpu-queue-poll"),
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), 5)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def cleanup_ctx(self, app: object) -> AsyncIterator[None]:
        """For ``app.cleanup_ctx``, after the store's own."""
        await self.start()
        yield
        await self.close()

    async def _listen(self) -> None:
        from satsgate.store.pg_listen import notifications  # psycopg: only when asked for

        async for channel, payload in notifications(self.store_url, [DONE_CHANNEL]):
            if channel == "":  # (re)connected: an outcome may have been missed
                self._listening.set()
                self._spawn(self._collect(list(self._pending)))
            elif payload.isdigit():
                job_id = int(payload)
                if job_id in self._pending:
                    self._spawn(self._collect([job_id]))
                else:  # maybe one of ours whose enqueue has not returned yet
                    self._early[job_id] = None
                    while len(self._early) > _EARLY_KEPT:
                        del self._early[next(iter(self._early))]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.append(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("reading a CPU job's outcome failed: %s", task.exception())

    async def _collect(self, ids: list[int]) -> None:
        if not ids:
            return
        for end in await self.queue.collect(ids):
            pending = self._pending.get(end.id)
            if pending is not None and not pending.future.done():
                pending.future.set_result(end)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            ids = list(self._pending)
            if not ids:
                continue
            try:
                expired = await self.queue.expire(ids, MAX_ATTEMPTS)
                for job_id, _reason in expired.items():
                    log.warning("CPU job %s failed at the gateway: %s", job_id, _reason)
                await self._collect(ids)
            except Exception as exc:  # the store away: the next round tries again
                log.warning("polling the CPU queue failed: %s", exc)
