"""Paid no-op calls on SQLite, on PostgreSQL with one instance, and with two (issue 29).

    python bench/scale.py            # ~2 min: 3 interleaved rounds of 5 s per set-up
    python bench/scale.py --quick    # ~1 min: 1 round of 3 s

One run, side by side, on a throwaway PostgreSQL cluster on this machine
(tests/pg_cluster.py: the tests' settings, fsync off):

* ``sqlite``: one bench server (bench/satsgate_server.py) on its SQLite file, one wrk
  (``-t1 -c32``);
* ``pg_1``: instance A on PostgreSQL, one wrk (``-t1 -c32``); instance B is up, idle;
* ``pg_2``: instances A and B on the same database and the same data dir (one server
  secret: the seeded macaroons verify at both), two wrk processes started together,
  ``-t1 -c16`` each on its own credentials; their req/s summed.

The set-ups take turns round after round (the order rotates), so each round's figures
are of the same moment of a shared machine. Then a counting run: a third instance whose
store connections pass through a relay that reads the PostgreSQL wire (the server's
ReadyForQuery messages are the round trips; the client's Parse/Bind/Execute and Query
messages name the statements), over a known number of paid calls, less the same
instance's idle traffic over the same time. Writes ``results/scale.md`` and
``results/scale.json``.

    python bench/scale.py --instance-cpu 0.4   # each satsgate instance held to 0.4 core

With ``--instance-cpu``, every satsgate server (all its processes) runs in a cgroup of its
own whose CPU quota is that share of one core (cgroup v1 ``cpu.cfs_quota_us``, or v2
``cpu.max``), while wrk and PostgreSQL are not held. On a machine whose cores the load
generator, PostgreSQL and the instances share, two unheld instances measure what the
machine has left over; held, each gets the same CPU in ``pg_1`` and ``pg_2``, so the
ratio says whether a second instance adds what it is given (nothing shared between
them, the database included, holding it back).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.pg_cluster

from run import (  # noqa: E402
    LUA,
    RESULTS,
    WRK,
    Server,
    check,
    free_port,
    group_cpu_s,
    group_pids,
    http,
    log,
    start_server,
    store_counts,
)
from satsgate_server import NOOP_PRICE_MSAT, NOOP_SLUG, NOOP_SPEC, NoopParams  # noqa: E402
from seed import seed, spec_for  # noqa: E402

from satsgate.config.settings import Settings  # noqa: E402
from tests.pg_cluster import PgCluster, postgres_bindir  # noqa: E402

BENCH = Path(__file__).resolve().parent
SETUPS = ("sqlite", "pg_1", "pg_2")
# Targets of issue 29.
TARGET_PG_SHARE = 0.60  # PostgreSQL one instance / SQLite, paid calls/s
TARGET_TWO_OVER_ONE = 1.3
TARGET_P99_MS = 20.0
TARGET_ROUND_TRIPS = 3.0
# libpq would otherwise open with an SSLRequest (or GSSENCRequest), whose one-byte
# answer has no length: the relay reads plain protocol messages only.
PLAIN = "sslmode=disable&gssencmode=disable"


# -- wrk, one or two at once ------------------------------------------------------------------


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_wrk(url: str, creds: Path, connections: int, duration_s: int) -> subprocess.Popen[str]:
    cmd = [
        WRK,
        "-t1",
        f"-c{connections}",
        f"-d{duration_s}s",
        "--timeout",
        "10s",
        "-s",
        str(LUA / "paid.lua"),
        url + "/bench/noop",
        "--",
        str(creds),
        "/bench/noop",
        "{}",
        "1",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_wrk(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    for line in out.splitlines():
        if line.startswith("BENCH_JSON "):
            data: dict[str, Any] = json.loads(line.removeprefix("BENCH_JSON "))
            if proc.returncode == 0:
                return data
    raise RuntimeError(f"wrk failed: {out[-1500:]} {err[-1500:]}")


def postgres_cpu_s(cluster: PgCluster) -> float:
    """CPU seconds used so far by the cluster's postmaster and its children (backends,
    writers): the database's share of the machine."""
    pid = int((cluster.dir / "data" / "postmaster.pid").read_text().split()[0])
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:  # fields[1]: the parent
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


