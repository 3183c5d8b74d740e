"""The app's interval jobs (refund reconciliation, sweeps, clean-ups) on APScheduler.

A run is one at a time and a missed run is not repeated. At the stop, the coroutine
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
from collections.abc import Callable
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self) -> None:
        self._scheduler = AsyncIOScheduler()
        self._running: set[asyncio.Task[Any]] = set()
        self._stopping = False

    def every(self, seconds: float, job: Callable[..., object], *args: Any, **kw: Any) -> None:
        """``job(*args)`` every ``seconds``; one run at a time, missed runs not repeated."""
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
