"""Paid calls on a real regtest chain: bitcoind and lightningd binaries, when installed.

Runs regtest/up.sh and fund.sh in native mode (binaries from PATH, satsgate from this
interpreter as a Core Lightning plugin, state in a temporary directory, ports picked
free), then on that one chain: e2e.sh (one L402 call), e2e_sessions.sh (a payment
session: deposit, open with the payer node's amountless return invoice, a bearer call,
close, the balance paid back once; a second session may not reuse that return invoice;
a third's return invoice paid by hand is not reported paid),
e2e_refund.sh (a call failing after payment, refunded through LNURL-withdraw to the
payer node, once; a claim with an invoice paid already is refused), and reads
satsgate's ledger; then, with the day's payout fee budget spent (satsgate restarted
with payout_fee_budget_msat = 0), e2e_sessions.sh and e2e_refund.sh again: every payout
granted 0 msat of routing fees (xpay's maxfee 0) still reaches the payer over the
direct channel, at no fee, while a refund to a third node behind the payer, which needs
a fee, is not paid (xpay finds no route) and its link opens again, to be paid once the
budget is back; then down.sh. It runs on SQLite and on PostgreSQL. Skipped, with the
reason, where the binaries are absent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.config.settings import Settings
from satsgate.payouts.fees import fee_cap_msat
from tests.conftest import free_port
from tests.system.test_regtest_lnd_real import blank_page, l402_challenge, lnurl_decode

REGTEST = Path(__file__).resolve().parents[2] / "regtest"
BINARIES = ("bitcoind", "bitcoin-cli", "lightningd", "lightning-cli")
missing = [b for b in BINARIES if shutil.which(b) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(missing),
        reason=f"needs {', '.join(missing)} on PATH (Core Lightning and Bitcoin Core binaries)",
    ),
]


def run(script: str, env: dict[str, str], timeout_s: int) -> str:
    done = subprocess.run(
        ["bash", str(REGTEST / script)], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def figures(out: str, tag: str) -> dict[str, Any]:
    """The script's ``TAG {json}`` line."""
    lines = [line for line in out.splitlines() if line.startswith(tag + " ")]
    assert len(lines) == 1, out
    return dict(json.loads(lines[0].split(" ", 1)[1]))


def fee_cap(amount_msat: int) -> int:
    """A payout's routing fee cap under the default settings."""
    return fee_cap_msat(Settings(), amount_msat)


def ln(state: str, node: str, *args: str) -> Any:
    """lightning-cli of a node of this chain (satsgate, payer, carol)."""
    cli = ["lightning-cli", "-N", "none", "--network=regtest", f"--lightning-dir={state}/{node}"]
    done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{node}: lightning-cli {args}: {done.stdout}{done.stderr}"
    return json.loads(done.stdout)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def restart_plugin(state: str, port: str, *options: str) -> None:
    """Stop satsgate's plugin and start it again with these plugin options (its settings
    file, ...); returns once its HTTP service answers."""
    ln(state, "satsgate", "plugin", "stop", "satsgate-plugin")
    ln(
        state,
        "satsgate",
        "-k",
        "plugin",
        "subcommand=start",
        f"plugin={state}/satsgate-plugin",
        f"satsgate-port={port}",
        *options,
    )

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=5).is_success
        except httpx.HTTPError:
            return False

    wait_for("satsgate after its restart", healthy)


