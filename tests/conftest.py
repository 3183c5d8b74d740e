"""Shared fixtures: a real satsgate server on loopback (dev node), and HTTP helpers."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import uvloop

from satsgate.appkeys import PRESENCE
from satsgate.backends.dev import DevBackend
from satsgate.config.settings import Settings
from satsgate.engines import ProviderFactory
from satsgate.engines.local import language_id
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.lightning.backend import LightningBackend
from satsgate.public_urls import SYSTEM_OUTBOUND, Outbound
from satsgate.server import eventloop
from satsgate.server.app import BACKEND, GATE, STORE
from satsgate.server.runner import ServiceHandle, start_service
from satsgate.store import Store
from tests.engines_down import PROVIDER_KINDS as DOWN_KINDS
from tests.engines_down import down_engines
from tests.pg_cluster import PgCluster, postgres_bindir, running_cluster

T = TypeVar("T")

# The language-id model is loaded once per test process, before any test. A server loads it
# in a background thread as it starts (language_id.warm_up), where numpy reads the model's
# array headers with ast.literal_eval; CPython 3.11 keeps the ast module's recursion count
# in state shared between threads, and a test thread parsing at the same moment (pytest's
# assertion rewriting, hypothesis) once failed with "SystemError: AST constructor recursion
# depth mismatch" (python/cpython#106905). Loaded here, warm_up has nothing left to do.
if language_id.installed():
    language_id.load()


def skip_unless_ci(reason: str) -> None:
    """Skip on a developer machine without an optional tool; in CI a missing tool fails,
    since scripts/setup.sh --test installs it there."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs it through scripts/setup.sh --test)")
    pytest.skip(reason)


# Ports for the suite's servers. Each pytest-xdist worker hands out ports in turn from a
# block of its own below the kernel's ephemeral range (32768 and up by default), so that
# between the check here and a server's bind no other worker's server and no outgoing
# connection (whose local port comes from the ephemeral range) can take the port, and one
# worker hands a port out again only after the rest of its block.
_PORT_BLOCK = 2000
_PORT_BASE = 12000


def _worker_ports() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    low = _PORT_BASE + (int(worker) if worker.isdigit() else 0) % 10 * _PORT_BLOCK
    start = random.randrange(_PORT_BLOCK)  # a rerun does not meet its own lingering ports
    return itertools.cycle([low + (start + i) % _PORT_BLOCK for i in range(_PORT_BLOCK)])


_PORTS = _worker_ports()


