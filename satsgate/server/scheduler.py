"""The app's interval jobs (refund reconciliation, sweeps, clean-ups) on APScheduler.

A run is one at a time and a missed run is not repeated. With ``holds_duty`` (several
instances on one store: satsgate.cluster.presence), a job runs only on the instance that
holds its duty (named by its id), unless it is marked ``each_instance`` (what every
instance keeps in its own memory, such as the rate book). At the stop, the coroutine
runs still going are cancelled and waited for before the resources they use are
closed: a run cancelled by the stop is no failure (logged at debug), while a run that
raises is still logged by the scheduler as an error, with its traceback. A plain
function runs in the scheduler's thread pool, as APScheduler runs it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = logging.getLogger(__name__)


# (a duty's name) -> whether this instance runs it now
HoldsDuty = Callable[[str], Awaitable[bool]]


class Scheduler:
    def __init__(self, holds_duty: HoldsDuty | None = None) -> None:
        self._holds_duty = holds_duty
        self._scheduler = AsyncIOScheduler()
        self._running: set[asyncio.Task[Any]] = set()
        self._stopping = False

    def every(
        self,
        seconds: float,
        job: Callable[..., object],
        *args: Any,
        each_instance: bool = False,
        **kw: Any,
    ) -> None:
        """``job(*args)`` every ``seconds``; one run at a time, missed runs not repeated;
        on one instance at a time (the duty named by ``id``) unless ``each_instance``."""
        if self._holds_duty is not None and not each_instance:
            job = self._as_duty(str(kw["id"]), job, self._holds_duty)
        self._scheduler.add_job(
            self._tracked(job),
            "interval",
            seconds=seconds,
            args=list(args),
            max_instances=1,
            coalesce=True,
            **kw,
        )

    def start(self) -> None:
        self._scheduler.start()

    async def stop(self) -> None:
        """No more runs; the runs going are cancelled, and ended when this returns."""
        self._stopping = True
        self._scheduler.shutdown(wait=False)
        running = list(self._running)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    @staticmethod
    def _as_duty(duty: str, job: Callable[..., object], holds: HoldsDuty) -> Callable[..., object]:
        @functools.wraps(job)
        async def run(*args: Any, **kwargs: Any) -> object:
            if not await holds(duty):
                return None
            if inspect.iscoroutinefunction(job):
                return await job(*args, **kwargs)
            return await asyncio.to_thread(job, *args, **kwargs)

        return run

    def _tracked(self, job: Callable[..., object]) -> Callable[..., object]:
        if not inspect.iscoroutinefunction(job):
            return job

        @functools.wraps(job)
        async def run(*args: Any, **kwargs: Any) -> object:
            task = asyncio.current_task()
            assert task is not None
            self._running.add(task)
            try:
                return await job(*args, **kwargs)
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                log.debug("%s: cancelled, the app is stopping", run.__qualname__)
                return None
            finally:
                self._running.discard(task)

        return run