class CpuCap:
    """One cgroup per held server: its processes get at most ``share`` of one core."""

    PERIOD_US = 10_000  # short: a held server waits at most this long for its quota

    def __init__(self, share: float) -> None:
        self.share = share
        v1 = Path("/sys/fs/cgroup/cpu")
        self.v1 = (v1 / "cpu.cfs_quota_us").exists()
        self.root = v1 if self.v1 else Path("/sys/fs/cgroup")
        self.groups: list[Path] = []

    def hold(self, name: str, pgid: int) -> None:
        group = self.root / f"satsgate-bench-{name}-{os.getpid()}"
        group.mkdir()
        self.groups.append(group)
        quota = int(self.share * self.PERIOD_US)
        if self.v1:
            (group / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (group / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
        # The server's processes now (its pools started with it); what they start later
        # is born in the group.
        for pid in group_pids(pgid):
            with contextlib.suppress(OSError):  # gone meanwhile
                (group / "cgroup.procs").write_text(str(pid))

    def throttled_s(self) -> float:
        """Seconds the held servers were kept waiting by their quota, all groups."""
        total = 0
        for group in self.groups:
            for line in (group / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "throttled_time":  # v1, ns
                    total += int(value) // 1000
                elif key == "throttled_usec":  # v2
                    total += int(value)
        return total / 1e6

    def release(self) -> None:
        for group in self.groups:
            with contextlib.suppress(OSError):  # a process still in it: left for the OS
                group.rmdir()
        self.groups.clear()


# -- the set-ups ------------------------------------------------------------------------------


@dataclass
class Instance:
    name: str
    settings: Settings
    server: Server | None = None
    rate: float = 1500.0  # paid calls/s through this instance, for the credentials' count

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url


@dataclass
class Run:
    setup: str
    rps: float
    requests: int
    p50_ms: float  # the worse of the two wrk processes' in pg_2
    p99_ms: float
    max_ms: float
    server_cpu_us: float  # satsgate's CPU per paid call (the servers' process groups)
    postgres_cpu_us: float  # PostgreSQL's CPU per paid call (0 on SQLite)
    wrk_cpu_us: float  # the load generator's CPU per paid call (every wrk process)
    statuses: dict[str, int]
    socket_errors: int
    exhausted: int
    per_wrk: list[dict[str, Any]] = field(default_factory=list)
    throttled_s: float = 0.0  # with --instance-cpu: time the held servers waited for quota


class Scale:
    def __init__(self, args: argparse.Namespace, tmp: Path, cluster: PgCluster) -> None:
        self.args = args
        self.tmp = tmp
        self.cluster = cluster
        self.db_url = cluster.new_database() + "?" + PLAIN
        self.spec = spec_for(NOOP_SLUG, NOOP_SPEC.title, NOOP_PRICE_MSAT, NoopParams())
        self.sqlite = Instance("sqlite", Settings(data_dir=tmp / "sqlite"))
        pg = Settings(data_dir=tmp / "pg", store_url=self.db_url)
        self.a = Instance("pg_a", pg)
        self.b = Instance("pg_b", pg)
        self.servers: list[Server] = []
        self.served: Counter[str] = Counter()  # 200s by store: "sqlite", "pg"
        self.seeding_s = 0.0
        self.files = 0
        self.pool = ProcessPoolExecutor(
            max_workers=2, mp_context=multiprocessing.get_context("spawn")
        )
        self.cap = CpuCap(args.instance_cpu) if args.instance_cpu else None

    def start(self, inst: Instance, store_url: str = "") -> Server:
        args = [
            str(BENCH / "satsgate_server.py"),
            "--port",
            str(free_port()),
            "--data-dir",
            str(inst.settings.data_dir),
        ]
        url = store_url or inst.settings.store_url
        if url:
            args += ["--store-url", url]
        inst.server = start_server(inst.name, args, self.tmp / f"{inst.name}.log")
        self.servers.append(inst.server)
        if self.cap is not None:
            self.cap.hold(inst.name, inst.server.proc.pid)
        return inst.server

    def stop(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        while self.servers:
            self.servers.pop().stop()
        if self.cap is not None:
            self.cap.release()

    def credentials(self, inst: Instance, count: int) -> Path:
        self.files += 1
        path = self.tmp / f"{inst.name}-{self.files}.creds"
        self.seeding_s += seed(inst.settings, self.spec, count, path, self.pool)
        return path

    def sanity(self) -> None:
        """A seeded credential is served once; on PostgreSQL, spent at A it is refused at B."""
        for first, second, store in (
            (self.sqlite, self.sqlite, "sqlite"),
            (self.a, self.b, "pg"),
            (self.b, self.a, "pg"),
        ):
            cred = self.credentials(first, 1).read_text().split()[0]
            hdr = {"Authorization": f"L402 {cred}"}
            status, _, _ = http("POST", first.url + "/bench/noop", "{}", hdr)
            check(status == 200, f"a seeded credential is served at {first.name} ({status})")
            self.served[store] += 1
            status, body, _ = http(
                "POST", second.url + "/bench/noop", "{}", {**hdr, "X-No-Cache": "1"}
            )
            check(
                status != 200 and body.get("error_code") == "PAYMENT_ALREADY_USED",
                f"spent at {first.name}, refused at {second.name}",
            )

    def one(self, setup: str, duration_s: int) -> Run:
        """One timed run of ``setup`` (32 connections in all)."""
        conns = self.args.connections
        targets = {"sqlite": [self.sqlite], "pg_1": [self.a], "pg_2": [self.a, self.b]}[setup]
        per = conns // len(targets)
        files = [
            self.credentials(i, int(i.rate * duration_s * 2) + 50 * per + 200) for i in targets
        ]
        servers = [i.server for i in targets if i.server is not None]
        cpu0 = sum(group_cpu_s(s.proc.pid) for s in servers)
        pg0 = postgres_cpu_s(self.cluster)
        held0 = self.cap.throttled_s() if self.cap is not None else 0.0
        wrk0 = children_cpu_s()
        procs = [start_wrk(i.url, f, per, duration_s) for i, f in zip(targets, files, strict=True)]
        results = [finish_wrk(p, duration_s + 120) for p in procs]
        wrk_cpu = children_cpu_s() - wrk0  # the wrk processes are the only children reaped
        cpu = sum(group_cpu_s(s.proc.pid) for s in servers) - cpu0
        pg_cpu = postgres_cpu_s(self.cluster) - pg0 if setup != "sqlite" else 0.0
        held = self.cap.throttled_s() - held0 if self.cap is not None else 0.0
        requests = sum(int(r["requests"]) for r in results)
        rps = sum(r["requests"] / (r["duration_us"] / 1e6) for r in results)
        statuses: Counter[str] = Counter()
        for r in results:
            statuses.update({k: int(v) for k, v in r["statuses"].items()})
        self.served["sqlite" if setup == "sqlite" else "pg"] += statuses.get("200", 0)
        for inst, r in zip(targets, results, strict=True):
            rate = r["requests"] / (r["duration_us"] / 1e6)
            inst.rate = max(inst.rate, rate * (4 if r["exhausted_threads"] else 1))
        return Run(
            setup=setup,
            rps=round(rps, 1),
            requests=requests,
            p50_ms=max(r["latency_us"]["p50"] for r in results) / 1000,
            p99_ms=max(r["latency_us"]["p99"] for r in results) / 1000,
            max_ms=max(r["latency_us"]["max"] for r in results) / 1000,
            server_cpu_us=round(cpu / requests * 1e6, 1) if requests else 0.0,
            postgres_cpu_us=round(pg_cpu / requests * 1e6, 1) if requests else 0.0,
            wrk_cpu_us=round(wrk_cpu / requests * 1e6, 1) if requests else 0.0,
            statuses=dict(statuses),
            socket_errors=sum(v for r in results for k, v in r["errors"].items() if k != "status"),
            exhausted=sum(int(r["exhausted_threads"]) for r in results),
            throttled_s=round(held, 2),
            per_wrk=[
                {
                    "instance": i.name,
                    "connections": per,
                    "requests": r["requests"],
                    "rps": round(r["requests"] / (r["duration_us"] / 1e6), 1),
                    "latency_ms": {k: v / 1000 for k, v in r["latency_us"].items()},
                }
                for i, r in zip(targets, results, strict=True)
            ],
        )

    def count_round_trips(self, duration_s: int, idle_s: float) -> dict[str, Any]:
        """A third instance (C) whose store goes through a counting relay: its wire
        traffic over ``duration_s`` of paid calls at 32 connections (the calls counted
        in the store), less its idle traffic over as long."""
        relay = Relay(self.cluster.port)
        relay.start()
        try:
            c = Instance("pg_c", self.a.settings)
            url = self.db_url.replace(f":{self.cluster.port}/", f":{relay.port}/")
            self.start(c, url)
            # Credentials for twice pg_1's rate: wrk's clock ends the run, not they.
            creds = self.credentials(c, int(self.a.rate * duration_s * 2) + 2000)
            time.sleep(3)  # past its start-up (recovery, first duty claims)
            idle_before = relay.counted_over(idle_s)
            spent0 = pg_spent(self.db_url)
            started = relay.snapshot()
            t0 = time.perf_counter()
            data = finish_wrk(
                start_wrk(c.url, creds, self.args.connections, duration_s), duration_s + 120
            )
            # The calls in flight when wrk ran out (it counts none of them) end, and
            # the last calls' deferred writes (the answered mark) land, just after.
            time.sleep(0.5)
            busy = relay.snapshot() - started
            busy_s = time.perf_counter() - t0
            calls = pg_spent(self.db_url) - spent0  # A and B are idle meanwhile
            idle_after = relay.counted_over(idle_s)
            if c.server is not None:
                self.servers.remove(c.server)
                c.server.stop()
        finally:
            relay.stop()
        served = int(data["statuses"].get("200", 0))
        self.served["pg"] += calls  # every call spent was served (the in-flight ones too)
        non_200 = {k: v for k, v in data["statuses"].items() if k != "200"}
        check(not non_200, f"counting run: every answer 200 ({non_200})")
        check(
            served <= calls <= served + self.args.connections,
            f"counting run: {calls} spent, {served} answers 200 counted by wrk",
        )
        idle_rate = (idle_before + idle_after).scaled(1 / (2 * idle_s))
        background = idle_rate.scaled(busy_s)
        per_call = (busy.round_trips - background.round_trips) / calls
        statements: list[dict[str, Any]] = []
        for text, n in (busy.statements - Counter()).most_common():
            bg = background.statements.get(text, 0.0)
            statements.append(
                {
                    "statement": " ".join(text.split())[:300],
                    "per_call": round((n - bg) / calls, 3),
                    "busy": n,
                    "background_estimate": round(bg, 1),
                }
            )
        return {
            "calls": calls,
            "answers_200_counted_by_wrk": served,
            "rps_through_relay": round(served / (data["duration_us"] / 1e6), 1),
            "wrk_exhausted": int(data["exhausted_threads"]),
            "busy_s": round(busy_s, 2),
            "round_trips_busy": busy.round_trips,
            "round_trips_background_per_s": round(idle_rate.round_trips, 2),
            "round_trips_per_call": round(per_call, 3),
            "statements": [s for s in statements if abs(s["per_call"]) >= 0.005],
            "connections_opened": busy.connections + idle_before.connections,
        }

    def run(self) -> dict[str, Any]:
        started = time.time()
        load_before = os.getloadavg()
        log("starting servers: sqlite, pg_a, pg_b")
        self.start(self.sqlite)
        self.start(self.a)
        self.start(self.b)
        log("sanity checks")
        self.sanity()
        log("warm-up")
        for setup in SETUPS:
            self.one(setup, 2)
        rounds: list[list[Run]] = []
        for index in range(self.args.rounds):
            order = SETUPS[index % 3 :] + SETUPS[: index % 3]
            log(f"round {index + 1}/{self.args.rounds}: {', '.join(order)}")
            rounds.append([self.one(s, self.args.duration) for s in order])
            log(
                "  "
                + ", ".join(f"{r.setup} {r.rps:.0f}/s p99 {r.p99_ms:.1f} ms" for r in rounds[-1])
            )
        load_after = os.getloadavg()
        log(f"counting round trips over {self.args.count_s} s of paid calls")
        counting = self.count_round_trips(self.args.count_s, self.args.idle)
        log(f"  {counting['round_trips_per_call']} round trips per paid call")
        log("stopping servers")
        for server in list(self.servers):
            server.stop()
            self.servers.remove(server)
        sqlite_counts = store_counts(self.sqlite.settings.db_path)
        pg_counts = pg_store_counts(self.db_url)
        return {
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "wall_s": round(time.time() - started, 1),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after_rounds": [round(x, 2) for x in load_after],
            "config": {
                "rounds": self.args.rounds,
                "duration_s": self.args.duration,
                "connections": self.args.connections,
                "instance_cpu": self.args.instance_cpu,
                "postgres": postgres_settings(self.db_url),
            },
            "rounds": [[r.__dict__ for r in rnd] for rnd in rounds],
            "counting": counting,
            "store": {"sqlite": sqlite_counts, "pg": pg_counts},
            "served_200": dict(self.served),
            "seeding_s": round(self.seeding_s, 1),
        }


def pg_spent(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM payments WHERE status IN ('serving', 'spent')"
        ).fetchone()
    return int(row[0]) if row else 0


def pg_store_counts(url: str) -> dict[str, dict[str, int]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT service, status, COUNT(*) FROM payments GROUP BY service, status"
        ).fetchall()
    out: dict[str, dict[str, int]] = {}
    for service, status, n in rows:
        out.setdefault(service, {})[status] = n
    return out


def postgres_settings(url: str) -> dict[str, str]:
    import psycopg

    names = [
        "server_version",
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_level",
        "shared_buffers",
        "max_connections",
    ]
    with psycopg.connect(url) as conn:
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]


# -- the counting relay -----------------------------------------------------------------------


@dataclass
class Tally:
    round_trips: float = 0.0  # the server's ReadyForQuery ('Z') messages
    connections: int = 0
    statements: Counter[str] = field(default_factory=Counter)

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.round_trips + other.round_trips,
            self.connections + other.connections,
            self.statements + other.statements,
        )

    def __sub__(self, other: Tally) -> Tally:
        out = Counter(self.statements)
        out.subtract(other.statements)
        return Tally(
            self.round_trips - other.round_trips, self.connections - other.connections, out
        )

    def scaled(self, factor: float) -> Tally:
        return Tally(
            self.round_trips * factor,
            self.connections,
            Counter({k: v * factor for k, v in self.statements.items()}),
        )


class Relay:
    """A TCP relay to PostgreSQL on its own thread and event loop, reading both
    directions' protocol messages as they pass (never changing them)."""

    def __init__(self, pg_port: int) -> None:
        self.pg_port = pg_port
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.lock = threading.Lock()
        self.tally = Tally()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> None:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._client, "127.0.0.1", self.port), self.loop
        )
        self._server = fut.result(10)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def snapshot(self) -> Tally:
        with self.lock:
            return self.tally + Tally()

    def counted_over(self, seconds: float) -> Tally:
        before = self.snapshot()
        time.sleep(seconds)
        return self.snapshot() - before

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.pg_port)
        with self.lock:
            self.tally.connections += 1
        prepared: dict[bytes, str] = {}
        bound = [""]

        def from_client(kind: int, body: bytes) -> None:
            if kind == ord("P"):  # Parse: name, query
                name, rest = body.split(b"\0", 1)
                prepared[name] = rest.split(b"\0", 1)[0].decode(errors="replace")
            elif kind == ord("B"):  # Bind: portal, statement name
                bound[0] = prepared.get(body.split(b"\0", 2)[1], "?")
            elif kind == ord("E"):  # Execute the bound statement
                with self.lock:
                    self.tally.statements[bound[0]] += 1
            elif kind == ord("Q"):  # a simple query
                with self.lock:
                    self.tally.statements[body.rstrip(b"\0").decode(errors="replace")] += 1

        def from_server(kind: int, body: bytes) -> None:
            if kind == ord("Z"):
                with self.lock:
                    self.tally.round_trips += 1

        await asyncio.gather(
            _pump(reader, up_writer, from_client, startup=True),
            _pump(up_reader, writer, from_server, startup=False),
            return_exceptions=True,
        )


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    on_message: Any,
    *,
    startup: bool,
) -> None:
    """Copy ``reader`` to ``writer``, calling ``on_message(type, body)`` per message (the
    client's first message, the startup packet, has no type byte)."""
    buf = b""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            writer.write(chunk)
            buf += chunk
            while True:
                if startup:
                    if len(buf) < 4:
                        break
                    (length,) = struct.unpack("!i", buf[:4])
                    if len(buf) < length:
                        break
                    buf, startup = buf[length:], False
                    continue
                if len(buf) < 5:
                    break
                (length,) = struct.unpack("!i", buf[1:5])
                if len(buf) < 1 + length:
                    break
                on_message(buf[0], buf[5 : 1 + length])
                buf = buf[1 + length :]
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