def start_carol(env: dict[str, str], state: str) -> None:
    """A third node behind the payer: a private channel payer -> carol, so carol's
    invoices carry a route hint through the payer, who charges its forwarding fee (Core
    Lightning's default: 1 sat + 10 ppm). A payout to carol needs a routing fee."""
    btc = [
        "bitcoin-cli",
        "-regtest",
        f"-datadir={state}/bitcoind",
        f"-rpcport={env['REGTEST_BTC_RPC_PORT']}",
        "-rpcuser=satsgate",
        "-rpcpassword=satsgate",
        "-rpcwallet=satsgate",
    ]
    carol = Path(state) / "carol"
    carol.mkdir()
    port = free_port()
    with (carol / "stdio.log").open("ab") as stdio:
        subprocess.run(
            [
                "lightningd",
                "--network=regtest",
                f"--lightning-dir={carol}",
                "--alias=carol",
                "--bitcoin-rpcconnect=127.0.0.1",
                f"--bitcoin-rpcport={env['REGTEST_BTC_RPC_PORT']}",
                "--bitcoin-rpcuser=satsgate",
                "--bitcoin-rpcpassword=satsgate",
                f"--addr=127.0.0.1:{port}",
                f"--log-file={carol}/log",
                "--daemon",
            ],
            stdin=subprocess.DEVNULL,
            stdout=stdio,
            stderr=stdio,
            check=True,
            timeout=120,
        )
    wait_for(
        "carol",
        lambda: (
            subprocess.run(
                ["lightning-cli", "--network=regtest", f"--lightning-dir={carol}", "getinfo"],
                capture_output=True,
            ).returncode
            == 0
        ),
    )
    carol_id = ln(state, "carol", "getinfo")["id"]
    ln(state, "payer", "connect", f"{carol_id}@127.0.0.1:{port}")
    ln(state, "payer", "-k", "fundchannel", f"id={carol_id}", "amount=500000", "announce=false")
    miner = subprocess.run([*btc, "getnewaddress"], capture_output=True, text=True, check=True)
    subprocess.run(
        [*btc, "generatetoaddress", "6", miner.stdout.strip()], capture_output=True, check=True
    )

    def hinted() -> bool:
        channels = ln(state, "carol", "listpeerchannels")["channels"]
        if not channels or channels[0]["state"] != "CHANNELD_NORMAL":
            return False
        probe = ln(state, "carol", "invoice", "1000", f"probe-{time.time()}", "probe")
        return bool(ln(state, "carol", "decode", probe["bolt11"]).get("routes"))

    wait_for("carol's channel and its route hint", hinted)


def failed_paid_call(state: str, url: str) -> dict[str, Any]:
    """extract-document on a blank page, paid by the payer node with L402: refunded;
    the LNURL-withdraw request of its refund link."""
    body = {"imageBase64": blank_page()}
    first = httpx.post(f"{url}/api/l402/extract-document", json=body, timeout=60)
    assert first.status_code == 402, first.text
    macaroon, invoice = l402_challenge(first)
    preimage = ln(state, "payer", "pay", invoice)["payment_preimage"]
    failed = httpx.post(
        f"{url}/api/l402/extract-document",
        json=body,
        headers={"Authorization": f"L402 {macaroon}:{preimage}"},
        timeout=120,
    )
    assert failed.status_code == 400, failed.text
    refund = failed.json()["refund"]
    withdraw = httpx.get(lnurl_decode(refund["lnurl_withdraw"]), timeout=30).json()
    assert withdraw["tag"] == "withdrawRequest", withdraw
    return dict(withdraw)


def claim(withdraw: dict[str, Any], bolt11: str) -> dict[str, Any]:
    params = {"k1": withdraw["k1"], "pr": bolt11}
    return dict(httpx.get(withdraw["callback"], params=params, timeout=60).json())


def ledger(state: str, store_url: str) -> dict[str, Any]:
    data_dir = Path(state) / "satsgate" / "regtest" / "satsgate-data"
    store = ["--store-url", store_url] if store_url else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "satsgate.cli",
            "ledger",
            "--data-dir",
            str(data_dir),
            "--json",
            *store,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.timeout(900)
