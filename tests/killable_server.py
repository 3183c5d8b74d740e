"""``satsgate serve`` in a process of its own on one data dir (and store), killed with
SIGKILL and started again on the same ones: the crash tests' server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, suite_store_url

ROOT = Path(__file__).resolve().parents[1]


class KillableServer:
    """One data dir and one store (the suite's: SQLite, or a PostgreSQL database), served
    by one process at a time."""

    def __init__(self, data: Path, config: str = "", store_url: str | None = None) -> None:
        """``store_url``: None for the suite's store, "" for the SQLite file."""
        self.data = data
        self.store_url = suite_store_url() if store_url is None else store_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data.mkdir(parents=True, exist_ok=True)
        self.config = data.parent / "satsgate.toml"
        self.config.write_text(config)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def db_path(self) -> Path:
        return self.data / "satsgate.sqlite3"

    def start(self) -> None:
        """Starts the process and waits until it answers its health check."""
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SATSGATE_CHALLENGE_RATE_PER_MIN": "0"}
        args = [
            sys.executable, "-m", "satsgate.cli", "serve", "--config", str(self.config),
            "--port", str(self.port), "--data-dir", str(self.data), "--log-level", "WARNING",
        ]  # fmt: skip
        if self.store_url:
            args += ["--store-url", self.store_url]
        self.proc = proc = subprocess.Popen(
            args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/api/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate(timeout=10)
                pytest.fail(f"satsgate serve did not start: {err.decode()[-2000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no shutdown of satsgate's runs."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        self.reap()

    def reap(self) -> None:
        """Waits for the process (killing it if it still runs) and lets go of its pipe."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()