# -- the summary ------------------------------------------------------------------------------


def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    by: dict[str, list[dict[str, Any]]] = {s: [] for s in SETUPS}
    for rnd in raw["rounds"]:
        for r in rnd:
            by[r["setup"]].append(r)

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 2) if values else float("nan")

    setups = {
        s: {
            "rps_median": med([r["rps"] for r in runs]),
            "rps_by_round": [r["rps"] for r in runs],
            "p50_ms_median": med([r["p50_ms"] for r in runs]),
            "p99_ms_median": med([r["p99_ms"] for r in runs]),
            "p99_ms_worst": max(r["p99_ms"] for r in runs),
            "server_cpu_us_median": med([r["server_cpu_us"] for r in runs]),
            "postgres_cpu_us_median": med([r["postgres_cpu_us"] for r in runs]),
            "wrk_cpu_us_median": med([r["wrk_cpu_us"] for r in runs]),
            "non_200": sum(n for r in runs for k, n in r["statuses"].items() if k != "200"),
            "socket_errors": sum(r["socket_errors"] for r in runs),
            "exhausted_runs": sum(1 for r in runs if r["exhausted"]),
        }
        for s, runs in by.items()
    }
    # Ratios within each round (the same moment of the machine), then their median.
    pg_share, two_over_one = [], []
    for rnd in raw["rounds"]:
        r = {x["setup"]: x["rps"] for x in rnd}
        pg_share.append(r["pg_1"] / r["sqlite"])
        two_over_one.append(r["pg_2"] / r["pg_1"])
    trips = raw["counting"]["round_trips_per_call"]
    worst_p99 = max(setups[s]["p99_ms_median"] for s in SETUPS)
    targets = [
        {
            "target": "PostgreSQL one instance >= 60% of SQLite's paid calls/s",
            "measured": f"{100 * statistics.median(pg_share):.0f}% (per round:"
            f" {', '.join(f'{100 * x:.0f}%' for x in pg_share)})",
            "pass": statistics.median(pg_share) >= TARGET_PG_SHARE,
        },
        {
            "target": "two instances >= 1.3x one instance",
            "measured": f"{statistics.median(two_over_one):.2f}x (per round:"
            f" {', '.join(f'{x:.2f}' for x in two_over_one)})",
            "pass": statistics.median(two_over_one) >= TARGET_TWO_OVER_ONE,
        },
        {
            "target": "p99 of a paid no-op < 20 ms at 32 connections",
            "measured": ", ".join(f"{s} {setups[s]['p99_ms_median']:.1f} ms" for s in SETUPS),
            "pass": worst_p99 < TARGET_P99_MS,
        },
        {
            "target": "PostgreSQL round trips per paid call <= 3",
            "measured": f"{trips:.2f}",
            "pass": trips <= TARGET_ROUND_TRIPS + 0.05,
        },
    ]
    problems = [
        f"{s}: {v['non_200']} non-200, {v['socket_errors']} socket errors"
        for s, v in setups.items()
        if v["non_200"] or v["socket_errors"]
    ]
    for store, counts in raw["store"].items():
        spent = counts.get(NOOP_SLUG, {}).get("spent", 0)
        served = raw["served_200"].get(store, 0)
        # Only the calls in flight when wrk's clock stopped may be spent and not counted.
        if not served <= spent <= served + 64 * (1 + len(raw["rounds"]) * 2):
            problems.append(f"{store}: {spent} spent in the store, {served} answered 200")
    return {
        "setups": setups,
        "pg_share_by_round": pg_share,
        "two_over_one_by_round": two_over_one,
        "targets": targets,
        "problems": problems,
    }


