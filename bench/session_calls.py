"""CPU per session bearer call, server and client in one process, one call at a time:
the tree before the session binding (A) against this one (B), alternating processes.

    python bench/session_calls.py /path/to/tree-before [--pairs 6] [--calls 3000]

wrk's req/s and the server's CPU per request swing by more than 10% on a machine shared
with other work, even with the same code on both sides (``session_binding.py --after``
= before, the control). Here each measurement is a fresh process (``--one``) that starts
the bench app (the real app plus ``POST /bench/noop``, 1 sat) on loopback, opens a
session, makes 1,000 warm-up calls, then three turns of ``--calls`` sequential bearer
calls through aiohttp's client with one repeated credential (``same``) and as many with
a never-seen one per call (``fresh``), counting the process's own CPU time
(``time.process_time``: time spent waiting for the cores does not count) and keeping
each kind's lowest turn. Client and server share the process, so a call's figure includes
the client's work, equal on both sides. Pairs run A B, B A, A B, ...; reported: each
side's median µs per call and the median over pairs of B/A, with min and max.
Writes ``bench/results/session_calls.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


async def one(calls: int) -> dict[str, float]:
    """One measurement in this process (the tree on PYTHONPATH)."""
    import aiohttp
    from aiohttp.test_utils import TestServer
    from satsgate_server import build_app
    from sessions import DEPOSIT_SAT, OpenedSession, credential, unb64url

    from satsgate.config.settings import Settings
    from satsgate.lightning.invoices import sign_invoice

    tmp = Path(tempfile.mkdtemp(prefix="satsgate-bench-calls-"))
    settings = Settings(
        host="127.0.0.1",
        port=0,
        data_dir=tmp,
        challenge_rate_per_min=0,
        session_deposit_multiplier=DEPOSIT_SAT,
        session_max_deposit_sat=DEPOSIT_SAT,
    )
    server = TestServer(build_app(settings), host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url("/bench/noop"))
    try:
        async with aiohttp.ClientSession() as http:
            wants_session = {"Accept-Payment": "lightning/charge, lightning/session"}
            async with http.post(url, json={}, headers=wants_session) as resp:
                assert resp.status == 402, resp.status
                header = next(
                    v for v in resp.headers.getall("WWW-Authenticate") if 'intent="session"' in v
                )
            challenge = dict(re.findall(r'(\w+)="([^"]*)"', header))
            request = unb64url(challenge["request"])
            async with http.post(
                str(server.make_url("/api/dev/pay")), json={"invoice": request["depositInvoice"]}
            ) as resp:
                preimage = (await resp.json())["preimage"]
            refund_to = sign_invoice(
                network="regtest",
                amount_msat=0,
                payment_hash=secrets.token_hex(32),
                payment_secret=secrets.token_hex(32),
                description="bench refund",
                expiry_s=86_400,
                private_key_hex=secrets.token_hex(32),
            )
            keys = ("id", "realm", "method", "intent", "request", "expires")
            echoed = {k: challenge[k] for k in keys}
            opened = credential(
                echoed, {"action": "open", "preimage": preimage, "returnInvoice": refund_to}
            )
            async with http.post(url, json={}, headers={"Authorization": opened}) as resp:
                assert resp.status == 200, await resp.text()
                token = resp.headers.get("Payment-Session-Token")
            session = OpenedSession(request["paymentHash"], echoed, preimage, token)

            async def run(auths: list[str]) -> float:
                t0 = time.process_time()
                for auth in auths:
                    async with http.post(url, json={}, headers={"Authorization": auth}) as resp:
                        assert resp.status == 200, await resp.text()
                        await resp.read()
                return (time.process_time() - t0) / len(auths) * 1e6

            same = session.bearer()
            await run([same] * 1000)  # warm-up: start-up's background work settles
            figures: dict[str, list[float]] = {"same_us": [], "fresh_us": []}
            for turn in range(3):  # interleaved; the lowest of each is kept
                figures["same_us"].append(await run([same] * calls))
                fresh = [session.bearer(turn * calls + n) for n in range(calls)]
                figures["fresh_us"].append(await run(fresh))
            return {k: min(v) for k, v in figures.items()} | {"bound": token is not None}
    finally:
        await server.close()


def measure(tree: Path, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, str(BENCH / "session_calls.py"), "--one", "--calls", str(calls)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before", type=Path, nargs="?", help="the tree before the binding (A)")
    parser.add_argument("--after", type=Path, default=ROOT, help="the tree with it (B)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        import logging

        logging.basicConfig(level=logging.WARNING)
        print(json.dumps(asyncio.run(one(args.calls))))
        return 0
    if args.before is None:
        parser.error("the tree before the binding is required")
    trees = {"A": args.before.resolve(), "B": args.after.resolve()}
    runs: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        for side in ("A", "B") if pair % 2 == 0 else ("B", "A"):
            got = measure(trees[side], args.calls)
            runs.append({"pair": pair, "side": side, **got, "load": os.getloadavg()[0]})
            print(f"pair {pair + 1} {side}: {got}", file=sys.stderr, flush=True)
    summary: dict[str, Any] = {}
    for what in ("same_us", "fresh_us"):
        by = {(r["side"], r["pair"]): r[what] for r in runs}
        ratios = [by["B", p] / by["A", p] for p in range(args.pairs)]
        summary[what] = {
            "A_median": round(statistics.median(by["A", p] for p in range(args.pairs)), 1),
            "B_median": round(statistics.median(by["B", p] for p in range(args.pairs)), 1),
            "B_over_A_median": round(statistics.median(ratios), 3),
            "B_over_A_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    doc = {
        "config": {k: str(v) for k, v in vars(args).items()},
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": summary,
        "runs": runs,
    }
    (BENCH / "results" / "session_calls.json").write_text(json.dumps(doc, indent=2))
    print("| credential | A µs/call | B µs/call | B/A (min-max) |")
    print("|---|---:|---:|---:|")
    for what, s in summary.items():
        print(
            f"| {what.removesuffix('_us')} | {s['A_median']:.0f} | {s['B_median']:.0f} | "
            f"{s['B_over_A_median']:.3f} ({s['B_over_A_range'][0]:.3f}-"
            f"{s['B_over_A_range'][1]:.3f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    sys.exit(main())
