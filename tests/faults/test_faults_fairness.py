"""CPU work is shared fairly between payers: jobs waiting for a worker are served by
turns, so one payer's queue of long jobs cannot make another payer's job wait behind
all of it. Order of starts is measured, not wall time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from satsgate.appkeys import CPU
from satsgate.engines import CpuRunner
from satsgate.engines.cpu_jobs import PAYER
from tests.conftest import ThreadedServer, http_client, make_settings, paid_l402_auth


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


async def _two_payers(srv: ThreadedServer, client: httpx.AsyncClient) -> list[str]:
    """Payer A's five paid calls, then payer B's one once four of A's wait: the order of
    the answers."""
    body = {"html": "<h1>Report</h1>" + "<p>A paragraph of the report.</p>" * 400}
    finished: list[str] = []

    async def call(name: str, xff: str, auth: str) -> None:
        headers = {"Authorization": auth, "X-Forwarded-For": xff}
        resp = await client.post("/api/l402/html-to-pdf", json=body, headers=headers)
        assert resp.status_code == 200, resp.text
        finished.append(name)

    async def waiting() -> int:
        return int(srv.app[CPU].waiting)

    a = [await paid_l402_auth(client, "html-to-pdf", body) for _ in range(5)]
    b = await paid_l402_auth(client, "html-to-pdf", body)
    first = [asyncio.create_task(call(f"A{i}", "203.0.113.1", a[i])) for i in range(5)]
    deadline = time.monotonic() + 30
    while await asyncio.to_thread(srv.call, waiting) < 4:  # A0 runs, four wait
        assert time.monotonic() < deadline, finished
        await asyncio.sleep(0.01)
    await call("B", "198.51.100.7", b)
    await asyncio.gather(*first)
    return finished


async def test_through_the_gate_each_client_address_is_a_payer(tmp_path: Path) -> None:
    """Paid html-to-pdf calls (long work: one at a time on two workers) from two client
    addresses behind a trusted proxy: the second payer's one call is served right after
    the first payer's call that was running, not after all five."""
    srv = ThreadedServer(
        make_settings(tmp_path / "data", cpu_workers=2, trusted_proxies=("127.0.0.0/8",))
    )
    try:
        async for client in http_client(srv):
            finished = await _two_payers(srv, client)
            # Long work runs one at a time here, so the order of answers is the order of
            # starts.
            assert finished.index("B") <= 1, finished
    finally:
        srv.stop()
