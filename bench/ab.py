"""A/B of two satsgate source trees on one scenario, interleaved, in one run.

    python bench/ab.py HEAD~1                  # that commit (A) against the work tree (B)
    python bench/ab.py HEAD~1 HEAD --rounds 7  # two commits
    python bench/ab.py HEAD --scenario challenge_402_noop

For a change too small to tell apart across two runs of ``run.py`` on a noisy
machine: both servers run side by side, wrk alternates between them round after
round (A B B A A B ...), and the median of the per-round ratios B/A is reported,
with the baseline's ``GET /`` measured in every round as well. A commit is checked
out into a temporary git worktree; its ``satsgate`` package is put first on the
server's ``PYTHONPATH``, so the installed one (the work tree) is shadowed. The bench
scripts themselves (``bench/``) always come from the work tree.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from run import (
    BENCH,
    Bench,
    Config,
    Target,
    WrkResult,
    free_port,
    log,
    start_server,
)

ROOT = BENCH.parent
SCENARIOS = ("paid_noop", "challenge_402_noop")


@contextlib.contextmanager
def source_tree(rev: str | None, tmp: Path) -> Iterator[Path]:
    """The work tree (rev None), or ``rev`` checked out in a temporary worktree."""
    if rev is None:
        yield ROOT
        return
    path = tmp / f"tree-{rev.replace('/', '_').replace('~', '_')}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), rev],
        check=True,
    )
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False
        )


def one_run(bench: Bench, scenario: str, target: Target, duration: float) -> WrkResult:
    if scenario == "paid_noop":
        return bench.paid(target, target.noop, duration)
    assert target.server is not None
    return bench.static(
        "challenge_402_noop", target.server, target.noop.path, "POST", "{}", duration
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a", help="git revision for A")
    parser.add_argument("b", nargs="?", help="git revision for B (default: the work tree)")
    parser.add_argument("--scenario", choices=SCENARIOS, default="paid_noop")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    cfg = Config(
        quick=True,
        rounds=args.rounds,
        duration=args.duration,
        connections=args.connections,
        threads=1,
        render_connections=1,
        c1_duration=args.duration,
        warmup=1.0,
        inproc_iterations=0,
        render_iterations=0,
    )
    with tempfile.TemporaryDirectory(prefix="satsgate-ab-") as tmp_name:
        tmp = Path(tmp_name)
        bench = Bench(cfg, tmp)
        a_target, b_target = bench.stock, Target(cfg, tmp, "+b", [])
        try:
            with source_tree(args.a, tmp) as tree_a, source_tree(args.b, tmp) as tree_b:
                bench.base = start_server(
                    "baseline",
                    [str(BENCH / "baseline_server.py"), "--port", str(free_port())],
                    tmp / "baseline.log",
                )
                bench.servers.append(bench.base)
                for name, tree, target in (("A", tree_a, a_target), ("B", tree_b, b_target)):
                    bench.start_satsgate(target, name, tree=tree)
                log("warm-up")
                for target in (a_target, b_target):
                    one_run(bench, args.scenario, target, 1.0)
                rows: list[tuple[float, float, float, float, float]] = []
                for index in range(args.rounds):
                    order = (a_target, b_target) if index % 2 == 0 else (b_target, a_target)
                    base = bench.static("baseline", bench.base, "/", "GET", "", args.duration)
                    results = {
                        t.suffix: one_run(bench, args.scenario, t, args.duration) for t in order
                    }
                    a, b = results[""], results["+b"]
                    for r in (a, b):
                        if r.exhausted_threads or r.statuses.keys() - {"200", "402"}:
                            raise SystemExit(f"bad run: {r.statuses} {r.exhausted_threads}")
                    rows.append(
                        (base.rps, a.rps, b.rps, a.cpu_us_per_request, b.cpu_us_per_request)
                    )
                    log(
                        f"round {index + 1}: baseline {base.rps:.0f}  A {a.rps:.0f} req/s"
                        f" {a.cpu_us_per_request:.0f} us  B {b.rps:.0f} req/s"
                        f" {b.cpu_us_per_request:.0f} us"
                    )
        finally:
            bench.stop()
    med = statistics.median
    print(
        f"scenario {args.scenario}, {args.rounds} rounds of {args.duration:g} s,"
        f" A={args.a} B={args.b or 'work tree'}"
    )
    print(f"baseline GET /: {med(r[0] for r in rows):.0f} req/s")
    for label, i, j in (("A", 1, 3), ("B", 2, 4)):
        ratio = med(r[i] / r[0] for r in rows)
        print(
            f"{label}: {med(r[i] for r in rows):.0f} req/s, {ratio:.1%} of baseline,"
            f" {med(r[j] for r in rows):.0f} us server CPU/req"
        )
    print(
        f"B/A req/s per round, median: {med(r[2] / r[1] for r in rows):.3f}"
        f" (range {min(r[2] / r[1] for r in rows):.3f}-{max(r[2] / r[1] for r in rows):.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
