"""Slow clients and connection floods against a real server: raw sockets, short limits."""

from __future__ import annotations

import json
import logging
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satsgate.config.settings import Settings
from tests.conftest import ThreadedServer, make_settings

HEAD = b"GET /api/health HTTP/1.1\r\nHost: satsgate\r\n"


def port_of(server: ThreadedServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def closed_after(sock: socket.socket, trickle: bytes = b"", limit_s: float = 10.0) -> float:
    """Seconds until the server closes ``sock``, sending ``trickle`` every 0.2 s meanwhile
    (a Slowloris client); fails if it is still open after ``limit_s``."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < limit_s:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            if trickle:
                try:
                    sock.sendall(trickle)
                except OSError:
                    return time.monotonic() - start
            continue
        except ConnectionResetError:
            return time.monotonic() - start
        if not data:
            return time.monotonic() - start
    pytest.fail(f"the connection was still open after {limit_s} s")


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(
        make_settings(
            tmp_path / "data",
            header_timeout_s=1.0,
            body_timeout_s=1.0,
            keepalive_timeout_s=30.0,
            max_connections_per_client=20,
            max_connections=60,
        )
    )
    yield srv
    srv.stop()


def test_the_defaults_close_a_partial_head_within_30_s() -> None:
    settings = Settings()
    assert 0 < settings.header_timeout_s <= 30
    assert 0 < settings.keepalive_timeout_s <= 30
    assert settings.body_timeout_s > 0
    assert settings.max_connections > 0 and settings.max_connections_per_client > 0


def test_a_partial_head_is_closed_within_the_limit(guarded: ThreadedServer) -> None:
    with socket.create_connection(("127.0.0.1", port_of(guarded))) as sock:
        sock.sendall(HEAD)
        took = closed_after(sock, trickle=b"X-Slow: 1\r\n")
    assert 0.8 < took < 10, took  # the head timer's second, not keep-alive's 30 s


def test_a_silent_connection_is_closed_within_the_limit(guarded: ThreadedServer) -> None:
    with socket.create_connection(("127.0.0.1", port_of(guarded))) as sock:
        took = closed_after(sock)
    assert 0.8 < took < 10, took  # the head timer's second, not keep-alive's 30 s


def test_a_kept_alive_connection_gets_the_same_head_limit(guarded: ThreadedServer) -> None:
    """After one full request (keep-alive is 30 s here), a trickled next head is cut off
    by the head timer, not left for the keep-alive one."""
    with socket.create_connection(("127.0.0.1", port_of(guarded))) as sock:
        sock.sendall(HEAD + b"\r\n")
        sock.settimeout(5)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first[:100]
        time.sleep(1.5)  # idle, but under keep-alive: still open
        sock.sendall(HEAD)
        took = closed_after(sock, trickle=b"X-Slow: 1\r\n")
    assert 0.8 < took < 10, took  # the head timer's second, not keep-alive's 30 s


def test_a_trickled_body_is_closed_within_the_limit(guarded: ThreadedServer) -> None:
    with socket.create_connection(("127.0.0.1", port_of(guarded))) as sock:
        sock.sendall(
            b"POST /api/l402/render-card HTTP/1.1\r\nHost: satsgate\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        took = closed_after(sock, trickle=b" ")
    assert 0.8 < took < 10, took  # the body timer's second, not keep-alive's 30 s


def test_a_complete_request_is_not_cut(guarded: ThreadedServer) -> None:
    """A request whose head and body arrived is served even when serving it is slow."""
    resp = httpx.post(
        f"{guarded.url}/api/l402/render-card",
        json={"template": "headline", "title": "Hello"},
        timeout=10,
    )
    assert resp.status_code == 402


def _open(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        socks.append(sock)
    return socks


def _refused(sock: socket.socket, wait_s: float = 3.0) -> bool:
    """Whether the server answered this connection 429 RATE_LIMITED and closed it."""
    sock.settimeout(wait_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False  # still open: admitted
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429"), data[:200]
    assert b"Retry-After: " in head
    assert json.loads(body)["error_code"] == "RATE_LIMITED"
    return True


def test_connections_past_the_per_client_cap_are_refused_and_health_stays_up(
    guarded: ThreadedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """220 slow connections from one address: 20 are held, 200 refused at once; another
    address still gets /api/health promptly. The log says so once, not 200 times."""
    port = port_of(guarded)
    held = _open(port, 20)
    try:
        with caplog.at_level(logging.WARNING, logger="satsgate"):
            extra = _open(port, 200)
        try:
            start = time.monotonic()
            refused = [_refused(sock) for sock in extra]
            assert all(refused)
            reports = [r for r in caplog.records if "refused" in r.getMessage()]
            assert len(reports) == 1 and "per client" in reports[0].getMessage()
            assert time.monotonic() - start < 5
            transport = httpx.HTTPTransport(local_address="127.0.0.2")
            with httpx.Client(transport=transport, timeout=5) as other:
                t0 = time.monotonic()
                resp = other.get(f"{guarded.url}/api/health")
                assert resp.status_code == 200
                assert time.monotonic() - t0 < 2
        finally:
            for sock in extra:
                sock.close()
        for sock in held:  # within the cap: admitted (the head timer ends them, no 429)
            sock.settimeout(3)
            assert sock.recv(65536) == b""
    finally:
        for sock in held:
            sock.close()


def test_connections_past_the_total_cap_are_refused(guarded: ThreadedServer) -> None:
    """60 in total: three addresses of 20 fill it; a fourth address is refused."""
    port = port_of(guarded)
    socks: list[socket.socket] = []
    try:
        for host in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
            for _ in range(20):
                sock = socket.socket()
                sock.bind((host, 0))
                sock.connect(("127.0.0.1", port))
                socks.append(sock)
        time.sleep(0.2)
        late = socket.socket()
        late.bind(("127.0.0.4", 0))
        late.connect(("127.0.0.1", port))
        socks.append(late)
        assert _refused(late)
    finally:
        for sock in socks:
            sock.close()
    # Closed connections are counted out: the next one is served.
    deadline = time.monotonic() + 5
    while True:
        try:
            resp = httpx.get(f"{guarded.url}/api/health", timeout=5)
            assert resp.status_code == 200
            break
        except (httpx.RemoteProtocolError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_trusted_proxy_is_not_held_to_the_per_client_cap(tmp_path: Path) -> None:
    """Behind a reverse proxy every connection comes from the proxy's address: once it is
    configured as trusted it counts only toward the total cap."""
    srv = ThreadedServer(
        make_settings(
            tmp_path / "data", max_connections_per_client=5, trusted_proxies=("127.0.0.1",)
        )
    )
    socks = _open(port_of(srv), 20)
    try:
        readable, _, _ = select.select(socks, [], [], 0.3)
        assert readable == []  # all held open: none answered 429 and closed
        for _ in range(6):
            sock = socket.socket()
            socks.append(sock)
            sock.bind(("127.0.0.2", 0))
            sock.connect(("127.0.0.1", port_of(srv)))
        time.sleep(0.2)
        assert [_refused(sock, 0.1) for sock in socks[20:]].count(True) == 1
    finally:
        for sock in socks:
            sock.close()
        srv.stop()


def test_a_connection_cap_the_file_limit_cannot_hold_is_lowered() -> None:
    """In a process whose hard open-file limit is 600, a cap of 1024 becomes 344 (600 less
    the server's own reserve) and the log says so; with room, the soft limit is raised."""
    code = (
        "import logging, resource\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from satsgate.edge.connection_guard import ensure_fd_limit\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (500, 600))\n"
        "print(ensure_fd_limit(1024), ensure_fd_limit(200),"
        " resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["344", "200", "600"]
    assert "serving at most 344 connections" in done.stderr
