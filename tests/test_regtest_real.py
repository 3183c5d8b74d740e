"""One paid call on a real regtest chain: bitcoind and lightningd binaries, when installed.

Runs regtest/up.sh, fund.sh and e2e.sh in native mode (binaries from PATH,
satsgate from this interpreter, state in a temporary directory, ports picked
free), then down.sh. Skipped, with the reason, where the binaries are absent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REGTEST = Path(__file__).resolve().parent.parent / "regtest"
BINARIES = ("bitcoind", "bitcoin-cli", "lightningd", "lightning-cli")
missing = [b for b in BINARIES if shutil.which(b) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(missing),
        reason=f"needs {', '.join(missing)} on PATH (Core Lightning and Bitcoin Core binaries)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(script: str, env: dict[str, str], timeout_s: int) -> str:
    done = subprocess.run(
        ["bash", str(REGTEST / script)], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.timeout(600)
def test_paid_render_card_call_on_regtest() -> None:
    state = tempfile.mkdtemp(prefix="sg-regtest-")  # short: lightning-rpc socket paths
    env = dict(
        os.environ,
        SATSGATE_REGTEST_MODE="native",
        SATSGATE_REGTEST_DIR=state,
        SATSGATE_PYTHON=sys.executable,
        SATSGATE_PORT=str(free_port()),
        REGTEST_BTC_RPC_PORT=str(free_port()),
        REGTEST_BTC_P2P_PORT=str(free_port()),
        REGTEST_SATSGATE_LN_PORT=str(free_port()),
        REGTEST_PAYER_LN_PORT=str(free_port()),
    )
    try:
        run("up.sh", env, 300)
        run("fund.sh", env, 300)
        out = run("e2e.sh", env, 180)
        assert "OK: paid render-card call end to end" in out
    finally:
        subprocess.run(
            ["bash", str(REGTEST / "down.sh"), "--clean"], env=env, capture_output=True, timeout=120
        )
        shutil.rmtree(state, ignore_errors=True)
