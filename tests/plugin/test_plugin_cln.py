"""The Core Lightning plugin as lightningd runs it: a real process over stdin/stdout.

One plugin process serves the whole module (start-up costs ~2 s of imports);
the last test shuts it down the way lightningd does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.plugin.options import OPTIONS
from tests.conftest import free_port
from tests.fakes.fake_lightningd import (
    FakeLightningd,
    PluginCallError,
    PluginHost,
    running_lightningd,
)

PLUGIN_CMD = [sys.executable, "-m", "satsgate.plugin"]


@pytest.fixture(scope="module")
def lightningd() -> Iterator[FakeLightningd]:
    with running_lightningd() as ln:
        yield ln


@pytest.fixture(scope="module")
def plugin(lightningd: FakeLightningd) -> Iterator[PluginHost]:
    host = PluginHost(PLUGIN_CMD, lightningd, options={"satsgate-port": free_port()})
    host.start()
    assert host.disabled is None, host.log_text()
    yield host
    if host.process.poll() is None:
        host.kill()


def wait_status(plugin: PluginHost, key: str, value: int, timeout_s: float = 5) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status: dict[str, Any] = plugin.call("satsgate-status")
        if status[key] == value or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def test_manifest_options_commands_and_shutdown_subscription(plugin: PluginHost) -> None:
    options = {o["name"]: o for o in plugin.manifest["options"]}
    assert set(options) == {
        "satsgate-host",
        "satsgate-port",
        "satsgate-data-dir",
        "satsgate-base-url",
        "satsgate-config",
    }
    assert options["satsgate-host"]["default"] == "127.0.0.1"
    assert (options["satsgate-port"]["type"], options["satsgate-port"]["default"]) == ("int", 8402)
    assert all("default" in o and o["description"] for o in options.values())
    assert {o.name for o in OPTIONS} == set(options)
    methods = {m["name"]: m for m in plugin.manifest["rpcmethods"]}
    assert set(methods) == {
        "satsgate-status",
        "satsgate-refund",
        "satsgate-ledger",
        "satsgate-operator-token",
        "satsgate-hold",
    }
    assert "payment_id" in methods["satsgate-refund"]["usage"]
    assert plugin.manifest["subscriptions"] == ["shutdown"]


def test_status_reports_where_it_listens_and_the_day(
    plugin: PluginHost, lightningd: FakeLightningd
) -> None:
    status = plugin.call("satsgate-status")
    port = plugin.user_options["satsgate-port"]
    assert status["listening"] == f"http://127.0.0.1:{port}"
    assert status["network"] == "regtest"
    assert status["data_dir"] == str(lightningd.lightning_dir / "satsgate-data")
    assert (status["payments_today"], status["earned_sats"], status["refunds_open"]) == (0, 0, 0)
    health = httpx.get(f"{status['listening']}/api/health", timeout=10).json()
    assert (health["backend"], health["node_pubkey"]) == ("cln", lightningd.node.node_id)


def test_operator_refund_of_a_paid_unused_call(
    plugin: PluginHost, lightningd: FakeLightningd
) -> None:
    url = plugin.call("satsgate-status")["listening"]
    resp = httpx.post(
        f"{url}/api/l402/render-card", json={"template": "headline", "title": "hi"}, timeout=10
    )
    assert resp.status_code == 402
    challenge = resp.json()
    lightningd.pay_from_outside(challenge["invoice"])
    assert wait_status(plugin, "payments_today", 1)["payments_today"] == 1

    refunded = plugin.call("satsgate-refund", {"payment_id": challenge["paymentId"]})
    refund = refunded["refund"]
    assert refunded["payment_id"] == challenge["paymentId"]
    assert refund["lnurl_withdraw"].upper().startswith("LNURL")
    assert (
        refund["amount_sats"] * 1000
        == lightningd.node.listinvoices(invstring=challenge["invoice"])["invoices"][0][
            "amount_received_msat"
        ]
    )
    assert plugin.call("satsgate-status")["refunds_open"] == 1

    with pytest.raises(PluginCallError, match=r"nothing (left )?to refund"):
        plugin.call("satsgate-refund", [challenge["paymentId"]])  # positional, as lightning-cli
    with pytest.raises(PluginCallError, match="no payment pay_nope"):
        plugin.call("satsgate-refund", {"payment_id": "pay_nope"})
    # lightning-cli satsgate-refund with no argument: a usage line, not a traceback.
    with pytest.raises(PluginCallError, match=r"usage: satsgate-refund <payment_id>"):
        plugin.call("satsgate-refund", [])

    # The ledger: the paid call was refunded in full, its link still open.
    ledger = plugin.call("satsgate-ledger")
    totals = ledger["totals"]
    assert totals["received_msat"] == refund["amount_sats"] * 1000 == totals["refunded_msat"]
    assert totals["received_msat"] == (
        totals["earned_msat"] + totals["refunded_msat"] + totals["held_msat"] + totals["open_msat"]
    )
    assert (totals["refunds_open"], totals["earned_msat"]) == (1, 0)
    assert [d["received_msat"] for d in ledger["per_day"]] == [totals["received_msat"]]


def test_hold_command_lists_decides_and_keeps_the_do_not_contact_list(
    plugin: PluginHost,
) -> None:
    assert plugin.call("satsgate-hold", ["list"]) == {"holds": []}
    with pytest.raises(PluginCallError, match="no held request hold_nope"):
        plugin.call("satsgate-hold", ["release", "hold_nope"])
    with pytest.raises(PluginCallError, match="usage: satsgate-hold"):
        plugin.call("satsgate-hold", ["refund"])
    added = plugin.call("satsgate-hold", ["dnc-add", "+1 (415) 555-0100"])
    assert added == {"address": "+14155550100", "added": True}
    entries = plugin.call("satsgate-hold", {"action": "dnc-list"})["entries"]
    assert [(e["address"], e["source"]) for e in entries] == [("+14155550100", "operator")]
    assert plugin.call("satsgate-hold", ["dnc-remove", "+14155550100"])["removed"] is True
    with pytest.raises(PluginCallError, match=r"not an E\.164 number"):
        plugin.call("satsgate-hold", ["dnc-add", "call me"])


def test_operator_token_opens_the_operator_api(
    plugin: PluginHost, lightningd: FakeLightningd
) -> None:
    answer = plugin.call("satsgate-operator-token")
    token_file = lightningd.lightning_dir / "satsgate-data" / "operator_token"
    assert answer["file"] == str(token_file)
    assert answer["operator_token"] == token_file.read_text().strip()
    assert token_file.stat().st_mode & 0o777 == 0o600
    url = plugin.call("satsgate-status")["listening"]
    resp = httpx.get(
        f"{url}/api/operator/ledger",
        timeout=10,
        headers={"Authorization": f"Bearer {answer['operator_token']}"},
    )
    assert resp.status_code == 200 and "totals" in resp.json()
    assert httpx.get(f"{url}/api/operator/ledger", timeout=10).status_code == 401
    assert any(
        level == "info" and "satsgate started: listening on" in message
        for level, message in plugin.logs
    )


def test_rotating_the_operator_token_through_lightning_cli_ends_sessions(
    plugin: PluginHost, lightningd: FakeLightningd
) -> None:
    """``lightning-cli satsgate-operator-token rotate=true``: a new token; the old one and
    a dashboard session opened with it open nothing from then on."""
    old = plugin.call("satsgate-operator-token")["operator_token"]
    url = plugin.call("satsgate-status")["listening"]
    with httpx.Client(base_url=url, timeout=10) as client:
        signed_in = client.post("/operator/login", data={"token": old})
        assert signed_in.status_code == 303
        cookie = {"satsgate_operator": signed_in.cookies["satsgate_operator"]}
        assert client.get("/api/operator/ledger", cookies=cookie).status_code == 200
        client.cookies.clear()
        answer = plugin.call("satsgate-operator-token", {"rotate": True})
        new = answer["operator_token"]
        assert new != old and (lightningd.lightning_dir / "satsgate-data" / "operator_token")
        assert client.get("/api/operator/ledger", cookies=cookie).status_code == 401
        for token, status in ((old, 401), (new, 200)):
            auth = {"Authorization": f"Bearer {token}"}
            assert client.get("/api/operator/ledger", headers=auth).status_code == status
        assert plugin.call("satsgate-operator-token")["operator_token"] == new  # no rotation


def test_a_base_url_with_a_trailing_comment_disables_the_plugin_with_the_fix() -> None:
    with running_lightningd() as ln:
        value = "https://pay.example.com     # the public address used in links"
        host = PluginHost(
            PLUGIN_CMD, ln, options={"satsgate-base-url": value, "satsgate-port": free_port()}
        )
        host.start()
        assert host.disabled is not None
        assert "base_url must be an http:// or https:// address" in host.disabled
        assert "put comments on a line of their own" in host.disabled
        assert "invoice" not in ln.calls


def test_shutdown_stops_the_service_and_exits_in_time(plugin: PluginHost) -> None:
    url = plugin.call("satsgate-status")["listening"]
    elapsed = plugin.shutdown()
    assert elapsed < 30
    assert plugin.process.returncode == 0
    assert "satsgate stopped" in plugin.log_text()
    assert plugin.protocol_errors == []  # stdout carried framed JSON-RPC only
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/api/health", timeout=2)


def test_network_mismatch_disables_the_plugin(tmp_path: Path) -> None:
    with running_lightningd() as ln:
        (ln.lightning_dir / "satsgate.toml").write_text('network = "bitcoin"\n')
        host = PluginHost(
            PLUGIN_CMD,
            ln,
            options={"satsgate-config": "satsgate.toml", "satsgate-port": free_port()},
        )
        host.start()
        assert host.disabled is not None
        assert "network mismatch" in host.disabled and "regtest" in host.disabled
        assert any(
            level == "error"
            and "network mismatch" in message
            and 'Fix: set network = "regtest"' in message
            for level, message in host.logs
        )
        assert host.process.poll() is not None
        assert "invoice" not in ln.calls  # refused before serving anything


def test_stray_writes_to_fd_1_never_reach_the_protocol_pipe() -> None:
    script = textwrap.dedent("""
        import os, subprocess, sys
        from satsgate.plugin.cln_plugin import _reserve_stdout
        proto = _reserve_stdout()
        os.write(1, b"raw write\\n")
        subprocess.run(["sh", "-c", "echo from a child process"], check=True)
        print("a print", flush=True)
        proto.write('{"jsonrpc": "2.0"}\\n\\n')
        proto.flush()
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=30, check=True
    )
    assert done.stdout == b'{"jsonrpc": "2.0"}\n\n'
    for stray in (b"raw write", b"from a child process", b"a print"):
        assert stray in done.stderr
