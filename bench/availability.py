"""/api/health under attack: its latency while a challenge flood or slow connections hit
the real ``satsgate serve`` (dev node, its own process, default settings unless said).

    python bench/availability.py [--seconds 10] [--slow 1000] [--json out.json]
                                 [--only NAME ...] [--tree /path/to/other/checkout]

``--tree`` runs another checkout's satsgate (e.g. one before these defences) for a
before/after comparison. ``--nofile N`` starts the server with a soft open-file limit of N
(a common default is 1024; the server may raise it up to the hard limit).

Scenarios, each on a fresh server and data dir:

- ``idle``: nothing else running.
- ``flood_limited``: ``wrk -t1 -c32`` POSTs unpaid render-card calls (each would be a new
  invoice) from 127.0.0.1 for ``--seconds``, with the default challenge limit
  (100/min per client): most are answered 429 before any work.
- ``flood_unlimited``: the same flood with ``SATSGATE_CHALLENGE_RATE_PER_MIN=0`` and
  ``SATSGATE_MAX_UNPAID_CHALLENGES=0``: every request makes an invoice and a payment row
  (what the limits prevent).
- ``flood_bounded``: the same flood with no per-client limit (as from many addresses) and
  the node's bound on unpaid challenges at 1,000 (the default 10,000 binds only near the
  end of a 10 s run): the first 1,000 make rows, the rest are answered 429.
- ``slow_one_address``: ``--slow`` connections from 127.0.0.1 that send a partial request
  head and one more header line every 5 s (Slowloris); the per-client cap (64) refuses
  the rest at once.
- ``slow_many_addresses``: the same number spread over 50 loopback addresses (20 each,
  under the per-client cap, under the total cap of 1024): every one is admitted and held
  until the head timer (15 s) closes it.

The probe: a new connection from 127.0.0.2 per ``GET /api/health``, 20 a second,
throughout; reported as p50/p99/max in ms and failures. Needs ``wrk`` on PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import resource
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TREE = [Path(__file__).resolve().parents[1]]  # the satsgate source put on PYTHONPATH
NOFILE = [0]  # the server's soft open-file limit; 0: inherited
CARD = '{"template": "headline", "title": "Lightning is fast", "subtitle": "flood"}'
PROBE_FROM = "127.0.0.2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, tmp: Path, name: str, env: dict[str, str]) -> None:
        self.data = tmp / name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "satsgate.cli",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data),
                "--log-level",
                "WARNING",
            ],
            env={**os.environ, "PYTHONPATH": str(TREE[0]), **env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=TREE[0],
            preexec_fn=_limit_files if NOFILE[0] else None,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if probe_once(self.port) is not None:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"satsgate did not start; see {self.log.name}")
            time.sleep(0.2)

    def payments(self) -> int:
        with sqlite3.connect(self.data / "satsgate.sqlite3") as db:
            return int(db.execute("SELECT COUNT(*) FROM payments").fetchone()[0])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self.log.close()


def _limit_files() -> None:
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (NOFILE[0], resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )


def probe_once(port: int, timeout: float = 10.0) -> float | None:
    """One GET /api/health on a new connection; its latency in ms, None on failure."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=timeout, source_address=(PROBE_FROM, 0)
    )
    try:
        conn.request("GET", "/api/health")
        resp = conn.getresponse()
        resp.read()
        ok = resp.status == 200
    except OSError:
        ok = False
    finally:
        conn.close()
    return (time.perf_counter() - start) * 1000 if ok else None


class Prober(threading.Thread):
    def __init__(self, port: int, rate_hz: float = 20.0) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.interval = 1.0 / rate_hz
        self.samples: list[float] = []
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            ms = probe_once(self.port)
            if ms is None:
                self.failures += 1
            else:
                self.samples.append(ms)
            self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def summary(self) -> dict[str, Any]:
        self.stopping.set()
        self.join()
        s = sorted(self.samples)
        if not s:
            return {"probes": 0, "failures": self.failures}
        return {
            "probes": len(s),
            "failures": self.failures,
            "p50_ms": round(statistics.median(s), 1),
            "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))], 1),
            "max_ms": round(s[-1], 1),
        }