def free_port() -> int:
    """A loopback port free now, from this worker's block."""
    for _ in range(_PORT_BLOCK):
        port = next(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # in use, or lingering from an earlier run
                continue
            return port
    raise RuntimeError("no free port in this worker's block")


def at_origin(url: str, origin: str | None) -> str:
    """``url`` sent to ``origin`` (``http://host:port``) instead, as a load balancer would
    send a platform's webhook to one instance; ``url`` itself when ``origin`` is None."""
    if origin is None:
        return url
    parts = urlsplit(url)
    return origin + urlunsplit(("", "", parts.path, parts.query, ""))


class ThreadedServer:
    """satsgate running in its own thread and event loop, as a separate server would."""

    def __init__(
        self,
        settings: Settings,
        provider_kinds: Mapping[str, ProviderFactory] = PROVIDER_KINDS,
        backend: LightningBackend | None = None,
        outbound: Outbound = SYSTEM_OUTBOUND,
    ) -> None:
        self.settings = settings
        self.loop = eventloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        node = backend if backend is not None else DevBackend(settings.data_dir)
        try:
            self.handle: ServiceHandle = self.call(
                lambda: start_service(
                    settings, node, provider_kinds=provider_kinds, outbound=outbound
                )
            )
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()
            raise
        self.url = self.handle.url

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float = 60) -> T:
        """Run a coroutine in the server's loop and return its result."""

        async def wrapper() -> T:
            return await fn()

        fut: Future[T] = asyncio.run_coroutine_threadsafe(wrapper(), self.loop)
        return fut.result(timeout)

    @property
    def app(self) -> Any:
        return self.handle.app

    @property
    def backend(self) -> DevBackend:
        backend = self.app[BACKEND]
        assert isinstance(backend, DevBackend)
        return backend

    @property
    def store(self) -> Any:
        return self.app[STORE]

    @property
    def gate(self) -> Any:
        return self.app[GATE]

    def stop(self) -> None:
        self.call(self.handle.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def crash(self) -> None:
        """The process dies: no shutdown runs (its loop just stops), and what the
        operating system lets go of at a death (the SQLite store's lock) is let go."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.app[PRESENCE].release_lock()


# The store's engines: a test (or fixture) parametrized with STORES runs on SQLite (the
# default) and on PostgreSQL (a throwaway cluster of this worker, a new database each).
STORES = ["sqlite", "postgres"]


@pytest.fixture(scope="session")
def event_loop_policy() -> asyncio.AbstractEventLoopPolicy:
    """The async tests run on the loop satsgate serves on (satsgate/server/eventloop.py); the
    fakes of external systems keep asyncio's own."""
    policy: asyncio.AbstractEventLoopPolicy = uvloop.EventLoopPolicy()
    return policy


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A PostgreSQL cluster for this test worker, started on first use."""
    bindir = postgres_bindir()
    if bindir is None:
        skip_unless_ci("PostgreSQL's programs (initdb, pg_ctl) are not installed")
    assert bindir is not None
    with running_cluster(bindir, free_port()) as cluster:
        yield cluster


def store_url_for(request: pytest.FixtureRequest) -> str:
    """For a fixture parametrized with STORES: "" (the SQLite file) or the URL of a new
    PostgreSQL database."""
    if request.param == "sqlite":
        return ""
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    return cluster.new_database()


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest) -> str:
    """Each test that asks for it runs twice: on SQLite ("") and on PostgreSQL."""
    return store_url_for(request)


@pytest.fixture
async def store(tmp_path: Path, store_url: str) -> AsyncIterator[Store]:
    """An open store on each engine (STORES), closed after the test."""
    opened = Store(tmp_path / "satsgate.db", store_url)
    await opened.open()
    yield opened
    await opened.close()


# SATSGATE_TEST_STORE=postgres: every server the tests make keeps its store in a new
# PostgreSQL database (one cluster for the run). The whole suite passes in that mode; a
# test that reads the store's rows itself does it through tests/store_access.py.
# scripts/test.sh runs the money tests in it after the default run.
_suite_cluster: PgCluster | None = None


def suite_store_url() -> str:
    """The store a server of the tests keeps: "" (its SQLite file), or with
    SATSGATE_TEST_STORE=postgres a new database of the run's one cluster."""
    global _suite_cluster
    if os.environ.get("SATSGATE_TEST_STORE") != "postgres":
        return ""
    if _suite_cluster is None:
        bindir = postgres_bindir()
        if bindir is None:
            raise RuntimeError("SATSGATE_TEST_STORE=postgres needs initdb and pg_ctl")
        cluster = PgCluster(bindir, free_port())
        cluster.start()
        atexit.register(cluster.stop)
        _suite_cluster = cluster
    return _suite_cluster.new_database()


@contextlib.contextmanager
def serve_process(*options: str) -> Iterator[tuple[int, list[str]]]:
    """`satsgate serve` in a process of its own, as an operator starts it, on a free port
    with ``options``: its port and the log lines it wrote up to listening; stopped after."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "satsgate.cli", "serve", "--port", str(port), *options],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "satsgate listening on" in line:
                break
        assert any("satsgate listening on" in line for line in lines), "".join(lines)
        yield port, lines
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


async def until(condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    """Wait for ``condition`` to hold (what another task or process writes soon)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never met"
        await asyncio.sleep(0.02)


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    port = free_port()
    if "store_url" not in overrides:
        overrides["store_url"] = suite_store_url()
    # The suite is one client making thousands of calls: per-client rate limits are off
    # unless a test turns them on (tests/faults/test_faults_rate_limits.py).
    base = Settings(
        host="127.0.0.1",
        port=port,
        data_dir=data_dir,
        challenge_rate_per_min=0,
        refund_rate_per_min=0,
        estimate_rate_per_min=0,
    )
    return replace(base, **overrides)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(make_settings(tmp_path_factory.mktemp("satsgate")))
    yield srv
    srv.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(make_settings(tmp_path / "data"))
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ThreadedServer) -> Any:
    async for c in http_client(server):
        yield c


def serve_with_engines(
    tmp_path_factory: pytest.TempPathFactory, label: str, engines: Iterable[str]
) -> Iterator[ThreadedServer]:
    """For a fixture: a server whose config routes these engine names to a provider that
    is down (tests/engines_down.py), so their services are available and quote; a paid
    call that reaches one fails and is refunded."""
    settings = make_settings(tmp_path_factory.mktemp(label), **down_engines(engines))
    srv = ThreadedServer(settings, {**PROVIDER_KINDS, **DOWN_KINDS})
    yield srv
    srv.stop()


async def http_client(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    """For a fixture: an HTTP client of ``server``."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
        yield c


async def dev_pay(client: httpx.AsyncClient, invoice: str) -> str:
    resp = await client.post("/api/dev/pay", json={"invoice": invoice})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["preimage"])


async def challenge(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post(f"/api/l402/{slug}", json=body)
    assert resp.status_code == 402, resp.text
    return dict(resp.json())


async def paid_l402_auth(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> str:
    """Get a challenge, pay it through the dev node, return the Authorization value."""
    ch = await challenge(client, slug, body)
    preimage = await dev_pay(client, ch["invoice"])
    return f"L402 {ch['macaroon']}:{preimage}"


@pytest.fixture(autouse=True)
def _ledger_balances_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test on the shared server, the ledger still balances: received =
    earned + refunded + held + open, in total and per day, as the rows say."""
    yield
    if "server" in request.fixturenames:
        from tests.ledger_check import assert_ledger_balances

        assert_ledger_balances(request.getfixturevalue("server"))