def test_paid_calls_sessions_and_refunds_on_regtest(store_url: str) -> None:
    """On each store: the SQLite file, and a PostgreSQL database (SATSGATE_STORE_URL in
    lightningd's environment, which its plugins inherit)."""
    state = tempfile.mkdtemp(prefix="sg-regtest-")  # short: lightning-rpc socket paths
    env = dict(
        {k: v for k, v in os.environ.items() if k != "SATSGATE_STORE_URL"},
        SATSGATE_REGTEST_MODE="native",
        SATSGATE_REGTEST_DIR=state,
        SATSGATE_PYTHON=sys.executable,
        SATSGATE_PORT=str(free_port()),
        REGTEST_BTC_RPC_PORT=str(free_port()),
        REGTEST_BTC_P2P_PORT=str(free_port()),
        REGTEST_SATSGATE_LN_PORT=str(free_port()),
        REGTEST_PAYER_LN_PORT=str(free_port()),
    )
    if store_url:
        env["SATSGATE_STORE_URL"] = store_url
    try:
        run("up.sh", env, 300)
        run("fund.sh", env, 300)
        out = run("e2e.sh", env, 180)
        assert "OK: paid render-card call end to end" in out

        # A session: the payer node's amountless return invoice is paid once, exactly
        # the deposit less the two calls charged, by the satsgate node's xpay.
        out = run("e2e_sessions.sh", env, 180)
        assert "OK: session paid out once on close" in out
        s = figures(out, "SESSION")
        price = s["price_msat"]
        assert price == 5_000  # render-card's flat price
        assert s["deposit_msat"] == Settings().session_deposit_multiplier * price
        assert s["charged_msat"] == 2 * price  # open served one call, the bearer another
        assert s["balance_msat"] == s["deposit_msat"] - s["charged_msat"]
        assert s["received_msat"] == s["balance_msat"]  # at the payer node, once
        assert 0 <= s["fee_msat"] <= fee_cap(s["balance_msat"])
        assert s["sent_msat"] == s["received_msat"] + s["fee_msat"]
        # A second session naming the same return invoice: refused at open (the node would
        # answer "already paid"), then opened with a fresh one on the same deposit.
        assert s["reused_return_invoice"] == "invalid-return-invoice"
        assert s["second_balance_msat"] == s["deposit_msat"] - price  # its open served one
        assert s["second_received_msat"] == s["second_balance_msat"]
        # A third session's return invoice, paid by the operator by hand (1 sat) before the
        # close: not paid again, and not reported paid either (the operator settles it).
        assert (s["third_refund_status"], s["third_received_msat"]) == ("failed", 1_000)

        # A call failing after payment: refunded in full through LNURL-withdraw, once.
        out = run("e2e_refund.sh", env, 180)
        assert "OK: failed call refunded once through LNURL-withdraw" in out
        r = figures(out, "REFUND")
        assert r["paid_msat"] == r["refund_sats"] * 1000 == r["amount_msat"] == 10_000
        assert r["received_msat"] == r["amount_msat"]
        assert r["sent_msat"] - r["received_msat"] <= fee_cap(r["amount_msat"])
        assert r["second_claim"]["status"] == "ERROR"
        assert r["paid_invoice_claim"] == {
            "status": "ERROR",
            "reason": "The invoice was paid already: send a fresh one.",
        }

        # The ledger after them: received = earned + refunded + held + open, to the msat.
        report = ledger(state, store_url)
        t = report["totals"]
        sessions_paid = s["received_msat"] + s["second_received_msat"]
        third_owed = s["deposit_msat"] - price  # its open served one call
        assert t["received_msat"] == price + 3 * s["deposit_msat"] + 2 * r["paid_msat"]
        assert t["earned_msat"] == price + s["charged_msat"] + 2 * price
        assert t["refunded_msat"] == 2 * r["amount_msat"] + sessions_paid + third_owed
        assert t["held_msat"] == t["open_msat"] == 0
        assert t["received_msat"] == (
            t["earned_msat"] + t["refunded_msat"] + t["held_msat"] + t["open_msat"]
        )
        assert (t["refunds_paid"], t["refunds_paid_msat"]) == (2, 2 * r["amount_msat"])
        assert t["refund_fees_msat"] == 2 * (r["sent_msat"] - r["received_msat"])
        assert t["session_refunds_msat"] == sessions_paid + third_owed
        assert t["session_refunds_paid_msat"] == sessions_paid  # what reached the payer
        assert t["session_payout_fees_msat"] == s["fee_msat"]
        assert (t["sessions"], t["sessions_open"], t["session_balances_msat"]) == (3, 0, 0)
        owed = report["session_payouts"]
        assert [(p["refund_msat"], p["payout_status"]) for p in owed] == [(third_owed, "failed")]
        assert "paid already" in owed[0]["payout_error"]

        # The day's payout fee budget spent (0 here): every payout is granted 0 msat of
        # routing fees, xpay's maxfee 0. A payout over the direct channel still goes, at
        # no fee, and the budget is not touched.
        zero = Path(state) / "zero-fee-budget.toml"
        zero.write_text("payout_fee_budget_msat = 0\n")
        log_start = (Path(state) / "satsgate" / "log").stat().st_size
        restart_plugin(state, env["SATSGATE_PORT"], f"satsgate-config={zero}")
        z = figures(run("e2e_sessions.sh", env, 180), "SESSION")
        assert (z["fee_msat"], z["sent_msat"]) == (0, z["received_msat"])
        assert z["received_msat"] == z["balance_msat"] == z["deposit_msat"] - z["charged_msat"]
        assert z["second_received_msat"] == z["second_balance_msat"]
        zr = figures(run("e2e_refund.sh", env, 180), "REFUND")
        assert zr["received_msat"] == zr["sent_msat"] == zr["amount_msat"] == 10_000
        with (Path(state) / "satsgate" / "log").open("rb") as node_log:
            node_log.seek(log_start)
            logged = node_log.read().decode(errors="replace")
        grants = {
            (int(amount), int(fee))
            for amount, fee in re.findall(r"a payout of (\d+) msat may spend (\d+) msat", logged)
        }
        # Each payout's grant, logged as the budget's warning: 0 msat, what xpay was given.
        assert {
            (z["balance_msat"], 0),
            (z["second_balance_msat"], 0),
            (zr["amount_msat"], 0),
        } <= grants, logged
        assert {fee for _, fee in grants} == {0}, grants
        after = ledger(state, store_url)["totals"]
        assert after["session_payout_fees_msat"] == t["session_payout_fees_msat"]
        assert after["refund_fees_msat"] == t["refund_fees_msat"]
        assert after["session_refunds_paid_msat"] == sessions_paid + (
            z["received_msat"] + z["second_received_msat"]
        )
        assert after["received_msat"] == (
            after["earned_msat"] + after["refunded_msat"] + after["held_msat"] + after["open_msat"]
        )

        # A payout that needs a routing fee, granted 0: xpay finds no route within
        # maxfee 0 and pays nothing; satsgate reads that as failed (not unknown) and opens
        # the refund link again. With the budget back, the payer's next claim is paid,
        # fee and all, within the cap.
        start_carol(env, state)
        url = f"http://127.0.0.1:{env['SATSGATE_PORT']}"
        withdraw = failed_paid_call(state, url)
        amount_msat = int(withdraw["maxWithdrawable"])
        label = f"carol-{time.time()}"
        refused = ln(state, "carol", "invoice", str(amount_msat), label, "refund")
        assert claim(withdraw, refused["bolt11"]) == {"status": "OK"}

        def failed_and_open() -> bool:
            problems = ledger(state, store_url)["refund_payouts"]
            return any(p["status"] == "open" and p["payout_error"] for p in problems)

        wait_for("the payout to carol to fail", failed_and_open, 90)
        problem = ledger(state, store_url)["refund_payouts"][0]
        assert problem["amount_msat"] == amount_msat, problem
        # v26.06: "Failed: Could not find route without excessive cost" (askrene's code 206,
        # PAY_ROUTE_TOO_EXPENSIVE, passed on by xpay: one satsgate reads as failed).
        assert "excessive cost" in problem["payout_error"], problem
        assert ln(state, "carol", "listinvoices", label)["invoices"][0]["status"] == "unpaid"
        tried = ln(state, "satsgate", "listpays", f"bolt11={refused['bolt11']}")["pays"]
        assert all(pay["status"] == "failed" for pay in tried), tried
        restart_plugin(state, env["SATSGATE_PORT"])  # the default budget again
        fees_before = ledger(state, store_url)["totals"]["refund_fees_msat"]
        again = ln(state, "carol", "invoice", str(amount_msat), f"{label}-2", "refund")
        assert claim(withdraw, again["bolt11"]) == {"status": "OK"}
        wait_for(
            "the payout to carol",
            lambda: (
                ln(state, "carol", "listinvoices", f"{label}-2")["invoices"][0]["status"] == "paid"
            ),
            90,
        )
        pays = ln(state, "satsgate", "listpays", f"bolt11={again['bolt11']}")["pays"]
        assert [pay["status"] for pay in pays] == ["complete"], pays
        fee = int(pays[0]["amount_sent_msat"]) - int(pays[0]["amount_msat"])
        assert 0 < fee <= fee_cap(amount_msat), fee
        wait_for(
            "the refund's fee in the ledger",
            lambda: ledger(state, store_url)["totals"]["refund_fees_msat"] == fees_before + fee,
            30,
        )
    finally:
        subprocess.run(
            [
                "lightning-cli",
                "--network=regtest",
                f"--lightning-dir={state}/carol",
                "stop",
            ],
            capture_output=True,
            timeout=60,
        )
        subprocess.run(
            ["bash", str(REGTEST / "down.sh"), "--clean"], env=env, capture_output=True, timeout=120
        )
        shutil.rmtree(state, ignore_errors=True)
