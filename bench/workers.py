"""CPU jobs in the gateway's own pool against ``satsgate worker`` processes (issue 30).

    python bench/workers.py [--jobs 12] [--latency-jobs 300] [--json out.json]

On a throwaway PostgreSQL cluster (tests/pg_cluster.py; the tests' settings, fsync off):

* ``ocr_pages_per_s``: ``--jobs`` one-page OCR jobs (tesseract, a 12-line 1200-pixel
  text image) submitted at once, through the in-process pool of 2 (``pool``), and through
  the queue to 1 and to 2 worker processes of one slot each (``workers_1``,
  ``workers_2``);
* ``tts_jobs_per_s``: ``--jobs`` text-to-speech calls of the local voice (about 300
  characters, MP3) at once: the pool mode runs them as the gateway's own subprocesses,
  the queue mode as one CPU job each on the workers;
* ``latency_ms``: one quick job at a time (a 16x16 image converted to PNG, about 1 ms of
  work) on an idle pool and an idle worker: p50 and p99 of the whole call, and the
  queue's added latency (the queue's percentile less the pool's).

The machine is shared: ratios and medians from the same run are what to read.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402

from satsgate.engines.cpu_jobs import CpuRunner  # noqa: E402
from satsgate.engines.image_codec import to_png  # noqa: E402
from satsgate.engines.local import espeak, ocr_worker  # noqa: E402
from satsgate.engines.local.tools import ToolRunner  # noqa: E402
from satsgate.engines.synthesis import SynthesisRequest  # noqa: E402
from satsgate.store.cpu_queue import CpuQueueRepository  # noqa: E402
from satsgate.store.postgres import PostgresDatabase  # noqa: E402
from satsgate.workers.gateway import QueueCpuRunner  # noqa: E402
from tests.documents_inputs import png, text_image  # noqa: E402
from tests.pg_cluster import PgCluster, postgres_bindir  # noqa: E402

LIMIT_S = 120.0
PAGE = png(text_image([f"Lightning invoices settle within seconds, line {i}." for i in range(12)]))
SPEECH = (
    "A node that sells local engines outgrows one machine here first. Let an operator add "
    "machines for the engines without touching the node: workers on any number of machines "
    "take jobs from a queue in the same database, run them with the same engines, limits "
    "and timeouts, and hand back the results."
)


def tiny_image() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(out, "BMP")
    return out.getvalue()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def workers(url: str, count: int) -> Iterator[None]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable, "-m", "satsgate.cli", "worker", "--store-url", url,
        "--concurrency", "1", "--engines", "ocr,tts,images", "--log-level", "WARNING",
    ]  # fmt: skip
    procs = [subprocess.Popen(command, env=env) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)


async def wait_workers(queue: CpuQueueRepository, count: int) -> None:
    for _ in range(600):
        state = await queue.state()
        if sum(w.heartbeat_age_s < 3 for w in state.workers) >= count:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{count} workers did not start")


async def rate(jobs: int, one: Callable[[], Awaitable[Any]]) -> float:
    """Jobs a second with ``jobs`` submitted at once."""
    await one()  # warm: the first job pays for imports
    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(jobs)))
    return jobs / (time.perf_counter() - start)


async def latencies(count: int, one: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(5):
        await one()
    out = []
    for _ in range(count):
        start = time.perf_counter()
        await one()
        out.append((time.perf_counter() - start) * 1000)
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 2)


async def measure(cpu: CpuRunner, tts: espeak.EspeakEngine, args: Any) -> dict[str, Any]:
    image = tiny_image()
    request = SynthesisRequest(text=SPEECH, model_id=43, language="en", format="mp3")

    async def ocr() -> Any:
        return await cpu(ocr_worker.ocr_image, PAGE, None, "document")

    async def speak() -> Any:
        return await tts.synthesize(request)

    async def quick() -> Any:
        return await cpu(to_png, image, quick=True)

    result: dict[str, Any] = {
        "ocr_pages_per_s": round(await rate(args.jobs, ocr), 2),
        "tts_jobs_per_s": round(await rate(args.jobs, speak), 2),
    }
    lat = await latencies(args.latency_jobs, quick)
    result["latency_ms"] = {"p50": pct(lat, 50), "p99": pct(lat, 99)}
    return result


async def run(args: argparse.Namespace, cluster: PgCluster) -> dict[str, Any]:
    voices = espeak.espeak_languages()
    results: dict[str, Any] = {
        "cores": os.cpu_count(),
        "jobs": args.jobs,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    try:
        cpu = CpuRunner(pool, LIMIT_S, 2)
        results["pool"] = await measure(cpu, espeak.EspeakEngine(ToolRunner(LIMIT_S), voices), args)
    finally:
        pool.shutdown()
    for count in (1, 2):
        url = cluster.new_database()
        db = PostgresDatabase(url)
        await db.open()
        queue = CpuQueueRepository(db)
        runner = QueueCpuRunner(pool, LIMIT_S, queue, url)
        await runner.start()
        try:
            with workers(url, count):
                await wait_workers(queue, count)
                engine = espeak.EspeakEngine(ToolRunner(LIMIT_S), voices, offload=runner)
                results[f"workers_{count}"] = await measure(runner, engine, args)
        finally:
            await runner.close()
            await db.close()
    pool_lat, one_lat = results["pool"]["latency_ms"], results["workers_1"]["latency_ms"]
    results["queue_added_latency_ms"] = {
        p: round(one_lat[p] - pool_lat[p], 2) for p in ("p50", "p99")
    }
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    for what in ("ocr_pages_per_s", "tts_jobs_per_s"):
        results[f"{what}_2_over_1_workers"] = round(
            results["workers_2"][what] / results["workers_1"][what], 2
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--latency-jobs", type=int, default=300)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    bindir = postgres_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL's programs (initdb, pg_ctl) are not installed")
    cluster = PgCluster(bindir, free_port())
    cluster.start()
    try:
        results = asyncio.run(run(args, cluster))
    finally:
        cluster.stop()
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
