"""CPU work is shared fairly between payers: jobs waiting for a worker are served by
turns, so one payer's queue of long jobs cannot make another payer's job wait behind
all of it. Order of starts is measured, not wall time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from satsgate.engines import CpuRunner
from satsgate.engines.cpu_jobs import PAYER


class Starts:
    """What the jobs record as they start (in the pool's threads)."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self._lock = threading.Lock()

    def job(self, name: str, seconds: float) -> str:
        with self._lock:
            self.order.append(name)
        time.sleep(seconds)
        return name


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


async def _submit(
    runner: CpuRunner, starts: Starts, payer: str, name: str, *, quick: bool = False
) -> str:
    PAYER.set(payer)  # this task's context, as the HTTP edge sets it for a request
    return await runner(starts.job, name, 0.03, quick=quick)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_payers_queue_of_long_jobs_does_not_hold_up_anothers_job(
    pool: ThreadPoolExecutor,
) -> None:
    runner = CpuRunner(pool, 30.0, workers=2)  # long work holds one worker at a time
    starts = Starts()
    flood = [asyncio.create_task(_submit(runner, starts, "203.0.113.1", f"A{i}")) for i in range(8)]
    await _settle()  # all of A's jobs are queued (one runs) before B's arrives
    single = asyncio.create_task(_submit(runner, starts, "198.51.100.7", "B"))
    await asyncio.gather(*flood, single)
    assert starts.order.index("B") <= 1, starts.order  # behind only the A job running
    assert sorted(starts.order) == sorted([*(f"A{i}" for i in range(8)), "B"])
    assert [n for n in starts.order if n != "B"] == [f"A{i}" for i in range(8)]  # A in order
    assert runner.waiting == 0


async def test_turns_alternate_between_payers_with_queues(pool: ThreadPoolExecutor) -> None:
    runner = CpuRunner(pool, 30.0, workers=2)
    starts = Starts()
    tasks = [asyncio.create_task(_submit(runner, starts, "a", f"a{i}")) for i in range(4)]
    await _settle()
    tasks += [asyncio.create_task(_submit(runner, starts, "b", f"b{i}")) for i in range(4)]
    await asyncio.gather(*tasks)
    # a0 ran at once; from then on the two payers take turns.
    assert starts.order == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3"]


async def test_quick_work_still_finds_the_free_worker_and_a_cancelled_wait_leaves(
    pool: ThreadPoolExecutor,
) -> None:
    runner = CpuRunner(pool, 30.0, workers=2)
    starts = Starts()
    longs = [asyncio.create_task(_submit(runner, starts, "a", f"L{i}")) for i in range(3)]
    await _settle()
    gone = longs.pop()  # waiting for the long lane: cancelled, it never starts
    gone.cancel()
    card = asyncio.create_task(_submit(runner, starts, "b", "card", quick=True))
    await _settle()
    assert await card == "card"
    assert starts.order[:2] == ["L0", "card"]  # the card did not wait for L1
    await asyncio.gather(*longs)
    assert "L2" not in starts.order and runner.waiting == 0
    # Nothing is left counted: both workers are free again for two quick jobs at once.
    both = [
        asyncio.create_task(_submit(runner, starts, "c", f"q{i}", quick=True)) for i in range(2)
    ]
    await _settle()
    assert runner.waiting == 0  # both were handed a worker at once
    await asyncio.gather(*both)
    assert sorted(starts.order[-2:]) == ["q0", "q1"]
