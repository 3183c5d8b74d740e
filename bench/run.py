"""satsgate load bench: one run, loopback, wrk in its own process; writes bench/results/.

    python bench/run.py            # full run (~3-4 min): 3 interleaved rounds of 5 s
    python bench/run.py --quick    # ~1 min: 1 round of 3 s

Scenarios (see bench/README.md): the bare aiohttp baseline, a free endpoint, the
402 challenge (real dev-node invoices), a paid no-op call (verify + spend +
dispatch), the paid render-card call; plus in-process timings of the render
engine and of the gate's own share of the 402 path. Every server is started and
stopped here, on free ports, with a temporary data dir.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import experiments
from inproc import time_render
from satsgate_server import NOOP_PRICE_MSAT, NOOP_SLUG, NOOP_SPEC, NoopParams
from seed import SeedSpec, seed, spec_for

from satsgate.config.settings import Settings
from satsgate.payments import l402
from satsgate.services.catalog.rates import FALLBACK
from satsgate.services.documents.rendering import RENDER_CARD

BENCH = Path(__file__).resolve().parent
LUA = BENCH / "lua"
RESULTS = BENCH / "results"
WRK = shutil.which("wrk") or "/usr/bin/wrk"

RENDER_BODY: dict[str, Any] = {
    "template": "headline",
    "title": "Lightning is fast",
    "subtitle": "satsgate",
}
RENDER_JSON = json.dumps(RENDER_BODY, separators=(",", ":"))
# The same card with a different title on every request (wrk fills in @N@).
RENDER_JSON_DISTINCT = RENDER_JSON.replace("Lightning is fast", "Lightning is fast @N@")

# Targets from issue 2 and the prototype's figures on this machine (for context only).
TARGET_NOOP_RATIO = 0.25
TARGET_402_RPS = 600.0
TARGET_GATE_SHARE_MS = 0.3
# A credential of the real size, for `baseline_post` (the baseline never reads it).
SAMPLE_AUTHORIZATION = (
    f"L402 {l402.mint('00' * 32, NOOP_SLUG, 2_000_000_000).macaroon_b64}:{'00' * 32}"
)
REFERENCE = {"baseline_rps": 33000, "challenge_402_rps": 750, "paid_noop_rps": 11500}


# -- processes --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self, timeout: float = 30.0) -> None:
        """Close stdin (the server's cue to shut down), then escalate by process group id."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(10)
        # Its own session: anything it spawned (render pool workers) goes with it.
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


def start_server(
    name: str,
    args: list[str],
    log_path: Path,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Server:
    """Start a bench server (``env``: its whole environment, else this process's); what it
    says of its own set-up (lines ``bench server: ...``, e.g. the limits it turned off) is
    said in this run's output too."""
    with log_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=BENCH.parent,
            start_new_session=True,
            env=env,
        )
    line: list[bytes] = []
    reader = threading.Thread(
        target=lambda: line.append(proc.stdout.readline() if proc.stdout else b""), daemon=True
    )
    reader.start()
    reader.join(timeout)
    text = line[0].decode().strip() if line else ""
    server = Server(name, proc, text.removeprefix("READY ").strip(), log_path)
    if not text.startswith("READY "):
        server.stop(5)
        raise RuntimeError(f"{name} did not start: {log_path.read_text()[-2000:]}")
    for said in log_path.read_text(errors="replace").splitlines():
        if said.startswith("bench server: "):
            log(f"{name}: {said.removeprefix('bench server: ')}")
    return server


# -- wrk --------------------------------------------------------------------------------------


@dataclass
class WrkResult:
    scenario: str
    connections: int
    requests: int
    duration_s: float
    rps: float
    latency_ms: dict[str, float]
    errors: dict[str, int]
    statuses: dict[str, int]
    exhausted_threads: int = 0
    credentials_used: int = 0
    credentials: int = 0
    # The server's process group (event loop, its threads, render pool) during the run:
    # CPU per request is far less sensitive to a busy machine than req/s.
    server_cpu_pct: float = 0.0
    cpu_us_per_request: float = 0.0
    # Paid render only: the render pool's submit -> result times of these calls (from the
    # server), and the engine alone in a spawned worker right after the run.
    render_pool: dict[str, Any] | None = None
    render_alone: dict[str, Any] | None = None

    @property
    def socket_errors(self) -> int:
        return sum(v for k, v in self.errors.items() if k != "status")


def _group_stats(pgid: int) -> Iterator[tuple[int, list[str]]]:
    """(pid, the /proc stat fields after "(comm)") of each process in one process group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == pgid:  # fields after "(comm)": state, ppid, pgrp, ...
            yield int(entry.name), fields


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the processes of one process group."""
    ticks = sum(int(f[11]) + int(f[12]) for _, f in _group_stats(pgid))  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def group_pids(pgid: int) -> list[int]:
    """The processes of one process group now."""
    return [pid for pid, _ in _group_stats(pgid)]


def run_wrk(
    scenario: str,
    server: Server,
    url: str,
    script: str,
    script_args: list[str],
    *,
    duration: float,
    connections: int,
    threads: int,
) -> WrkResult:
    cmd = [
        WRK,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",  # wrk takes whole seconds
        "--timeout",
        "10s",
        "-s",
        str(LUA / script),
        url,
        "--",
        *script_args,
    ]
    cpu0, t0 = group_cpu_s(server.proc.pid), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    cpu_s, wall_s = group_cpu_s(server.proc.pid) - cpu0, time.perf_counter() - t0
    data = None
    for line in out.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            data = json.loads(line.removeprefix("BENCH_JSON "))
    if out.returncode != 0 or data is None:
        raise RuntimeError(f"wrk failed ({scenario}): {out.stdout[-1500:]} {out.stderr[-1500:]}")
    secs = data["duration_us"] / 1e6
    return WrkResult(
        scenario=scenario,
        connections=connections,
        requests=data["requests"],
        duration_s=round(secs, 3),
        rps=round(data["requests"] / secs, 1) if secs else 0.0,
        latency_ms={k: round(v / 1000, 3) for k, v in data["latency_us"].items()},
        errors=data["errors"],
        statuses=data["statuses"],
        exhausted_threads=data["exhausted_threads"],
        credentials_used=data["credentials_used"],
        server_cpu_pct=round(100 * cpu_s / wall_s, 1),
        cpu_us_per_request=round(cpu_s / data["requests"] * 1e6, 1) if data["requests"] else 0,
    )


# -- HTTP checks (urllib: independent of satsgate's own client code) --------------------------


def http(
    method: str, url: str, body: str | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], list[str]]:
    data = body.encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read() or b"{}"), []
    except urllib.error.HTTPError as exc:
        challenges = exc.headers.get_all("WWW-Authenticate") or []
        return exc.code, json.loads(exc.read() or b"{}"), challenges


