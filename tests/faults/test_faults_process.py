"""A real ``satsgate serve`` process: its files are private, and its pool workers do not
outlive it when it is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.killable_server import KillableServer
from tests.payments.test_gateway import CARD


def children_of(pid: int) -> set[int]:
    """Live (non-zombie) processes whose parent is ``pid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == pid and state != "Z":
            found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    data = tmp_path / "data"
    # What an older version left: a world-readable data dir and secret.
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    secret = data / "server_secret"
    secret.write_text("ab" * 32)
    os.chmod(secret, 0o644)
    server = KillableServer(data, store_url="")  # the SQLite file's privacy is checked
    server.start()
    assert server.proc is not None
    try:
        yield server.proc, server.url, data
    finally:
        server.reap()


def paid_card(url: str) -> None:
    """One paid render-card call: it runs in the process pool, so workers are spawned."""
    with httpx.Client(base_url=url, timeout=60) as client:
        challenge = client.post("/api/l402/render-card", json=CARD).json()
        preimage = client.post("/api/dev/pay", json={"invoice": challenge["invoice"]}).json()[
            "preimage"
        ]
        resp = client.post(
            "/api/l402/render-card",
            json=CARD,
            headers={"Authorization": f"L402 {challenge['macaroon']}:{preimage}"},
        )
        assert resp.status_code == 200, resp.text
        assert client.get(resp.json()["image_url"]).content.startswith(b"\x89PNG")


@pytest.mark.slow
def test_files_are_private_and_workers_die_with_a_killed_server(
    serve: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    proc, url, data = serve
    paid_card(url)

    # Everything in the data dir: directories 0700, files 0600 (no group or other bits).
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    seen = []
    for root, dirs, files in os.walk(data):
        for name in dirs + files:
            path = Path(root, name)
            mode = stat.S_IMODE(path.lstat().st_mode)
            seen.append(path.name)
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    assert "satsgate.sqlite3" in seen and "server_secret" in seen
    assert any(name.endswith("-wal") for name in seen)
    assert any(name.endswith(".png") for name in seen)  # the card's output file

    workers = children_of(proc.pid)
    assert workers, "the paid call should have spawned pool workers"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in workers if alive(pid)]
    for pid in left:  # do not leave them behind for the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers outlived the server: {left}"
