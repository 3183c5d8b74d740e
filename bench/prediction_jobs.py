"""200 paid generate-video jobs in flight at once against a loopback fake of Replicate
whose predictions take about 1 s, and what satsgate does meanwhile: its memory, its event
loop's lag, and the p50/p99 of a free endpoint (GET /api/health) while they run.

    PYTHONPATH=. python bench/prediction_jobs.py [--jobs 200] [--mode webhook|poll]

satsgate runs in a child process (this script with ``--serve``: the real app, dev node,
a ``replicate`` provider pointed at the fake, and a lag probe at GET /bench/lag), the
fake (tests/fakes/fake_platforms.py) in another (``--fake``); the load runs here.
``webhook``: each prediction ends by a signed webhook 1 s after it was made (polls
every 15 s as a safety net); ``poll``: satsgate polls every 0.25 s and the prediction
ends on its 4th poll.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _settings(data_dir: Path, port: int, fake_url: str, mode: str) -> Any:
    from satsgate.config.settings import Settings

    options = (
        {"poll_interval_s": 0.25, "webhooks": False}
        if mode == "poll"
        else {"poll_interval_s": 0.25, "webhook_poll_interval_s": 15.0}
    )
    return Settings(
        host="127.0.0.1", port=port, data_dir=data_dir, challenge_rate_per_min=0,
        max_connections_per_client=0,  # the load and the fake's webhooks share 127.0.0.1
        providers={"rep": {"kind": "replicate", "base_url": fake_url, "api_key": "r8_test_key",
                           "models": {"25": "minimax/hailuo-02"}, "max_wait_s": 120,
                           **options}},
        engines={"video": "rep"},
    )  # fmt: skip


def serve(data_dir: Path, port: int, fake_url: str, mode: str) -> None:
    """The child: satsgate's app plus GET /bench/lag (the loop's lag since the last call)."""
    from _serve import serve as serve_app
    from aiohttp import web
    from experiments import dev_backend

    from satsgate.server.app import create_app

    settings = _settings(data_dir, port, fake_url, mode)
    app = create_app(settings, dev_backend(data_dir))
    lags: list[float] = []

    async def probe(_app: web.Application) -> Any:
        async def run() -> None:
            while True:
                start = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - start - 0.01)

        task = asyncio.create_task(run())
        yield
        task.cancel()

    async def lag(_request: web.Request) -> web.Response:
        taken = sorted(lags)
        lags.clear()
        if not taken:
            return web.json_response({})
        return web.json_response({
            "samples": len(taken), "p50_ms": taken[len(taken) // 2] * 1000,
            "p99_ms": taken[int(len(taken) * 0.99)] * 1000, "max_ms": taken[-1] * 1000,
        })  # fmt: skip

    app.cleanup_ctx.append(probe)
    app.router.add_get("/bench/lag", lag)
    serve_app(app, "127.0.0.1", port)


def _rss_kib(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            found[line.split(":")[0]] = int(line.split()[1])
    return found


async def _pay_and_submit(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    ch = await client.post("/api/l402/generate-video", json=body)
    assert ch.status_code == 402, ch.text
    challenge = ch.json()
    paid = await client.post("/api/dev/pay", json={"invoice": challenge["invoice"]})
    auth = f"L402 {challenge['macaroon']}:{paid.json()['preimage']}"
    resp = await client.post("/api/l402/generate-video", json=body, headers={"Authorization": auth})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["poll_url"])


async def load(url: str, jobs: int, child: int, data_dir: Path) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await client.get("/bench/lag")
        before = _rss_kib(child)
        gate = asyncio.Semaphore(32)

        async def one(i: int) -> str:
            async with gate:
                return await _pay_and_submit(client, {"prompt": f"clip {i}", "duration": 5})

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(jobs)))
        submitted = time.perf_counter() - started
        after_submit = time.perf_counter()
        health: list[float] = []
        peak = before
        db = sqlite3.connect(f"file:{data_dir / 'satsgate.sqlite3'}?mode=ro", uri=True)
        try:
            while True:
                t0 = time.perf_counter()
                resp = await client.get("/api/health")
                health.append(time.perf_counter() - t0)
                assert resp.status_code == 200
                if len(health) % 10 == 0:
                    running = db.execute(
                        "SELECT COUNT(*) FROM jobs WHERE status = 'IN_PROGRESS'"
                    ).fetchone()[0]
                    rss = _rss_kib(child)
                    peak = max(peak, rss, key=lambda r: r["VmRSS"])
                    if running == 0:
                        break
                await asyncio.sleep(0.01)
            total = time.perf_counter() - started
            tail = time.perf_counter() - after_submit
            statuses = dict(db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status"))
            spans = sorted(
                end - start for start, end in db.execute("SELECT created_at, updated_at FROM jobs")
            )
        finally:
            db.close()
        assert statuses == {"COMPLETED": jobs}, statuses
        lag = (await client.get("/bench/lag")).json()
        after = _rss_kib(child)
    health.sort()
    return {
        "jobs": jobs,
        "submit_all_s": round(submitted, 2),
        "all_done_s": round(total, 2),
        "done_after_last_submit_s": round(tail, 2),
        # Each job's life in the store (whole seconds: submit to end).
        "job_s_p50": spans[len(spans) // 2],
        "job_s_max": spans[-1],
        "health_p50_ms": round(statistics.median(health) * 1000, 2),
        "health_p99_ms": round(health[int(len(health) * 0.99)] * 1000, 2),
        "health_samples": len(health),
        "loop_lag": {k: round(v, 2) for k, v in lag.items()},
        "rss_kib_before": before["VmRSS"],
        "rss_kib_peak_seen": peak["VmRSS"],
        "rss_kib_after": after["VmRSS"],
        "hwm_kib": after["VmHWM"],
    }


def fake(mode: str) -> None:
    """The fake platform's process: prints its URL, serves until stdin closes, then prints
    what it saw as JSON."""
    from tests.fakes.fake_platforms import FakeReplicate, Script, mp4

    platform = FakeReplicate()
    clip = mp4(6.0)
    if mode == "webhook":
        platform.script = Script(outputs=lambda: [clip], by_webhook=True, webhook_after_s=1.0)
    else:
        platform.script = Script(outputs=lambda: [clip], starting_polls=1, processing_polls=2)
    print(platform.url, flush=True)
    sys.stdin.read()
    platform.stop()
    print(json.dumps({
        "predictions_made": len(platform.records),
        "ended_by_webhook": sum(r.ended_by_webhook for r in platform.records.values()),
        "webhook_answers": {str(code): platform.webhook_answers.count(code)
                            for code in set(platform.webhook_answers)},
    }), flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--mode", choices=("webhook", "poll"), default="webhook")
    parser.add_argument("--serve", nargs=3, metavar=("DATA_DIR", "PORT", "FAKE_URL"))
    parser.add_argument("--fake", action="store_true")
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve[0]), int(args.serve[1]), args.serve[2], args.mode)
        return
    if args.fake:
        fake(args.mode)
        return

    from tests.conftest import free_port

    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'bench'}"}
    platform = subprocess.Popen(
        [sys.executable, __file__, "--mode", args.mode, "--fake"],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert platform.stdout is not None and platform.stdin is not None
    fake_url = platform.stdout.readline().strip()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        child = subprocess.Popen(
            [sys.executable, __file__, "--mode", args.mode, "--serve", data, str(port), fake_url],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.startswith("READY"), line
            result = asyncio.run(load(line.split()[1], args.jobs, child.pid, Path(data)))
        finally:
            assert child.stdin is not None
            child.stdin.close()  # the child stops when its stdin closes
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.terminate()
                child.wait(30)
            platform.stdin.close()
            seen = json.loads(platform.stdout.readline() or "{}")
            platform.wait(30)
    result["mode"] = args.mode
    result.update(seen)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
