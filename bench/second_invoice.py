"""What the 402's second invoice (the session deposit's) costs, in one run.

    python bench/second_invoice.py [--rounds 6] [--duration 4] [--scenario challenge_402_noop]

One bench satsgate server (``satsgate_server.py``, dev node) and the bare aiohttp baseline;
wrk (``-t1 -c32``) alternates, round after round, between the same 402 request sent
three ways:

* ``default``: no ``Accept-Payment``: the 402 the node answers most clients with;
* ``charge``: ``Accept-Payment: lightning/charge``: the Payment challenges are cut to the
  charge intent, so no session deposit invoice is made (one invoice per 402);
* ``session``: ``Accept-Payment: lightning/session, lightning/charge``: a client that asks
  for the session offer (two invoices per 402).

For each: req/s and the server's CPU per request (its process group's user + system
time over the requests; far steadier than req/s on a shared machine), medians over the
rounds, and the per-round ratios to ``charge``. Every answer must be a 402. The
``store`` line counts the invoices the run made (the dev node's rows), per kind.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
from pathlib import Path

from run import BENCH, RESULTS, WrkResult, free_port, log, run_wrk, start_server

VARIANTS = {
    "default": "",
    "charge": "Accept-Payment: lightning/charge",
    "session": "Accept-Payment: lightning/session, lightning/charge",
}
SCENARIOS = {
    "challenge_402_noop": ("/bench/noop", "{}"),
    "challenge_402": (
        "/api/l402/render-card",
        json.dumps({"template": "headline", "title": "Lightning is fast", "subtitle": "satsgate"}),
    ),
}


def one(server: object, url: str, body: str, header: str, args: argparse.Namespace) -> WrkResult:
    result = run_wrk(
        args.scenario,
        server,  # type: ignore[arg-type]
        url,
        "static.lua",
        ["POST", body, "1", "", header],
        duration=args.duration,
        connections=args.connections,
        threads=1,
    )
    if set(result.statuses) != {"402"} or result.socket_errors:
        raise SystemExit(f"bad run ({header!r}): {result.statuses} {result.errors}")
    return result


def store_counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT mode, COUNT(*) FROM payments GROUP BY mode").fetchall()
    return {str(mode): int(n) for mode, n in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="challenge_402_noop")
    parser.add_argument("--out", default=str(RESULTS / "second_invoice.json"))
    args = parser.parse_args()
    path, body = SCENARIOS[args.scenario]
    rows: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="satsgate-2nd-") as tmp_name:
        tmp = Path(tmp_name)
        base = start_server(
            "baseline",
            [str(BENCH / "baseline_server.py"), "--port", str(free_port())],
            tmp / "baseline.log",
        )
        data = tmp / "data"
        sg = start_server(
            "satsgate",
            [
                str(BENCH / "satsgate_server.py"),
                "--port",
                str(free_port()),
                "--data-dir",
                str(data),
            ],
            tmp / "satsgate.log",
        )
        try:
            log("warm-up")
            for header in VARIANTS.values():
                args_w = argparse.Namespace(**{**vars(args), "duration": 1.0})
                one(sg, sg.url + path, body, header, args_w)
            for index in range(args.rounds):
                names = list(VARIANTS)
                if index % 2:
                    names.reverse()
                baseline = run_wrk(
                    "baseline",
                    base,
                    base.url + "/",
                    "static.lua",
                    ["GET", "", "0"],
                    duration=args.duration,
                    connections=args.connections,
                    threads=1,
                )
                row = {"baseline": {"rps": baseline.rps, "cpu_us": baseline.cpu_us_per_request}}
                for name in names:
                    r = one(sg, sg.url + path, body, VARIANTS[name], args)
                    row[name] = {"rps": r.rps, "cpu_us": r.cpu_us_per_request}
                rows.append(row)
                log(
                    f"round {index + 1}: "
                    + "  ".join(f"{n} {row[n]['rps']:.0f}/s {row[n]['cpu_us']:.0f}us" for n in row)
                )
        finally:
            sg.stop()
            base.stop()
        counts = (
            store_counts(data / "satsgate.sqlite3") if (data / "satsgate.sqlite3").exists() else {}
        )
    med = statistics.median
    summary: dict[str, dict[str, float]] = {}
    for name in ["baseline", *VARIANTS]:
        summary[name] = {
            "rps": med(r[name]["rps"] for r in rows),
            "cpu_us": med(r[name]["cpu_us"] for r in rows),
        }
        if name in VARIANTS:
            summary[name]["rps_vs_charge"] = med(r[name]["rps"] / r["charge"]["rps"] for r in rows)
            summary[name]["cpu_vs_charge"] = med(
                r[name]["cpu_us"] / r["charge"]["cpu_us"] for r in rows
            )
    print(f"{args.scenario}, {args.rounds} rounds of {args.duration:g} s, -c{args.connections}")
    for name, s in summary.items():
        extra = ""
        if "rps_vs_charge" in s:
            extra = f"  vs charge: req/s x{s['rps_vs_charge']:.3f}, CPU x{s['cpu_vs_charge']:.3f}"
        print(f"{name:9s} {s['rps']:8.0f} req/s  {s['cpu_us']:7.0f} us CPU/req{extra}")
    print(f"store: {counts}")
    Path(args.out).write_text(
        json.dumps(
            {"args": vars(args), "rounds": rows, "summary": summary, "store": counts}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
