"""The app's interval jobs at the stop: a run still going is cancelled and waited for,
quietly; a run that fails is still logged as an error with its traceback."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

import pytest

from satsgate.server.scheduler import Scheduler


async def test_a_failing_run_is_an_error_and_a_run_the_stop_cancels_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    started, ended = asyncio.Event(), asyncio.Event()

    async def broken() -> None:
        raise RuntimeError("the sweep broke")

    async def waiting() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only the stop ends it
        finally:
            ended.set()

    scheduler = Scheduler()
    now = datetime.now(UTC)
    scheduler.every(3600, broken, id="broken", next_run_time=now)
    scheduler.every(3600, waiting, id="waiting", next_run_time=now)
    scheduler.start()
    deadline = time.monotonic() + 15
    while not (started.is_set() and any(r.exc_info for r in caplog.records)):
        assert time.monotonic() < deadline, "the runs did not start"
        await asyncio.sleep(0.05)
    await scheduler.stop()
    assert ended.is_set()  # ended before stop returned, not left pending

    failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert failures[0].levelno == logging.ERROR and failures[0].exc_info is not None
    assert isinstance(failures[0].exc_info[1], RuntimeError)
    assert "broken" in failures[0].getMessage()
    assert any("waiting: cancelled" in r.getMessage() for r in caplog.records)
