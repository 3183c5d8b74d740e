"""How long a settlement takes to reach the store, idle and with paid calls saturating
the event loop.

    python bench/settlement_latency.py [--payments 40] [--duration 12]

Settlements are written by the store thread, which waits for the write lock; the
event loop's own writes commit in groups (see satsgate.store.db). This measures
what a payer would see: from the dev node's answer to ``POST /api/dev/pay`` to the
answer of a long poll ``GET /api/payments/<id>?wait=10`` (started before paying),
which returns once the settlement was written and announced. The same server is
measured idle, then while wrk drives the paid no-op at 32 connections.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from run import (
    RENDER_JSON,
    Bench,
    Config,
    WrkResult,
    http,
    log,
)


def one_settlement(base: str) -> float | None:
    """Seconds from the node settling the invoice to the long poll seeing it paid;
    None if the 10 s long poll ended with the payment still unpaid."""
    status, challenge, _ = http("POST", base + "/api/l402/render-card", RENDER_JSON)
    assert status == 402, challenge
    payment_id, invoice = str(challenge["paymentId"]), str(challenge["invoice"])
    seen: dict[str, float] = {}

    def poll() -> None:
        url = f"{base}/api/payments/{payment_id}?wait=10"
        with urllib.request.urlopen(url, timeout=30) as resp:
            doc = json.loads(resp.read())
        seen["at"] = time.perf_counter()
        seen["paid"] = float(doc.get("status") == "paid")

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.05)  # the long poll is waiting
    status, paid, _ = http("POST", base + "/api/dev/pay", json.dumps({"invoice": invoice}))
    settled_at = time.perf_counter()
    assert status == 200, paid
    poller.join(30)
    if seen.get("paid") != 1.0:
        return None
    return seen["at"] - settled_at


def measure(base: str, count: int) -> list[float | None]:
    return [one_settlement(base) for _ in range(count)]


def summary(name: str, samples: list[float | None]) -> str:
    ms = sorted(s * 1000 for s in samples if s is not None)
    missed = len(samples) - len(ms)
    if not ms:
        return f"{name}: n={len(samples)}, none seen paid within 10 s"
    return (
        f"{name}: n={len(samples)} median {statistics.median(ms):.1f} ms,"
        f" p90 {ms[max(int(len(ms) * 0.9) - 1, 0)]:.1f} ms, max {ms[-1]:.1f} ms,"
        f" not seen paid within 10 s: {missed}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--payments", type=int, default=40)
    parser.add_argument("--duration", type=float, default=12.0)
    args = parser.parse_args()
    cfg = Config(
        quick=True,
        rounds=1,
        duration=args.duration,
        connections=32,
        threads=1,
        render_connections=1,
        c1_duration=1.0,
        warmup=1.0,
        inproc_iterations=0,
        render_iterations=0,
    )
    with tempfile.TemporaryDirectory(prefix="satsgate-settle-") as tmp_name:
        tmp = Path(tmp_name)
        bench = Bench(cfg, tmp)
        target = bench.stock
        try:
            bench.start_satsgate(target, "satsgate")
            log("idle")
            idle = measure(target.url, args.payments)
            bench.paid(target, target.noop, 1.0)  # sets the credential estimate
            paid = target.noop
            # Seeded before the load starts: seeding holds the write lock for seconds.
            creds = bench.credentials(target, paid, paid.credentials_for_run(args.duration))
            loaded: list[float | None] = []
            result: list[WrkResult] = []

            wrk = threading.Thread(
                target=lambda: result.append(bench.paid(target, paid, args.duration, creds))
            )
            log("under load")
            wrk.start()
            time.sleep(1.0)
            deadline = time.monotonic() + args.duration - 2.0
            while time.monotonic() < deadline and len(loaded) < args.payments:
                loaded.append(one_settlement(target.url))
            wrk.join()
        finally:
            bench.stop()
    print(summary("idle", idle))
    print(summary("paid no-op at 32 connections", loaded))
    if result:
        print(f"  meanwhile: {result[0].rps:.0f} paid calls/s, statuses {result[0].statuses}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
