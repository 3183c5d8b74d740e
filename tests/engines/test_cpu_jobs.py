"""CPU engine jobs run in a real spawned process pool, and stop at their time limit."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from satsgate.config.settings import load_settings
from satsgate.engines.cpu_jobs import CpuTimeLimitExceeded, run_cpu_job
from tests.conftest import ThreadedServer, http_client, make_settings, paid_l402_auth


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as executor:
        executor.submit(pow, 1, 1).result(60)  # the worker started: timings measure the jobs
        yield executor


async def test_a_job_within_its_limit_returns_its_result(pool: ProcessPoolExecutor) -> None:
    assert await run_cpu_job(pool, 5.0, pow, 2, 10) == 1024


async def test_a_job_past_its_limit_is_stopped_and_the_worker_serves_again(
    pool: ProcessPoolExecutor,
) -> None:
    started = time.monotonic()
    with pytest.raises(CpuTimeLimitExceeded):
        await run_cpu_job(pool, 0.5, time.sleep, 30)  # the timer interrupts the sleep
    assert time.monotonic() - started < 10  # stopped near the limit, not after 30 s
    # The one worker unwound and is free: the next job runs at once, with no timer left.
    started = time.monotonic()
    assert await run_cpu_job(pool, 5.0, sum, [1, 2, 3]) == 6
    await run_cpu_job(pool, 5.0, time.sleep, 0.8)  # longer than the first limit: no alarm
    assert time.monotonic() - started < 3


def swallowing_sleep(seconds: float) -> str:
    """An engine that catches every Exception around its work."""
    try:
        time.sleep(seconds)
    except Exception:
        return "carried on"
    return "slept"


async def test_an_engine_catching_exception_cannot_swallow_the_limit(
    pool: ProcessPoolExecutor,
) -> None:
    started = time.monotonic()
    with pytest.raises(CpuTimeLimitExceeded):
        await run_cpu_job(pool, 0.5, swallowing_sleep, 30)
    assert time.monotonic() - started < 10  # stopped near the limit, far from the 30 s asked


async def test_a_thread_pool_runs_the_job_without_a_timer() -> None:
    with ThreadPoolExecutor(1) as threads:  # signals need the main thread: no timer there
        assert await run_cpu_job(threads, 5.0, pow, 3, 3) == 27


def test_the_limit_is_a_setting_read_from_the_environment() -> None:
    settings = load_settings(environ={"SATSGATE_CPU_JOB_TIME_LIMIT_S": "2.5"})
    assert settings.cpu_job_time_limit_s == 2.5


async def test_a_paid_pdf_past_the_limit_is_refunded(tmp_path: Path) -> None:
    """Through the gate: the job is stopped, the payer gets TIMEOUT and the whole refund."""
    srv = ThreadedServer(make_settings(tmp_path / "data", cpu_job_time_limit_s=0.001))
    try:
        async for client in http_client(srv):
            body = {"html": "<h1>Report</h1>" + "<p>A paragraph of the report.</p>" * 200}
            auth = await paid_l402_auth(client, "html-to-pdf", body)
            resp = await client.post(
                "/api/l402/html-to-pdf", json=body, headers={"Authorization": auth}
            )
            assert resp.status_code == 504, resp.text
            assert resp.headers["X-Error-Code"] == "TIMEOUT"
            refund = resp.json()["refund"]
            assert refund["amount_sats"] == 50  # html-to-pdf's whole price
            assert refund["lnurl_withdraw"].lower().startswith("lnurl")
    finally:
        srv.stop()