def check(cond: bool, what: str) -> None:
    if not cond:
        raise RuntimeError(f"sanity check failed: {what}")


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Config:
    quick: bool
    rounds: int
    duration: float
    connections: int
    threads: int
    render_connections: int
    c1_duration: float
    warmup: float
    inproc_iterations: int
    render_iterations: int
    cprofile: bool = False
    experiments: list[str] = field(default_factory=list)


@dataclass
class Paid:
    """A paid scenario: its seed spec, its path and body, and a running rate estimate."""

    name: str
    path: str
    body: str
    spec: SeedSpec
    connections: int
    rate: float = 1000.0
    files: list[Path] = field(default_factory=list)

    def credentials_for_run(self, duration: float) -> int:
        # Twice the expected count, plus a floor: a faster round must not run dry.
        return int(self.rate * duration * 2) + 50 * self.connections + 200


_T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


class Target:
    """One satsgate server under test (the stock one, or one with proposed changes applied)."""

    def __init__(self, cfg: Config, tmp: Path, suffix: str, experiments: list[str]) -> None:
        self.suffix = suffix  # "" or "+exp": appended to scenario names
        self.experiments = experiments
        self.data_dir = tmp / f"satsgate-data{suffix.replace('+', '-')}"
        self.settings = Settings(data_dir=self.data_dir)
        self.server: Server | None = None
        self.served_200: dict[str, int] = {NOOP_SLUG: 0, RENDER_CARD.slug: 0}
        render_params = RENDER_CARD.params.model_validate(RENDER_BODY)
        render_msat = RENDER_CARD.quote_sats(render_params, FALLBACK) * 1000
        noop_spec = spec_for(NOOP_SLUG, NOOP_SPEC.title, NOOP_PRICE_MSAT, NoopParams())
        self.noop = Paid("paid_noop", "/bench/noop", "{}", noop_spec, cfg.connections)
        self.noop_c1 = Paid("paid_noop_c1", "/bench/noop", "{}", noop_spec, 1)
        self.render = Paid(
            "paid_render",
            f"/api/l402/{RENDER_CARD.slug}",
            RENDER_JSON,
            spec_for(RENDER_CARD.slug, RENDER_CARD.title, render_msat, render_params),
            cfg.render_connections,
            rate=20.0,
        )

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url