def wrk_flood(url: str, seconds: int, tmp: Path) -> dict[str, Any]:
    script = tmp / "flood.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = '{CARD}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    wrk = shutil.which("wrk") or "/usr/bin/wrk"
    out = subprocess.run(
        [wrk, "-t1", "-c32", f"-d{seconds}s", "-s", str(script), f"{url}/api/l402/render-card"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return {"requests": total, "requests_per_s": rps}


def slow_connections(port: int, count: int, addresses: int) -> tuple[list[socket.socket], int]:
    """Open ``count`` connections spread over ``addresses`` loopback addresses, each with a
    partial request head; returns them and how many the server refused at once."""
    socks: list[socket.socket] = []
    for i in range(count):
        sock = socket.socket()
        sock.bind((f"127.0.1.{1 + i % addresses}" if addresses > 1 else "127.0.0.1", 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: satsgate\r\n")
        socks.append(sock)
    time.sleep(1.0)
    refused = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            if sock.recv(64).startswith(b"HTTP/1.1 429"):
                refused += 1
        except (BlockingIOError, ConnectionResetError):
            pass
    return socks, refused


def trickle(socks: list[socket.socket], stop: threading.Event) -> None:
    while not stop.wait(5.0):
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b"X-Slow: 1\r\n")


def run(seconds: int, slow: int, only: list[str]) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, slow * 2 + 256)), hard))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="satsgate-avail-") as tmp_name:
        tmp = Path(tmp_name)

        def scenario(name: str, env: dict[str, str], load: Any) -> None:
            if only and name not in only:
                return
            server = Server(tmp, name, env)
            try:
                rows_before = server.payments()
                prober = Prober(server.port)
                prober.start()
                extra = load(server)
                results[name] = {
                    "health": prober.summary(),
                    **extra,
                    "payment_rows_created": server.payments() - rows_before,
                }
            finally:
                server.stop()
            print(name, json.dumps(results[name]), flush=True)

        def idle(_server: Any) -> dict[str, Any]:
            time.sleep(seconds)
            return {}

        scenario("idle", {}, idle)
        scenario("flood_limited", {}, lambda s: {"flood": wrk_flood(s.url, seconds, tmp)})
        scenario(
            "flood_unlimited",
            {"SATSGATE_CHALLENGE_RATE_PER_MIN": "0", "SATSGATE_MAX_UNPAID_CHALLENGES": "0"},
            lambda s: {"flood": wrk_flood(s.url, seconds, tmp)},
        )
        scenario(
            "flood_bounded",
            {"SATSGATE_CHALLENGE_RATE_PER_MIN": "0", "SATSGATE_MAX_UNPAID_CHALLENGES": "1000"},
            lambda s: {"flood": wrk_flood(s.url, seconds, tmp)},
        )

        def slow_load(addresses: int) -> Any:
            def load(server: Server) -> dict[str, Any]:
                socks, refused = slow_connections(server.port, slow, addresses)
                stop = threading.Event()
                thread = threading.Thread(target=trickle, args=(socks, stop), daemon=True)
                thread.start()
                time.sleep(seconds)
                stop.set()
                thread.join()
                for sock in socks:
                    sock.close()
                return {"slow_connections": slow, "addresses": addresses, "refused": refused}

            return load

        scenario("slow_one_address", {}, slow_load(1))
        scenario("slow_many_addresses", {}, slow_load(50))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--slow", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", action="append", default=[], help="run this scenario only")
    parser.add_argument("--tree", type=Path, help="a satsgate checkout to run instead")
    parser.add_argument("--nofile", type=int, default=0, help="the server's soft fd limit")
    args = parser.parse_args()
    NOFILE[0] = args.nofile
    if args.tree:
        TREE[0] = args.tree.resolve()
    results = run(args.seconds, args.slow, args.only)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
