"""What binding sessions to a token costs a bearer call: the tree before the binding (A)
against this one (B), both servers side by side, interleaved round by round.

    python bench/session_binding.py /path/to/tree-before [--rounds 6] [--duration 5]

Each tree's ``satsgate`` is put first on its server's ``PYTHONPATH`` (the shared venv's
editable install is shadowed); the bench scripts come from this tree (``sessions.py
--serve``: the real app plus ``POST /bench/noop``, 1 sat, a deposit that never runs dry).
One session is opened on each server (on B the open's answer hands over the token; the
bearer credentials carry it), then per round, in the order A B, B A, A B, ...:

- ``bearer_same``: every request repeats one bearer credential (``static.lua``); the
  server verifies it once and knows it after that (the binding's check included), so
  each call is the debit, the no-op and the receipt;
- ``bearer_fresh``: every request carries a credential never seen before (``paid.lua``
  over a file of bearer credentials that differ by an ignored payload member ``n``):
  each call decodes the credential, checks the challenge's HMAC and sha256(preimage),
  and on B also reads the session's token hash and compares it (the binding's whole
  cost), then debits.

Reported per scenario: the median over rounds of B/A for req/s and for server CPU per
request (CPU is the steadier one on a shared machine), with min and max, and each
side's medians. Every response must be 200 (a refused bearer would be a broken run).

On a machine shared with other work the rounds swing by more than the binding costs, so
the binding's own work is also timed in this process (``binding_us``, the best of 7
batches of 20,000): what a fresh credential adds on B, namely decoding a credential with
``token`` against one without (``session_payload`` + ``parse_credential``), and the
check itself (a dict look-up of the session's stored hash, sha256 of the token,
``hmac.compare_digest``); a store read is added once per session and process (the
stored hash is then known). Its share of a bearer call is that over the call's server
CPU measured above. Writes ``bench/results/session_binding.json``.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sessions as sessions_bench
from run import RESULTS, Server, WrkResult, environment, free_port, log, run_wrk, start_server
from sessions import OpenedSession, open_session

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def start(name: str, tree: Path, tmp: Path) -> Server:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [str(BENCH / "sessions.py"), "--serve", "--port", str(free_port())]
    args += ["--data-dir", str(tmp / f"data-{name}")]
    return start_server(name, args, tmp / f"{name}.log", env=env)


def fresh_credentials(session: OpenedSession, path: Path, start: int, count: int) -> None:
    """``count`` distinct bearer credentials, one a line, without the scheme word (paid.lua
    puts "Payment " before each)."""
    lines = (session.bearer(start + i).removeprefix("Payment ") for i in range(count))
    path.write_text("".join(line + "\n" for line in lines))


def best_us(fn: Callable[[], object], n: int = 20_000, batches: int = 7) -> float:
    """Microseconds per call of ``fn``: the best of ``batches`` batches of ``n``."""
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / n / 1000)
    return best


def binding_us() -> dict[str, float]:
    """What the binding adds to a bearer call with a fresh credential, in this process."""
    from satsgate.payments.hmac_sha256 import HmacKey
    from satsgate.payments.session_wire import parse_credential, session_payload, token_sha256

    key = HmacKey(b"bench server secret")
    request = sessions_bench.b64url(b'{"amount":"1","currency":"sat"}')
    expires = "2030-01-01T00:00:00Z"
    from satsgate.payments.session_wire import challenge_id

    echoed = {
        "id": challenge_id(key, "bench", request, expires),
        "realm": "bench",
        "method": "lightning",
        "intent": "session",
        "request": request,
        "expires": expires,
    }
    token = secrets.token_hex(32)
    base = {"action": "bearer", "sessionId": "ab" * 32, "preimage": "cd" * 32}
    without = sessions_bench.credential(echoed, base).removeprefix("Payment ")
    with_token = sessions_bench.credential(echoed, {**base, "token": token})
    with_token = with_token.removeprefix("Payment ")

    def decode(value: str) -> Callable[[], object]:
        def run() -> object:
            doc = session_payload(value)
            assert doc is not None
            return parse_credential(doc, key)

        return run

    known = {"ab" * 32: token_sha256(token)}

    def check() -> bool:
        stored = known.get("ab" * 32)
        assert stored is not None
        return hmac.compare_digest(token_sha256(token), stored)

    decode_without, decode_with = best_us(decode(without)), best_us(decode(with_token))
    check_us = best_us(check)
    return {
        "decode_without_token_us": round(decode_without, 3),
        "decode_with_token_us": round(decode_with, 3),
        "check_us": round(check_us, 3),
        "binding_us": round(max(0.0, decode_with - decode_without) + check_us, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before", type=Path, help="the source tree before the binding (A)")
    parser.add_argument(
        "--after",
        type=Path,
        default=ROOT,
        help="the tree with it (B; default this one). Given the before tree too, the run is "
        "the harness's control: the same code on both sides",
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--credentials", type=int, default=60_000, help="per fresh run")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="satsgate-bench-binding-"))
    trees = {"A": args.before.resolve(), "B": args.after.resolve()}
    control = trees["A"] == trees["B"]
    servers: dict[str, Server] = {}
    results: list[tuple[str, int, WrkResult]] = []
    try:
        for side, tree in trees.items():
            servers[side] = start(side, tree, tmp)
        sessions = {side: open_session(server.url) for side, server in servers.items()}
        if not control and (sessions["A"].token is not None or sessions["B"].token is None):
            raise RuntimeError("A must be a tree before the binding and B one with it")
        used = 0
        for rnd in range(args.rounds):
            log(f"round {rnd + 1}/{args.rounds}")
            for side in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
                server, session = servers[side], sessions[side]
                url = server.url + "/bench/noop"
                same = run_wrk(
                    "bearer_same",
                    server,
                    url,
                    "static.lua",
                    ["POST", "{}", "1", session.bearer()],
                    duration=args.duration,
                    connections=args.connections,
                    threads=1,
                )
                creds = tmp / f"fresh-{side}-{rnd}.creds"
                fresh_credentials(session, creds, used, args.credentials)
                used += args.credentials
                fresh = run_wrk(
                    "bearer_fresh",
                    server,
                    url,
                    "paid.lua",
                    [str(creds), "/bench/noop", "{}", "1", "Payment"],
                    duration=args.duration,
                    connections=args.connections,
                    threads=1,
                )
                creds.unlink()
                for res in (same, fresh):
                    if set(res.statuses) != {"200"}:
                        raise RuntimeError(f"{side} {res.scenario}: {res.statuses}")
                    results.append((side, rnd, res))
    finally:
        for server in servers.values():
            server.stop()

    summary: dict[str, Any] = {}
    for scenario in ("bearer_same", "bearer_fresh"):
        runs = {(side, rnd): res for side, rnd, res in results if res.scenario == scenario}
        rps_ratio = [runs["B", r].rps / runs["A", r].rps for r in range(args.rounds)]
        cpu_ratio = [
            runs["B", r].cpu_us_per_request / runs["A", r].cpu_us_per_request
            for r in range(args.rounds)
        ]
        summary[scenario] = {
            "rps_B_over_A_median": round(statistics.median(rps_ratio), 3),
            "rps_B_over_A_range": [round(min(rps_ratio), 3), round(max(rps_ratio), 3)],
            "cpu_B_over_A_median": round(statistics.median(cpu_ratio), 3),
            "cpu_B_over_A_range": [round(min(cpu_ratio), 3), round(max(cpu_ratio), 3)],
            **{
                f"{side}_{what}_median": round(
                    statistics.median(getattr(runs[side, r], what) for r in range(args.rounds)),
                    1,
                )
                for side in ("A", "B")
                for what in ("rps", "cpu_us_per_request")
            },
            "p50_ms_median": {
                side: statistics.median(runs[side, r].latency_ms["p50"] for r in range(args.rounds))
                for side in ("A", "B")
            },
        }
    inproc = binding_us()
    for scenario in ("bearer_same", "bearer_fresh"):
        cpu = summary[scenario]["B_cpu_us_per_request_median"]
        added = inproc["binding_us"] if scenario == "bearer_fresh" else 0.0
        summary[scenario]["binding_share_of_B_cpu"] = round(added / cpu, 4)
    doc = {
        "config": {k: str(v) for k, v in vars(args).items()},
        "binding_in_process": inproc,
        "environment": environment(),
        "load_after": os.getloadavg(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": summary,
        "runs": [{"side": side, "round": rnd, **res.__dict__} for side, rnd, res in results],
    }
    RESULTS.mkdir(exist_ok=True)
    name = "session_binding_control.json" if control else "session_binding.json"
    (RESULTS / name).write_text(json.dumps(doc, indent=2, default=str))
    print("| scenario | A req/s | B req/s | B/A req/s (min-max) | A CPU µs | B CPU µs | B/A CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, s in summary.items():
        print(
            f"| {name} | {s['A_rps_median']:.0f} | {s['B_rps_median']:.0f} | "
            f"{s['rps_B_over_A_median']:.3f} ({s['rps_B_over_A_range'][0]:.3f}-"
            f"{s['rps_B_over_A_range'][1]:.3f}) | {s['A_cpu_us_per_request_median']:.0f} | "
            f"{s['B_cpu_us_per_request_median']:.0f} | {s['cpu_B_over_A_median']:.3f} |"
        )
    print(json.dumps(inproc))
    share = summary["bearer_fresh"]["binding_share_of_B_cpu"]
    print(f"binding share of a fresh bearer call's server CPU: {100 * share:.2f}%")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    sys.exit(main())