def markdown(raw: dict[str, Any], summary: dict[str, Any]) -> str:
    pg = raw["config"]["postgres"]
    c = raw["counting"]
    lines = [
        f"# bench/scale.py, {raw['started_at']} ({raw['wall_s']} s)",
        "",
        f"Load average before {raw['loadavg_before']}, after the rounds"
        f" {raw['loadavg_after_rounds']}; {raw['config']['rounds']} interleaved rounds of"
        f" {raw['config']['duration_s']} s; {raw['config']['connections']} connections in all.",
        *(
            [
                f"Each satsgate instance held to {raw['config']['instance_cpu']} of a core"
                " (its own cgroup's CPU quota); wrk and PostgreSQL not held. Time the held"
                " servers waited for quota, per round: "
                + "; ".join(
                    ", ".join(f"{r['setup']} {r['throttled_s']:.1f} s" for r in rnd)
                    for rnd in raw["rounds"]
                )
                + "."
            ]
            if raw["config"].get("instance_cpu")
            else []
        ),
        f"PostgreSQL {pg['server_version']} on this machine: fsync={pg['fsync']},"
        f" synchronous_commit={pg['synchronous_commit']},"
        f" full_page_writes={pg['full_page_writes']}, shared_buffers={pg['shared_buffers']}.",
        "",
        "| set-up | paid calls/s (median) | per round | p50 ms | p99 ms | satsgate CPU"
        " us/call | PostgreSQL CPU us/call | wrk CPU us/call |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for s in SETUPS:
        v = summary["setups"][s]
        by_round = ", ".join(f"{x:,.0f}" for x in v["rps_by_round"])
        lines.append(
            f"| `{s}` | {v['rps_median']:,.0f} | {by_round}"
            f" | {v['p50_ms_median']:.2f} | {v['p99_ms_median']:.2f} |"
            f" {v['server_cpu_us_median']:,.0f} | {v['postgres_cpu_us_median']:,.0f} |"
            f" {v['wrk_cpu_us_median']:,.0f} |"
        )
    lines += [
        "",
        f"Round trips to PostgreSQL per paid call: **{c['round_trips_per_call']}** ({c['calls']}"
        f" calls in {c['busy_s']} s; background {c['round_trips_background_per_s']}/s"
        " subtracted). Statements per call:",
        "",
        "| per call | statement |",
        "|---:|---|",
    ]
    for st in c["statements"]:
        lines.append(f"| {st['per_call']} | `{st['statement'][:160]}` |")
    lines += ["", "| target | measured | |", "|---|---|---|"]
    for t in summary["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {'PASS' if t['pass'] else 'FAIL'} |")
    lines += ["", "Problems: " + ("; ".join(summary["problems"]) or "none"), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1 round of 3 s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--count-s", type=int, default=4, help="counting run, seconds")
    parser.add_argument("--idle", type=float, default=5.0, help="idle interval, seconds")
    parser.add_argument("--out", default="scale", help="results/<out>.md and .json")
    parser.add_argument(
        "--instance-cpu",
        type=float,
        default=0.0,
        help="hold each satsgate instance to this share of one core (a cgroup's CPU quota)",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration, args.count_s, args.idle = 1, 3, 3, 3.0
    if not Path(WRK).exists():
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True)
    bindir = postgres_bindir()
    if bindir is None:
        subprocess.run(["apt-get", "install", "-y", "postgresql"], check=True)
        bindir = postgres_bindir()
        assert bindir is not None
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="satsgate-scale-"))
    cluster = PgCluster(bindir, free_port())
    bench: Scale | None = None
    try:
        cluster.start()
        bench = Scale(args, tmp, cluster)
        raw = bench.run()
    finally:
        if bench is not None:
            bench.stop()
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarise(raw)
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps({"raw": raw, "summary": summary}, indent=2) + "\n"
    )
    md = markdown(raw, summary)
    (RESULTS / f"{args.out}.md").write_text(md)
    print(md)
    return 0 if not summary["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