class Bench:
    def __init__(self, cfg: Config, tmp: Path) -> None:
        self.cfg = cfg
        self.tmp = tmp
        self.servers: list[Server] = []
        self.base: Server | None = None
        self.targets = [Target(cfg, tmp, "", [])]
        if cfg.experiments:
            self.targets.append(Target(cfg, tmp, "+exp", cfg.experiments))
        self.seconds_seeding = 0.0
        # Spawned, not forked: a forked worker would inherit the servers' stdin pipes and
        # keep them open, and a server stops when its stdin closes.
        self.pool = ProcessPoolExecutor(
            max_workers=2, mp_context=multiprocessing.get_context("spawn")
        )

    @property
    def stock(self) -> Target:
        return self.targets[0]

    # servers

    def start(self) -> None:
        self.base = start_server(
            "baseline",
            [str(BENCH / "baseline_server.py"), "--port", str(free_port())],
            self.tmp / "baseline.log",
        )
        self.servers.append(self.base)
        for target in self.targets:
            args: list[str] = []
            if self.cfg.cprofile and not target.experiments:
                args += ["--cprofile", str(RESULTS / "satsgate_server.prof")]
            for name in target.experiments:
                args += ["--experiment", name]
            self.start_satsgate(target, "satsgate" + target.suffix, args)

    def start_satsgate(
        self, target: Target, name: str, args: list[str] | None = None, tree: Path | None = None
    ) -> Server:
        """Start ``target``'s satsgate server (its satsgate package from ``tree``, a source
        tree put first on PYTHONPATH, if given) and keep it for :meth:`stop`."""
        cmd = [
            str(BENCH / "satsgate_server.py"),
            "--port",
            str(free_port()),
            "--data-dir",
            str(target.data_dir),
            *(args or []),
        ]
        env_path = os.environ.get("PYTHONPATH", "")
        if tree is not None:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env_path) if p)
        try:
            target.server = start_server(name, cmd, self.tmp / f"{name}.log")
        finally:
            os.environ["PYTHONPATH"] = env_path
        self.servers.append(target.server)
        return target.server

    def stop(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        while self.servers:
            self.servers.pop().stop()

    # credentials

    def credentials(self, target: Target, paid: Paid, count: int) -> Path:
        path = self.tmp / f"{paid.name}{target.suffix}-{len(paid.files)}.creds"
        self.seconds_seeding += seed(target.settings, paid.spec, count, path, self.pool)
        paid.files.append(path)
        return path

    # checks before timing

    def sanity(self, target: Target) -> dict[str, Any]:
        assert self.base is not None
        status, _, _ = http("GET", self.base.url + "/")
        check(status == 200, "baseline GET / is 200")
        status, _, _ = http(
            "POST", self.base.url + "/", "{}", {"Authorization": SAMPLE_AUTHORIZATION}
        )
        check(status == 200, "baseline POST / is 200")
        status, doc, _ = http("GET", target.url + "/api/l402/models")
        check(status == 200 and "models" in doc, "GET /api/l402/models is 200")
        url_render = target.url + target.render.path
        status, doc, www = http("POST", url_render, RENDER_JSON)
        check(status == 402, f"render-card without Authorization is 402 (got {status})")
        check(str(doc.get("invoice", "")).startswith("lnbcrt"), "a real regtest invoice")
        check(any(v.startswith("L402 ") for v in www), "an L402 WWW-Authenticate challenge")
        # One real credential end to end: dev node pays the invoice, the call is served.
        status, paid, _ = http(
            "POST", target.url + "/api/dev/pay", json.dumps({"invoice": doc["invoice"]})
        )
        check(status == 200, "the dev node pays the invoice")
        auth = {"Authorization": f"L402 {doc['macaroon']}:{paid['preimage']}"}
        real_render = time.perf_counter()
        status, body, _ = http("POST", url_render, RENDER_JSON, auth)
        real_render = time.perf_counter() - real_render
        check(status == 200 and "image_base64" in body, "a real paid render-card call is 200")
        target.served_200[RENDER_CARD.slug] += 1
        # Seeded credentials behave the same, and are spent once.
        for kind in (target.noop, target.render):
            slug = kind.spec.slug
            creds = self.credentials(target, kind, 1).read_text().split()
            url = target.url + kind.path
            hdr = {"Authorization": f"L402 {creds[0]}"}
            status, _, _ = http("POST", url, kind.body, hdr)
            check(status == 200, f"a seeded {slug} credential is served 200 (got {status})")
            target.served_200[slug] += 1
            status, body, _ = http("POST", url, kind.body, {**hdr, "X-No-Cache": "1"})
            check(
                status != 200 and body.get("error_code") == "PAYMENT_ALREADY_USED",
                f"a spent {slug} credential is refused",
            )
        return {"first_real_paid_render_s": round(real_render, 3)}

    # scenarios

    def static(
        self,
        scenario: str,
        server: Server,
        path: str,
        method: str,
        body: str,
        duration: float,
        authorization: str = "",
    ) -> WrkResult:
        count = "1" if scenario.startswith("challenge_402") else "0"
        return run_wrk(
            scenario,
            server,
            server.url + path,
            "static.lua",
            [method, body, count, authorization],
            duration=duration,
            connections=self.cfg.connections,
            threads=self.cfg.threads,
        )

    def paid(
        self, target: Target, paid: Paid, duration: float, creds: Path | None = None
    ) -> WrkResult:
        """One wrk run of a paid scenario, on ``creds`` (seeded here when not given)."""
        count = paid.credentials_for_run(duration)
        if creds is None:
            creds = self.credentials(target, paid, count)
        threads = min(self.cfg.threads, paid.connections)
        assert target.server is not None
        if paid is target.render:
            http("GET", target.url + "/bench/stats")  # reset the pool timings
        result = run_wrk(
            paid.name + target.suffix,
            target.server,
            target.url + paid.path,
            "paid.lua",
            [str(creds), paid.path, paid.body, str(threads)],
            duration=duration,
            connections=paid.connections,
            threads=threads,
        )
        result.credentials = count
        if paid is target.render:
            # How long these very calls waited for the render pool (render + hand-off) ...
            _, stats, _ = http("GET", target.url + "/bench/stats")
            pool_ms = stats["pool_ms"].get("render_card", [])
            result.render_pool = {
                "n": len(pool_ms),
                "median_ms": round(statistics.median(pool_ms), 3) if pool_ms else None,
            }
            # ... and, right after, the engine alone in a spawned worker, as the pool runs it.
            result.render_alone = self.pool.submit(time_render, self.cfg.render_iterations).result()
        target.served_200[paid.spec.slug] += result.statuses.get("200", 0)
        # A run that ran dry measured its credentials, not the server: its rate is a
        # floor, so the next run gets four times as many.
        rate = result.rps * (4 if result.exhausted_threads else 1)
        paid.rate = max(paid.rate, rate)
        return result

    def one_round(self, duration: float) -> list[WrkResult]:
        """One wrk run per scenario and server."""
        assert self.base is not None
        out: list[WrkResult] = [
            self.static("baseline", self.base, "/", "GET", "", duration),
            self.static(
                "baseline_post", self.base, "/", "POST", "{}", duration, SAMPLE_AUTHORIZATION
            ),
        ]
        c1 = min(duration, self.cfg.c1_duration)
        for t in self.targets:
            sfx, sg = t.suffix, t.server
            assert sg is not None
            out += [
                self.static("free_models" + sfx, sg, "/api/l402/models", "GET", "", duration),
                self.static(
                    "challenge_402" + sfx, sg, t.render.path, "POST", RENDER_JSON, duration
                ),
                run_wrk(
                    "challenge_402_distinct" + sfx,
                    sg,
                    sg.url + t.render.path,
                    "distinct.lua",
                    [RENDER_JSON_DISTINCT],
                    duration=duration,
                    connections=self.cfg.connections,
                    threads=self.cfg.threads,
                ),
                self.static("challenge_402_noop" + sfx, sg, t.noop.path, "POST", "{}", duration),
                self.paid(t, t.noop, duration),
                self.paid(t, t.noop_c1, c1),
                self.paid(t, t.render, duration),
            ]
        return out

    def run(self) -> dict[str, Any]:
        started = time.time()
        load_before = os.getloadavg()
        log("starting servers")
        self.start()
        log("sanity checks")
        sanity = {t.suffix or "stock": self.sanity(t) for t in self.targets}
        log("warm-up round")
        warm = self.one_round(self.cfg.warmup)  # also sets the credential estimates
        rounds = []
        for index in range(self.cfg.rounds):
            log(f"round {index + 1}/{self.cfg.rounds}")
            rounds.append(self.one_round(self.cfg.duration))
        log("in-process timings")
        inproc = {t.suffix or "stock": run_inproc(self.cfg, t.experiments) for t in self.targets}
        load_after = os.getloadavg()
        log("stopping servers")
        store, served = {}, {}
        for t in self.targets:
            assert t.server is not None
            self.servers.remove(t.server)
            t.server.stop()  # the store is final only once the server has stopped
            store[t.suffix or "stock"] = store_counts(t.settings.db_path)
            served[t.suffix or "stock"] = dict(t.served_200)
        return {
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "wall_s": round(time.time() - started, 1),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            "sanity": sanity,
            "warmup": [r.__dict__ for r in warm],
            "rounds": [[r.__dict__ for r in rnd] for rnd in rounds],
            "inproc": inproc,
            "store": store,
            "served_200_by_wrk_and_checks": served,
            "seeding_s": round(self.seconds_seeding, 1),
        }


def run_inproc(cfg: Config, experiments: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH / "inproc.py"),
            "--iterations",
            str(cfg.inproc_iterations),
            "--render-iterations",
            "0",  # render time alone is measured in each round instead
            *(arg for name in experiments for arg in ("--experiment", name)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCH.parent,
    )
    if out.returncode != 0:
        raise RuntimeError(f"inproc.py failed: {out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def store_counts(db_path: Path) -> dict[str, dict[str, int]]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT service, status, COUNT(*) FROM payments GROUP BY service, status"
        ).fetchall()
    finally:
        conn.close()
    out: dict[str, dict[str, int]] = {}
    for service, status, n in rows:
        out.setdefault(service, {})[status] = n
    return out


# -- summary ----------------------------------------------------------------------------------

SCENARIO_INFO = {
    "baseline": ("bare aiohttp JSON handler (own process)", "GET /"),
    "baseline_post": (
        "the same handler for a POST like the paid call's (`{}` body parsed,"
        " an L402 Authorization header of the real size): context only",
        "POST /",
    ),
    "free_models": ("free endpoint", "GET /api/l402/models"),
    "challenge_402": ("402 challenge, real dev-node invoice", "POST /api/l402/render-card"),
    "challenge_402_distinct": (
        "402 challenge, a different title on every request",
        "POST /api/l402/render-card",
    ),
    "challenge_402_noop": ("402 challenge of the no-op service (no pre-check)", "POST /bench/noop"),
    "paid_noop": ("paid no-op: verify + spend + dispatch", "POST /bench/noop"),
    "paid_noop_c1": ("paid no-op, one connection (latency)", "POST /bench/noop"),
    "paid_render": ("paid render-card (PNG 1200x630)", "POST /api/l402/render-card"),
}
ORDER = [
    "baseline",
    "baseline_post",
    "free_models",
    "challenge_402",
    "challenge_402_distinct",
    "challenge_402_noop",
    "paid_noop",
    "paid_noop_c1",
    "paid_render",
]


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")


def summarise(raw: dict[str, Any], cfg: Config) -> dict[str, Any]:
    rounds: list[list[dict[str, Any]]] = raw["rounds"]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for rnd in rounds:
        for r in rnd:
            by_name.setdefault(r["scenario"], []).append(r)
    base_by_round = [next(r for r in rnd if r["scenario"] == "baseline")["rps"] for rnd in rounds]
    scenarios: dict[str, Any] = {}
    for name, runs in by_name.items():
        plain = name.removesuffix("+exp")
        ratios = [r["rps"] / base for r, base in zip(runs, base_by_round, strict=True) if base > 0]
        scenarios[name] = {
            "description": SCENARIO_INFO[plain][0],
            "endpoint": SCENARIO_INFO[plain][1],
            "connections": runs[0]["connections"],
            "rps_median": median([r["rps"] for r in runs]),
            "rps_by_round": [r["rps"] for r in runs],
            "ratio_to_baseline_median": median(ratios),
            "p50_ms_median": median([r["latency_ms"]["p50"] for r in runs]),
            "cpu_us_per_request_median": median([r["cpu_us_per_request"] for r in runs]),
            "server_cpu_pct_median": median([r["server_cpu_pct"] for r in runs]),
            "p99_ms_median": median([r["latency_ms"]["p99"] for r in runs]),
            "requests": sum(r["requests"] for r in runs),
            "non_2xx": sum(r["errors"]["status"] for r in runs),
            "socket_errors": sum(
                sum(v for k, v in r["errors"].items() if k != "status") for r in runs
            ),
            "statuses": _sum_statuses(runs),
            "exhausted_runs": sum(1 for r in runs if r["exhausted_threads"]),
        }
    out: dict[str, Any] = {"scenarios": scenarios, "by_target": {}}
    for key, sfx in (("stock", ""), ("+exp", "+exp")):
        if "paid_noop" + sfx not in scenarios:
            continue
        out["by_target"][key] = {
            "render_split": _render_split(rounds, sfx),
            "targets": _targets(scenarios, raw["inproc"][key], sfx),
        }
    if "+exp" in out["by_target"]:
        out["comparison"] = _comparison(rounds)
    out["verification"] = verify(raw, scenarios)
    return out


def _render_split(rounds: list[list[dict[str, Any]]], sfx: str) -> dict[str, Any]:
    """Per round: paid render p50 − the render pool's median for the same calls; medians."""
    full, pool, alone, noop, rest = [], [], [], [], []
    calls = 0
    for rnd in rounds:
        r = {x["scenario"]: x for x in rnd}["paid_render" + sfx]
        n_ms = {x["scenario"]: x for x in rnd}["paid_noop_c1" + sfx]["latency_ms"]["p50"]
        f_ms, p_ms = r["latency_ms"]["p50"], r["render_pool"]["median_ms"]
        full.append(f_ms)
        pool.append(p_ms)
        alone.append(r["render_alone"]["median_ms"])
        noop.append(n_ms)
        rest.append(f_ms - p_ms)
        calls = r["render_alone"]["n"]
    return {
        "paid_render_p50_ms": median(full),
        "render_pool_ms": median(pool),
        "gate_and_dispatch_ms": median(rest),
        "gate_and_dispatch_share": round(median(rest) / median(full), 3),
        "paid_noop_p50_ms_c1": median(noop),
        "rest_beyond_noop_ms": round(median(rest) - median(noop), 3),
        "render_engine_alone_ms": median(alone),
        "render_engine_calls_per_round": calls,
        "by_round_full_ms": full,
        "by_round_pool_ms": pool,
        "by_round_alone_ms": alone,
    }


def _targets(sc: dict[str, Any], inproc: dict[str, Any], sfx: str) -> list[dict[str, Any]]:
    gate_share_ms = inproc["gate_402"]["gate_share"]["median_ms"]
    noop = sc["paid_noop" + sfx]
    noop_ratio = noop["ratio_to_baseline_median"]
    rps_402 = sc["challenge_402" + sfx]["rps_median"]
    rps_402_distinct = sc["challenge_402_distinct" + sfx]["rps_median"]
    base_cpu = sc["baseline"]["cpu_us_per_request_median"]
    noop_cpu = noop["cpu_us_per_request_median"]
    return [
        {
            "target": "paid trivial call >= 25% of baseline req/s",
            "measured": f"{noop_ratio * 100:.1f}% ({noop['rps_median']:.0f}"
            f" vs {sc['baseline']['rps_median']:.0f} req/s); by server CPU per request:"
            f" {base_cpu:.0f} vs {noop_cpu:.0f} µs = {100 * base_cpu / max(noop_cpu, 1):.0f}%",
            "pass": noop_ratio >= TARGET_NOOP_RATIO,
        },
        {
            "target": ">= 600 req/s on the 402 path (dev node)",
            "measured": f"{rps_402:.0f} req/s (fixed body; {rps_402_distinct:.0f} req/s with a"
            " different title each time)",
            "pass": rps_402 >= TARGET_402_RPS,
        },
        {
            "target": "gate's own share of the 402 path < 0.3 ms (median)",
            "measured": f"{gate_share_ms:.3f} ms",
            "pass": gate_share_ms < TARGET_GATE_SHARE_MS,
        },
    ]


def _comparison(rounds: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Experimental server vs stock server, scenario by scenario, per round then median."""
    out = {}
    for name in ORDER[1:]:
        ratios, lat = [], []
        for rnd in rounds:
            by = {r["scenario"]: r for r in rnd}
            stock, exp = by.get(name), by.get(name + "+exp")
            if stock and exp and stock["rps"] > 0:
                ratios.append(exp["rps"] / stock["rps"])
                lat.append(exp["latency_ms"]["p50"] / max(stock["latency_ms"]["p50"], 1e-9))
        out[name] = {"rps_ratio_median": median(ratios), "p50_ratio_median": median(lat)}
    return out


def _sum_statuses(runs: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in runs:
        for code, n in r["statuses"].items():
            out[code] = out.get(code, 0) + n
    return out


def verify(raw: dict[str, Any], scenarios: dict[str, Any]) -> dict[str, Any]:
    problems = []
    for name, s in scenarios.items():
        plain = name.removesuffix("+exp")
        if plain.startswith("paid_"):
            others = {k: v for k, v in s["statuses"].items() if k != "200"}
            if s["non_2xx"] or others or s["socket_errors"]:
                problems.append(
                    f"{name}: {s['non_2xx']} non-2xx, statuses {s['statuses']},"
                    f" {s['socket_errors']} socket errors"
                )
            if s["exhausted_runs"]:
                problems.append(f"{name}: ran out of credentials in {s['exhausted_runs']} run(s)")
        elif plain.startswith("challenge_402"):
            if set(s["statuses"]) != {"402"} or s["socket_errors"]:
                problems.append(f"{name}: statuses {s['statuses']}, {s['socket_errors']} errors")
        elif s["non_2xx"] or s["socket_errors"]:
            problems.append(f"{name}: {s['non_2xx']} non-2xx, {s['socket_errors']} socket errors")
    spent: dict[str, dict[str, int]] = {}
    in_flight: dict[str, dict[str, int]] = {}
    counted = raw["served_200_by_wrk_and_checks"]
    for key, per_slug in counted.items():
        spent[key] = {slug: raw["store"][key].get(slug, {}).get("spent", 0) for slug in per_slug}
        # wrk stops on the clock: calls in flight then were served (spent) but never counted.
        in_flight[key] = {slug: spent[key][slug] - per_slug[slug] for slug in per_slug}
        for slug, extra in in_flight[key].items():
            if extra < 0:
                problems.append(
                    f"{key} {slug}: {per_slug[slug]} 200s counted, only {spent[key][slug]} spent"
                )
    return {
        "ok": not problems,
        "problems": problems,
        "spent_in_store": spent,
        "served_200_counted": counted,
        "spent_not_counted_in_flight_at_stop": in_flight,
    }


def tree_fingerprint() -> str:
    """sha256 over satsgate/'s Python sources as they are on disk (others edit it meanwhile)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((BENCH.parent / "satsgate").rglob("*.py")):
        digest.update(str(path.relative_to(BENCH.parent)).encode() + b"\0")
        with contextlib.suppress(OSError):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def git_head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=BENCH.parent
    ).stdout.strip()


def environment() -> dict[str, Any]:
    wrk_version = subprocess.run([WRK, "-v"], capture_output=True, text=True).stdout
    head = git_head()
    return {
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "wrk": wrk_version.splitlines()[0] if wrk_version else "?",
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "git_head": head,
        "satsgate_tree": tree_fingerprint(),
    }


def _scenario_rows(sc: dict[str, Any], names: list[str]) -> list[str]:
    rows = [
        "| Scenario | Endpoint | Conns | req/s (median) | req/s by round | vs baseline |"
        " p50 ms | p99 ms | Server CPU µs/req | Server CPU % | Requests | Non-2xx |"
        " Socket errors |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        s = sc[name]
        non2xx = f"{s['non_2xx']}"
        if name.startswith("challenge_402"):
            non2xx += " (all 402, expected)" if set(s["statuses"]) == {"402"} else " (!)"
        rows.append(
            f"| {s['description']} | `{s['endpoint']}` | {s['connections']} |"
            f" {s['rps_median']:.0f} | {', '.join(f'{v:.0f}' for v in s['rps_by_round'])} |"
            f" {s['ratio_to_baseline_median'] * 100:.1f}% | {s['p50_ms_median']:.2f} |"
            f" {s['p99_ms_median']:.2f} | {s['cpu_us_per_request_median']:.0f} |"
            f" {s['server_cpu_pct_median']:.0f} | {s['requests']} | {non2xx} |"
            f" {s['socket_errors']} |"
        )
    return rows


def render_markdown(doc: dict[str, Any]) -> str:
    cfg, summ, raw = doc["config"], doc["summary"], doc["raw"]
    sc = summ["scenarios"]
    keys = list(summ["by_target"])  # "stock" and maybe "+exp"
    has_exp = "+exp" in keys
    exps = ", ".join(experiments.expand(cfg["experiments"]))
    lines = [
        "# satsgate bench: " + ("latest run" if not has_exp else f"stock vs proposals ({exps})"),
        "",
        f"{raw['started_at']} · {'quick' if cfg['quick'] else 'full'} run · "
        f"{cfg['rounds']} round(s) of {cfg['duration']:g} s per scenario, interleaved · "
        f"wrk -t{cfg['threads']} -c{cfg['connections']} (render -c{cfg['render_connections']},"
        f" latency run -c1) · {doc['env']['cpus']} CPUs, load average"
        f" {raw['loadavg_before'][0]:.1f} before / {raw['loadavg_after'][0]:.1f} after ·"
        f" Python {doc['env']['python']}, aiohttp {doc['env']['aiohttp']} ·"
        f" git {doc['env']['git_head']}, satsgate/ sources sha256 {doc['env']['satsgate_tree']}"
        " (the working tree, uncommitted work included)",
        "",
        *(
            [
                f"**Warning: satsgate/ changed during this run** (git {doc['env']['git_head']}"
                f" → {doc['env']['git_head_after']}, sources {doc['env']['satsgate_tree']} →"
                f" {doc['env']['satsgate_tree_after']}): the servers ran the code of the start,"
                " the in-process timings (run last) the code of the end. Run again.",
                "",
            ]
            if doc["env"]["tree_changed_during_run"]
            else []
        ),
        "Figures are medians over the rounds of this one run; ratios are computed per round,"
        " then the median is taken. The machine is shared and noisy: compare within a run,"
        " not across runs.",
        "",
        *_scenario_rows(sc, ORDER),
    ]
    if has_exp:
        lines += [
            "",
            f"### The same scenarios on a second satsgate server with the proposals applied"
            f" ({exps}; see bench/experiments.py), same rounds",
            "",
            *_scenario_rows(sc, [n + "+exp" for n in ORDER[1:]]),
            "",
            "| Scenario | req/s with proposals ÷ stock (median of rounds) | p50 ratio |",
            "|---|---:|---:|",
            *(
                f"| {name} | {c['rps_ratio_median']:.2f}x | {c['p50_ratio_median']:.2f} |"
                for name, c in summ["comparison"].items()
            ),
        ]
    head = "| Target | Measured (stock) | Result |"
    rule = "|---|---|---|"
    if has_exp:
        head += " With proposals | Result |"
        rule += "---|---|"
    lines += ["", "## Targets", "", head, rule]
    stock_t = summ["by_target"]["stock"]["targets"]
    exp_t = summ["by_target"]["+exp"]["targets"] if has_exp else [None] * len(stock_t)
    for t, e in zip(stock_t, exp_t, strict=True):
        row = f"| {t['target']} | {t['measured']} | **{'PASS' if t['pass'] else 'FAIL'}** |"
        if e is not None:
            row += f" {e['measured']} | {'PASS' if e['pass'] else 'FAIL'} |"
        lines.append(row)
    post, noop = summ["scenarios"]["baseline_post"], summ["scenarios"]["paid_noop"]
    lines += [
        "",
        "Context, not a target: the paid no-op against `baseline_post`, a bare POST of the"
        f" same shape, is {100 * noop['rps_median'] / max(post['rps_median'], 1):.1f}%"
        f" ({noop['rps_median']:.0f} vs {post['rps_median']:.0f} req/s; server CPU per"
        f" request {post['cpu_us_per_request_median']:.0f} vs"
        f" {noop['cpu_us_per_request_median']:.0f} µs). The targets are judged against"
        " `GET /`, as the issue states them.",
    ]

    def cols(values: list[str]) -> str:
        return " | ".join(values[: len(keys)])

    splits = [summ["by_target"][k]["render_split"] for k in keys]
    gates = [raw["inproc"][k]["gate_402"] for k in keys]
    col_head = "Median ms" if not has_exp else "Median ms (stock) | with proposals"
    col_rule = "---:" if not has_exp else "---:|---:"
    lines += [
        "",
        "## Paid render-card: gate overhead vs render time",
        "",
        "The render pool's time is measured on the very calls wrk made (the bench server wraps"
        " the gate's CPU pool and records each job's submit → result time), so the"
        " subtraction compares like with like.",
        "",
        f"| Part | {col_head} |",
        f"|---|{col_rule}|",
        f"| full paid call, wrk -c{cfg['render_connections']} p50 | "
        + cols([f"{s['paid_render_p50_ms']:.2f}" for s in splits])
        + " |",
        "| waiting for the render pool (render + pickling/IPC), median of the same calls | "
        + cols([f"{s['render_pool_ms']:.2f}" for s in splits])
        + " |",
        "| **gate + dispatch** (full − pool, per round, then median) | "
        + cols(
            [
                f"**{s['gate_and_dispatch_ms']:.2f}** ({s['gate_and_dispatch_share'] * 100:.1f}%)"
                for s in splits
            ]
        )
        + " |",
        "| of which the gate path alone (paid no-op p50, -c1) | "
        + cols([f"{s['paid_noop_p50_ms_c1']:.2f}" for s in splits])
        + " |",
        "| rest: pre-check (check_fits), file save, base64 + JSON of the image, loop wake-ups | "
        + cols([f"{s['rest_beyond_noop_ms']:.2f}" for s in splits])
        + " |",
        "| for context: the engine alone in a spawned worker, right after the run"
        f" ({splits[0]['render_engine_calls_per_round']} calls) | "
        + cols([f"{s['render_engine_alone_ms']:.2f}" for s in splits])
        + " |",
        "",
        f"## The gate's own share of the 402 path (in-process, {gates[0]['gate_share']['n']}"
        " iterations)",
        "",
        "`Gate.challenge_for` timed with `perf_counter_ns`, minus the `backend.create_invoice`"
        " inside it (its instance method wrapped to time it), per iteration; median. The other"
        " steps of the 402 handler are shown for context (median, p90).",
        "",
        "| Step | Median ms | p90 ms |" + (" With proposals: median | p90 |" if has_exp else ""),
        "|---|---:|---:|" + ("---:|---:|" if has_exp else ""),
    ]
    labels = [
        ("gate_share", "**gate share** = challenge_for − create_invoice"),
        ("challenge_for", "Gate.challenge_for (total)"),
        ("create_invoice", "DevBackend.create_invoice (BOLT11 signing + node row)"),
        ("insert_payment", "in the share: Store.insert_payment (INSERT, loop's connection)"),
        ("challenge_of", "in the share: Gate.challenge_of (macaroon + MPP challenge)"),
        ("validate_params", "handler: validate_params (pydantic)"),
        ("prevalidate", "handler: prevalidate (render-card check_fits, in a thread)"),
        ("challenge_response", "handler: challenge_response (402 JSON + headers)"),
    ]
    for key, label in labels:
        cells = " | ".join(f"{g[key]['median_ms']:.3f} | {g[key]['p90_ms']:.3f}" for g in gates)
        lines.append(f"| {label} | {cells} |")
    paid = [g["paid_noop"] for g in gates if "paid_noop" in g]
    if len(paid) == len(gates):
        lines += [
            "",
            f"## The paid no-op call's gate steps (in-process, one call at a time,"
            f" {paid[0]['total']['n']} seeded credentials)",
            "",
            "| Step | Median ms | p90 ms |"
            + (" With proposals: median | p90 |" if has_exp else ""),
            "|---|---:|---:|" + ("---:|---:|" if has_exp else ""),
        ]
        for key, label in (
            ("total", "**all three**"),
            (
                "verify_authorization",
                "Gate.verify_authorization (parse, decode, preimage,"
                " store lookup, signature, caveats)",
            ),
            (
                "execute",
                "Gate.execute_credential (the spend that reads its row"
                " + dispatch to the no-op handler)",
            ),
            ("result_response", "result_response (the JSON response)"),
        ):
            cells = " | ".join(f"{p[key]['median_ms']:.3f} | {p[key]['p90_ms']:.3f}" for p in paid)
            lines.append(f"| {label} | {cells} |")
    v = summ["verification"]
    lines += [
        "",
        "## Verification",
        "",
        f"- Every paid request answered 200, no socket errors, every 402 request a 402:"
        f" **{'yes' if v['ok'] else 'NO'}**"
        + ("" if v["ok"] else f" — {'; '.join(v['problems'])}"),
        f"- Spent in the store after the run: {v['spent_in_store']}; 200s counted (wrk +"
        f" sanity checks): {v['served_200_counted']}; spent but not counted (in flight when"
        f" wrk's clock stopped, at most one per connection per run):"
        f" {v['spent_not_counted_in_flight_at_stop']}",
        "- Before timing, on each satsgate server: the 402 carries a real regtest invoice and"
        " an L402 challenge; one real credential (the dev node paid the invoice) was served"
        " 200; one seeded credential of each paid scenario was served 200 and then refused"
        " as PAYMENT_ALREADY_USED. Seconds for the first real paid render (spawns the render"
        f" pool): {', '.join(str(x['first_real_paid_render_s']) for x in raw['sanity'].values())}.",
        "",
        "## Notes",
        "",
        "- Paid scenarios use credentials pre-created in bulk directly in the store: each row"
        " has a real macaroon minted by `l402.mint` (its own root key and token id) and a"
        " random preimage whose sha256 is the payment hash, status `paid`; only the BOLT11"
        " string is a placeholder (it is never decoded on the paid path). A real invoice costs"
        " ~1-8 ms (BOLT11 signing and the dev node's fsynced INSERT: see the create_invoice"
        " row). The 402 scenarios use the real dev-node invoice path."
        f" Seeding took {raw['seeding_s']} s in all, outside the timed runs.",
        "- Each wrk thread reads its own slice of the credential file; its connections share"
        " one counter, so no credential is used twice; a thread that runs out stops (the run"
        " is bounded by the credentials). Each run gets about twice the credentials its"
        " measured rate needs.",
        "- `/bench/noop` is a bench-only route: the real app from `create_app`, plus a"
        ' ServiceSpec whose handler returns `{"ok": true}`, dispatched by'
        " `handle_paid_call(request, app[GATE], NOOP_SPEC)`.",
        "- wrk runs in its own process, each server in its own process (satsgate with its"
        " store thread, dev-node thread and a 2-process render pool); all share 2 cores."
        " The render-card call is measured at -c1 so that the render pool's time is not"
        " queueing; the -c1 no-op run gives the gate path's own latency.",
        f"- Prototype reference figures on this machine (context only): baseline"
        f" ~{REFERENCE['baseline_rps']} req/s, 402 ~{REFERENCE['challenge_402_rps']}/s,"
        f" verify+spend ~{REFERENCE['paid_noop_rps']}/s.",
        "",
    ]
    return "\n".join(lines)


def config_from_args(argv: list[str] | None = None) -> tuple[Config, bool]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="~1 minute: 1 round of 3 s")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--duration", type=float, help="seconds per scenario per round")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--render-connections", type=int, default=1)
    parser.add_argument(
        "--cprofile",
        action="store_true",
        help="run the satsgate server under cProfile (slows it down);"
        " writes bench/results/satsgate_server.prof",
    )
    parser.add_argument(
        "--experiment",
        action="append",
        default=[],
        help="also run a second satsgate server with this proposed change"
        " (see experiments.py), side by side in the same rounds; results go"
        " to results/compare-<names>.{md,json}, never latest.*",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, store)")
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    return Config(
        quick=quick,
        rounds=args.rounds or (1 if quick else 3),
        duration=args.duration or (3.0 if quick else 5.0),
        connections=args.connections,
        threads=args.threads,
        render_connections=args.render_connections,
        c1_duration=2.0 if quick else 3.0,
        warmup=1.0 if quick else 2.0,
        inproc_iterations=200 if quick else 500,
        render_iterations=8 if quick else 10,
        cprofile=args.cprofile,
        experiments=args.experiment,
    ), args.keep


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def main(argv: list[str] | None = None) -> int:
    cfg, keep = config_from_args(argv)
    unknown = set(cfg.experiments) - set(experiments.CHOICES)
    if unknown:
        print(
            f"unknown experiment(s) {sorted(unknown)}; choose from {experiments.CHOICES}",
            file=sys.stderr,
        )
        return 2
    if not Path(WRK).exists():
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="satsgate-bench-"))
    env = environment()
    bench = Bench(cfg, tmp)
    try:
        with sigterm_as_exit():
            raw = bench.run()
    finally:
        bench.stop()
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    env["git_head_after"] = git_head()
    env["satsgate_tree_after"] = tree_fingerprint()
    env["tree_changed_during_run"] = env["satsgate_tree_after"] != env["satsgate_tree"]
    doc = {"config": cfg.__dict__, "env": env, "raw": raw, "summary": summarise(raw, cfg)}
    stem = "latest" if not cfg.experiments else "compare-" + "+".join(cfg.experiments)
    (RESULTS / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = render_markdown(doc)
    (RESULTS / f"{stem}.md").write_text(md)
    print(md)
    return 0 if doc["summary"]["verification"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
