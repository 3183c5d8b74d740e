"""Where a scenario's time goes: py-spy on the satsgate server while wrk drives it.

    python bench/where_time_goes.py paid_noop [--duration 10] [--experiment fast-macaroon ...]
    python bench/where_time_goes.py challenge_402

Samples only the thread holding the GIL (``py-spy --gil``): every Python
thread of the server (event loop, store thread, dev-node thread, to_thread
workers) shares one GIL, so that is the time that limits throughput. Writes
``bench/results/profile-<scenario>[+experiments].txt`` (summary) and, with
``--raw``, ``.raw`` (collapsed stacks, for flamegraph.pl or speedscope).
Needs ``pip install py-spy``.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import (
    LUA,
    RENDER_JSON,
    RENDER_JSON_DISTINCT,
    RESULTS,
    WRK,
    Bench,
    Target,
    config_from_args,
    log,
)

SCENARIOS = (
    "paid_noop",
    "challenge_402",
    "challenge_402_distinct",
    "challenge_402_noop",
    "free_models",
    "paid_render",
)

# Frames worth a line in the summary (inclusive share): satsgate and the libraries it leans on.
INTERESTING = (
    "satsgate/",
    "pymacaroons/",
    "bolt11/",
    "bitstring/",
    "bech32/",
    "pydantic",
    "sqlite",
    "json/",
    "hmac.py",
    "base64.py",
    "concurrent/futures/",
    "asyncio/",
    "aiohttp/",
    "proposals/",
)


def _function(frame: str) -> str:
    """'fn (path.py:123)' -> 'fn (path.py)': one entry per function, whatever the line."""
    head, sep, tail = frame.rpartition(":")
    return f"{head})" if sep and tail.rstrip(")").isdigit() else frame


def summarise(raw: Path, requests: int, seconds: float, top: int = 45) -> str:
    total = 0
    threads: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        threads[frames[0].split(":", 1)[-1].strip() or frames[0]] += n
        leaves[frames[-1]] += n
        for frame in {_function(f) for f in frames[1:]}:
            if any(key in frame for key in INTERESTING):
                inclusive[frame] += n
    if not total:
        return "no samples\n"

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    out = [
        f"{total} samples of the GIL-holding thread over {seconds:.1f} s;"
        f" {requests} requests completed in that window (wrk);"
        f" ~{seconds / max(requests, 1) * 1e6 * 1:.0f} us wall per request at this load",
        "",
        "GIL time by thread:",
        *(f"  {pct(n)}  {name}" for name, n in threads.most_common()),
        "",
        f"Inclusive by function (itself or anything it calls), top {top}:",
        *(f"  {pct(n)}  {frame}" for frame, n in inclusive.most_common(top)),
        "",
        "Self (leaf frames), top 25:",
        *(f"  {pct(n)}  {frame}" for frame, n in leaves.most_common(25)),
        "",
    ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--experiment", action="append", default=[])
    parser.add_argument(
        "--raw", action="store_true", help="keep the collapsed stacks in results/ (~0.4 MB)"
    )
    args = parser.parse_args()
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    cfg, _ = config_from_args(["--quick"])
    tmp = Path(tempfile.mkdtemp(prefix="satsgate-bench-profile-"))
    bench = Bench(cfg, tmp)
    # One satsgate server, with the experiments (if any) applied to it.
    bench.targets = [Target(cfg, tmp, "", args.experiment)]
    target = bench.stock
    stem = f"profile-{args.scenario}" + "".join(f"+{e}" for e in args.experiment)
    raw = (RESULTS if args.raw else tmp) / f"{stem}.raw"
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        log("starting servers")
        bench.start()
        bench.sanity(target)
        paid = {"paid_noop": target.noop, "paid_render": target.render}.get(args.scenario)
        if paid is not None:
            log("estimating the rate")
            bench.paid(target, paid, 2)
            count = paid.credentials_for_run(args.duration)
            creds = bench.credentials(target, paid, count)
            url = target.url + paid.path
            script = ["-s", str(LUA / "paid.lua"), url, "--", str(creds), paid.path, paid.body, "1"]
            conns = paid.connections
        elif args.scenario == "challenge_402_distinct":
            script = [
                "-s",
                str(LUA / "distinct.lua"),
                target.url + target.render.path,
                "--",
                RENDER_JSON_DISTINCT,
            ]
            conns = cfg.connections
        else:
            path, method, body = {
                "challenge_402": (target.render.path, "POST", RENDER_JSON),
                "challenge_402_noop": (target.noop.path, "POST", "{}"),
                "free_models": ("/api/l402/models", "GET", ""),
            }[args.scenario]
            script = ["-s", str(LUA / "static.lua"), target.url + path, "--", method, body, "1"]
            conns = cfg.connections
        log(f"wrk {args.scenario} for {args.duration} s, py-spy after 1 s")
        assert target.server is not None
        wrk = subprocess.Popen(
            [WRK, "-t1", f"-c{conns}", f"-d{args.duration}s", "--timeout", "10s", *script],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1)
        spy_seconds = max(1, args.duration - 2)
        spy = subprocess.run(
            [
                pyspy,
                "record",
                "-p",
                str(target.server.proc.pid),
                "-d",
                str(spy_seconds),
                "-r",
                str(args.rate),
                "--gil",
                "--threads",
                "-f",
                "raw",
                "-o",
                str(raw),
            ],
            capture_output=True,
            text=True,
        )
        stdout, _ = wrk.communicate(timeout=args.duration + 60)
        if spy.returncode != 0:
            print(spy.stderr, file=sys.stderr)
            return 1
        result = json.loads(
            next(x for x in stdout.splitlines() if x.startswith("BENCH_JSON "))[11:]
        )
        rps = result["requests"] / (result["duration_us"] / 1e6)
        text = (
            f"# {stem}: wrk -t1 -c{conns}, {rps:.0f} req/s, statuses {result['statuses']}\n\n"
            + summarise(raw, int(rps * spy_seconds), spy_seconds)
        )
        (RESULTS / f"{stem}.txt").write_text(text)
        print(text)
    finally:
        bench.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
