"""satsgate beside a real lnd on regtest: bitcoind, lnd and lncli binaries, when present.

regtest/lnd_up.sh starts bitcoind (RPC polling, no ZMQ), two lnds (satsgate's and the
payer's), opens a channel payer -> satsgate, bakes satsgate's macaroon with the
README's command as written and starts satsgate with the README's serve line (hold
invoices on, through the environment). Then, on that one chain, in order:

- satsgate refuses, at start, a macaroon without the permissions (naming them, from
  real lnd's "permission denied") and an lnd on another network;
- an L402 call (regtest/lnd_e2e.sh) and a Payment charge call (pympp as the client)
  paid from the payer's lnd with lncli, each served once;
- charge only on success: a hold invoice settled after the call succeeded, and one
  canceled after it failed (the payer's lncli sees the payment fail, its channel
  balance unchanged);
- holds paid, left undecided across a satsgate restart: one used after the restart
  (settled), one given back by the watcher (canceled), never left to expire;
- a refund link after a failure, claimed with the payer's invoice: paid once over
  SendPaymentV2, a second claim refused;
- an invoice paid while satsgate was stopped: applied at start, before any request,
  and counted once across another restart;
- a session opened with the payer lnd's amountless return invoice, a bearer call with
  the session token (the deposit's preimage alone refused), closed twice: the balance
  paid back once.
- with the day's payout fee budget spent (set to 0), a refund link and a session
  balance granted 0 msat of routing fees (fee_limit_msat 0): paid over the direct
  channel at no fee; a refund to a third lnd behind the payer, which needs a fee, finds
  no route and its link opens again, paid (with its fee) once the budget is back.

The ledger balances to the msat (tests/ledger_check.py) after each. Binaries are found
on PATH or in ``LND_REGTEST_BIN``; skipped, with the reason, when absent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mpp import Credential, Receipt
from mpp.client import Mpp  # type: ignore[attr-defined]
from mpp.methods import Method
from mpp.runtime import ClientMethod, CredentialParams

from satsgate.backends.lnd.backend import LndBackend
from satsgate.config.settings import Settings
from satsgate.lightning.backend import PaymentState, UnknownInvoice
from satsgate.payouts.fees import fee_cap_msat
from tests.backends.test_lnd_backend import narrowest_permissions
from tests.conftest import free_port
from tests.ledger_check import assert_ledger_balances_at
from tests.payments.test_mpp_conformance import LightningPayload, LightningRequest

REGTEST = Path(__file__).resolve().parents[2] / "regtest"
BINARIES = ("bitcoind", "bitcoin-cli", "lnd", "lncli")
SEARCH_PATH = os.pathsep.join(
    p for p in (os.environ.get("LND_REGTEST_BIN", ""), os.environ.get("PATH", "")) if p
)
missing = [b for b in BINARIES if shutil.which(b, path=SEARCH_PATH) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(missing),
        reason=f"needs {', '.join(missing)} on PATH or in LND_REGTEST_BIN "
        "(Bitcoin Core and lnd binaries, regtest/README.md)",
    ),
]

CARD = {"template": "headline", "title": "hi"}
ACCEPT = {"Accept": "application/json, text/event-stream"}
HOLD_UNUSED_S = "600"  # hold_max_unused_s while the tests run; a restart lowers it


def blank_page() -> str:
    """A blank 600x400 page (PNG, base64): extract-document accepts it before the
    invoice and finds no text after payment (INVALID_INPUT, refunded)."""
    w, h = 600, 400

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    raw = b"".join(b"\x00" + b"\xff" * w for _ in range(h))
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(png).decode()


def lnurl_decode(lnurl: str) -> str:
    """The URL inside an LNURL (bech32, LUD-01)."""
    charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
    text = lnurl.lower()
    data = [charset.index(c) for c in text[text.rindex("1") + 1 :]][:-6]
    acc = bits = 0
    out = bytearray()
    for value in data:
        acc = (acc << 5) | value
        bits += 5
        while bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xFF)
    return out.decode()


@dataclass
class Chain:
    state: Path
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['SATSGATE_PORT']}"

    @property
    def data_dir(self) -> Path:
        return self.state / "satsgate-data"

    def script(self, name: str, *args: str, timeout_s: int = 300, **env: str) -> str:
        done = subprocess.run(
            ["bash", str(REGTEST / name), *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def mine(self, blocks: int) -> None:
        btc = [
            "bitcoin-cli",
            "-regtest",
            f"-datadir={self.state / 'bitcoind'}",
            f"-rpcport={self.env['REGTEST_BTC_RPC_PORT']}",
            "-rpcuser=satsgate",
            "-rpcpassword=satsgate",
            "-rpcwallet=miner",
        ]
        address = subprocess.run(
            [*btc, "getnewaddress"], env=self.env, capture_output=True, text=True, check=True
        ).stdout.strip()
        subprocess.run(
            [*btc, "generatetoaddress", str(blocks), address],
            env=self.env,
            capture_output=True,
            check=True,
            timeout=120,
        )

    def satsgate_fails_to_start(self, **env: str) -> str:
        """Start satsgate expecting a refusal; its log."""
        done = subprocess.run(
            ["bash", str(REGTEST / "lnd_satsgate.sh"), "start"],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode != 0, "satsgate started"
        return (self.state / "satsgate.log").read_text()

    def lncli(self, node: str, *args: str) -> dict[str, Any]:
        return last_json(self.lncli_text(node, *args))

    def lncli_text(self, node: str, *args: str) -> str:
        port = self.env[f"REGTEST_LND_{node.upper()}_RPC_PORT"]
        done = subprocess.run(
            [
                "lncli",
                "--network=regtest",
                f"--lnddir={self.state / f'lnd-{node}'}",
                f"--rpcserver=127.0.0.1:{port}",
                *args,
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"lncli {args}: {done.stderr}"
        return done.stdout

    def pay_in_background(self, invoice: str) -> subprocess.Popen[str]:
        """The payer's lncli payinvoice, which returns only when the payment is final
        (a held HTLC keeps it waiting)."""
        port = self.env["REGTEST_LND_PAYER_RPC_PORT"]
        return subprocess.Popen(
            [
                "lncli",
                "--network=regtest",
                f"--lnddir={self.state / 'lnd-payer'}",
                f"--rpcserver=127.0.0.1:{port}",
                "payinvoice",
                "--force",
                "--json",
                invoice,
            ],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def pay(self, invoice: str) -> dict[str, Any]:
        paid = self.lncli("payer", "payinvoice", "--force", "--json", invoice)
        assert paid["status"] == "SUCCEEDED", paid
        return paid

    def invoice_at_satsgate_lnd(self, payment_hash: str) -> dict[str, Any]:
        return self.lncli("satsgate", "lookupinvoice", payment_hash)

    def payer_local_msat(self) -> int:
        return int(self.lncli("payer", "channelbalance")["local_balance"]["msat"])

    def ledger(self) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "satsgate.cli",
                    "ledger",
                    "--data-dir",
                    str(self.data_dir),
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            return dict(json.loads(done.stdout))

        return assert_ledger_balances_at(self.data_dir / "satsgate.sqlite3", read)

    def wait_status(self, payment_id: str, status: str, timeout_s: float = 60) -> None:
        """Until satsgate's database says the payment is ``status``."""
        wait_for(
            f"payment {payment_id} {status}",
            lambda: self.payment_row(payment_id)[0] == status,
            timeout_s,
        )

    def payment_row(self, payment_id: str) -> tuple[str, int]:
        """(status, amount_msat) of a payment in satsgate's database (read-only)."""
        conn = sqlite3.connect(f"file:{self.data_dir / 'satsgate.sqlite3'}?mode=ro", uri=True)
        try:
            row = conn.execute(
                "SELECT status, amount_msat FROM payments WHERE payment_id = ?", (payment_id,)
            ).fetchone()
        finally:
            conn.close()
        assert row is not None, payment_id
        return str(row[0]), int(row[1])


def last_json(text: str) -> dict[str, Any]:
    """The last of the JSON objects lncli printed (payinvoice prints one per update)."""
    decoder, position, last = json.JSONDecoder(), 0, None
    text = text.strip()
    while position < len(text):
        last, end = decoder.raw_decode(text, position)
        position = end
        while position < len(text) and text[position].isspace():
            position += 1
    assert isinstance(last, dict), text
    return last


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def finished(proc: subprocess.Popen[str], timeout_s: float = 120) -> dict[str, Any]:
    """The payment lncli payinvoice printed (it exits non-zero unless SUCCEEDED)."""
    out, err = proc.communicate(timeout=timeout_s)
    assert out.strip(), err
    payment = last_json(out)
    assert (proc.returncode == 0) == (payment["status"] == "SUCCEEDED"), (payment, err)
    return payment


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    state = Path(tempfile.mkdtemp(prefix="sg-lnd-"))
    env = dict(
        os.environ,
        PATH=SEARCH_PATH,
        SATSGATE_REGTEST_DIR=str(state),
        SATSGATE_PYTHON=sys.executable,
        SATSGATE_PORT=str(free_port()),
        REGTEST_BTC_RPC_PORT=str(free_port()),
        REGTEST_BTC_P2P_PORT=str(free_port()),
        REGTEST_LND_SATSGATE_RPC_PORT=str(free_port()),
        REGTEST_LND_SATSGATE_P2P_PORT=str(free_port()),
        REGTEST_LND_PAYER_RPC_PORT=str(free_port()),
        REGTEST_LND_PAYER_P2P_PORT=str(free_port()),
        SATSGATE_HOLD_INVOICES="true",
        SATSGATE_HOLD_MAX_UNUSED_S=HOLD_UNUSED_S,
    )
    chain = Chain(state, env)
    try:
        chain.script("lnd_up.sh", timeout_s=900)
        yield chain
    finally:
        subprocess.run(
            ["bash", str(REGTEST / "lnd_down.sh"), "--clean"],
            env=env,
            capture_output=True,
            timeout=180,
        )
        shutil.rmtree(state, ignore_errors=True)


def l402_challenge(resp: httpx.Response) -> tuple[str, str]:
    line = next(v for v in resp.headers.get_list("WWW-Authenticate") if v.startswith("L402 "))
    params = dict(part.split("=", 1) for part in line[len("L402 ") :].split(", "))
    return params["macaroon"].strip('"'), params["invoice"].strip('"')


def tool(client: httpx.Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    resp = client.post(
        "/api/mcp",
        headers=ACCEPT,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        },
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["result"])


def create_payment(client: httpx.Client, tool_name: str, arguments: dict[str, Any]) -> Any:
    result = tool(client, "create_payment", {"toolName": tool_name, "arguments": arguments})
    assert not result.get("isError"), result
    return result["structuredContent"]


# -- the tests, in order, on one chain ---------------------------------------------------------


def test_refuses_a_macaroon_without_the_permissions_and_another_network(chain: Chain) -> None:
    invoices_before = len(chain.lncli("satsgate", "listinvoices")["invoices"])
    chain.script("lnd_satsgate.sh", "stop")
    narrow = chain.state / "narrow.macaroon"
    chain.lncli_text(
        "satsgate", "bakemacaroon", f"--save_to={narrow}", "info:read", "invoices:read"
    )
    log = chain.satsgate_fails_to_start(SATSGATE_MACAROON_OVERRIDE=str(narrow))
    assert "satsgate serve: cannot start:" in log
    assert "lacks permissions satsgate needs" in log
    assert (
        "invoices:write (for AddInvoice, AddHoldInvoice, SettleInvoice, CancelInvoice); "
        "offchain:read (for TrackPaymentV2); offchain:write (for SendPaymentV2)"
    ) in log
    assert "Traceback" not in log

    log = chain.satsgate_fails_to_start(SATSGATE_REGTEST_NETWORK="testnet")
    assert "network mismatch" in log and "regtest" in log and "testnet" in log
    assert "Traceback" not in log
    # The permission tries created nothing at the node.
    assert len(chain.lncli("satsgate", "listinvoices")["invoices"]) == invoices_before
    chain.script("lnd_satsgate.sh", "start")


def test_l402_call_paid_from_the_payer_lnd(chain: Chain) -> None:
    out = chain.script("lnd_e2e.sh", timeout_s=180)
    assert "OK: paid render-card call end to end beside lnd" in out
    t = chain.ledger()["totals"]
    assert t["received_msat"] == t["earned_msat"] == 5_000  # render-card's price, once


def test_payment_charge_call_with_pympp(chain: Chain) -> None:
    paid: list[dict[str, Any]] = []
    authorizations: list[str] = []

    async def create_credential(params: CredentialParams) -> str:
        invoice = params.challenge.request["methodDetails"]["invoice"]
        payment = chain.pay(invoice)
        paid.append(payment)
        payload = {"preimage": payment["payment_preimage"]}
        credential = Credential(challenge=params.challenge.to_echo(), payload=payload)
        authorizations.append(credential.to_authorization())
        return authorizations[-1]

    method = ClientMethod(
        method=Method(
            name="lightning",
            intent="charge",
            request_model=LightningRequest,
            payload_model=LightningPayload,
        ),
        create_credential=create_credential,
        can_handle_challenge=lambda challenge: True,
    )

    async def call() -> httpx.Response:
        client = Mpp(methods=[method], allowed_origins=[chain.url])
        async with client, client.client() as http:
            return await http.post(f"{chain.url}/api/l402/render-card", json=CARD)

    resp = asyncio.run(call())
    assert resp.status_code == 200, resp.text
    assert len(paid) == 1
    receipt = Receipt.from_payment_receipt(resp.headers["Payment-Receipt"])
    assert receipt.status == "success" and receipt.method == "lightning"
    preimage = bytes.fromhex(paid[0]["payment_preimage"])
    assert receipt.reference == hashlib.sha256(preimage).hexdigest() == paid[0]["payment_hash"]
    # The same credential again: served once.
    again = httpx.post(
        f"{chain.url}/api/l402/render-card",
        json={**CARD, "title": "again"},
        headers={"Authorization": authorizations[0]},
        timeout=60,
    )
    # The Payment scheme answers a used challenge with 402 and a fresh challenge.
    assert again.status_code == 402, again.text
    assert again.json()["error_code"] == "PAYMENT_ALREADY_USED"
    t = chain.ledger()["totals"]
    assert t["received_msat"] == t["earned_msat"] == 2 * 5_000


def test_hold_settled_after_success_and_canceled_after_failure(chain: Chain) -> None:
    before = chain.ledger()["totals"]
    with httpx.Client(base_url=chain.url, timeout=120) as client:
        # Success: held while the call runs, settled with satsgate's preimage after.
        created = create_payment(client, "render_card", CARD)
        payer = chain.pay_in_background(created["lightningInvoice"])
        payment_hash = created["paymentHash"]
        wait_for(
            "the HTLC held at satsgate's lnd",
            lambda: chain.invoice_at_satsgate_lnd(payment_hash)["state"] == "ACCEPTED",
        )
        chain.wait_status(created["paymentId"], "paid")  # satsgate saw the held HTLC
        assert payer.poll() is None  # the payer's payment waits: held, not settled
        result = tool(client, "render_card", {"paymentId": created["paymentId"], **CARD})
        assert not result.get("isError"), result
        done = finished(payer)
        assert done["status"] == "SUCCEEDED", done
        assert hashlib.sha256(bytes.fromhex(done["payment_preimage"])).hexdigest() == payment_hash
        assert chain.invoice_at_satsgate_lnd(payment_hash)["state"] == "SETTLED"

        # Failure after payment: canceled, the payer's lnd sees the payment fail.
        local_before = chain.payer_local_msat()
        args = {"imageBase64": blank_page()}
        failing = create_payment(client, "extract_document", args)
        payer = chain.pay_in_background(failing["lightningInvoice"])
        chain.wait_status(failing["paymentId"], "paid")
        result = tool(client, "extract_document", {"paymentId": failing["paymentId"], **args})
        assert result["isError"] is True, result
        refund = result["structuredContent"]["refund"]
        assert refund["hold_invoice_canceled"] is True and "lnurl_withdraw" not in refund
        done = finished(payer)
        assert done["status"] == "FAILED", done
        assert done["failure_reason"] == "FAILURE_REASON_INCORRECT_PAYMENT_DETAILS", done
        canceled = chain.invoice_at_satsgate_lnd(failing["paymentHash"])
        # lnd keeps amt_paid_msat on a canceled hold invoice; its HTLC is canceled back.
        assert canceled["state"] == "CANCELED"
        assert [h["state"] for h in canceled["htlcs"]] == ["CANCELED"], canceled
        # The sats never left the payer (its HTLC failed back: no fee on a direct channel).
        wait_for("the payer's balance back", lambda: chain.payer_local_msat() == local_before)
    t = chain.ledger()["totals"]
    amount = chain.payment_row(created["paymentId"])[1]
    assert t["received_msat"] - before["received_msat"] == amount
    assert t["earned_msat"] - before["earned_msat"] == amount
    assert t["canceled_holds"] - before["canceled_holds"] == 1


def test_undecided_holds_are_decided_after_a_restart(chain: Chain) -> None:
    before = chain.ledger()["totals"]
    with httpx.Client(base_url=chain.url, timeout=120) as client:
        kept = create_payment(client, "render_card", CARD)
        idle = create_payment(client, "render_card", {**CARD, "title": "idle"})
    payers = {}
    for created in (kept, idle):
        payers[created["paymentId"]] = chain.pay_in_background(created["lightningInvoice"])
        chain.wait_status(created["paymentId"], "paid")
    chain.script("lnd_satsgate.sh", "stop")
    chain.script("lnd_satsgate.sh", "start")
    # Still held across the restart; the one used now is settled.
    assert chain.invoice_at_satsgate_lnd(kept["paymentHash"])["state"] == "ACCEPTED"
    with httpx.Client(base_url=chain.url, timeout=120) as client:
        result = tool(client, "render_card", {"paymentId": kept["paymentId"], **CARD})
    assert not result.get("isError"), result
    assert finished(payers[kept["paymentId"]])["status"] == "SUCCEEDED"
    # The unused one: after another restart with hold_max_unused_s = 1 the watcher gives
    # it back (canceled), long before its CLTV expiry.
    assert chain.invoice_at_satsgate_lnd(idle["paymentHash"])["state"] == "ACCEPTED"
    chain.script("lnd_satsgate.sh", "stop")
    chain.script("lnd_satsgate.sh", "start", SATSGATE_HOLD_MAX_UNUSED_S="1")
    done = finished(payers[idle["paymentId"]])
    assert done["status"] == "FAILED", done
    assert chain.invoice_at_satsgate_lnd(idle["paymentHash"])["state"] == "CANCELED"
    chain.wait_status(idle["paymentId"], "canceled")
    chain.script("lnd_satsgate.sh", "stop")
    chain.script("lnd_satsgate.sh", "start")
    t = chain.ledger()["totals"]
    amount = chain.payment_row(kept["paymentId"])[1]
    assert t["received_msat"] - before["received_msat"] == amount
    assert t["earned_msat"] - before["earned_msat"] == amount
    assert t["held_msat"] == t["open_msat"] == 0


def test_refund_link_paid_once_over_sendpaymentv2(chain: Chain) -> None:
    refund_link_paid_once(chain)


def failed_paid_call(chain: Chain) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """extract-document on a blank page, paid from the payer lnd with L402, fails after
    payment: the LNURL-withdraw request of its refund link, the payment, the error."""
    body = {"imageBase64": blank_page()}
    with httpx.Client(base_url=chain.url, timeout=120) as client:
        first = client.post("/api/l402/extract-document", json=body)
        assert first.status_code == 402, first.text
        macaroon, invoice = l402_challenge(first)
        paid = chain.pay(invoice)
        failed = client.post(
            "/api/l402/extract-document",
            json=body,
            headers={"Authorization": f"L402 {macaroon}:{paid['payment_preimage']}"},
        )
        assert failed.status_code == 400, failed.text
        error = failed.json()
        assert error["error_code"] == "INVALID_INPUT" and error["refund"]["status"] == "open"
        withdraw = client.get(lnurl_decode(error["refund"]["lnurl_withdraw"])).json()
    assert withdraw["tag"] == "withdrawRequest"
    return dict(withdraw), paid, dict(error)


def refund_link_paid_once(chain: Chain) -> dict[str, Any]:
    """A failed call's refund link claimed with the payer's invoice: paid once over
    SendPaymentV2, a second claim refused; satsgate's lnd's payment record of it."""
    before = chain.ledger()["totals"]
    withdraw, paid, error = failed_paid_call(chain)
    amount_msat = int(withdraw["maxWithdrawable"])
    assert amount_msat == int(paid["value_msat"]) == error["refund"]["amount_sats"] * 1000
    claim = chain.lncli("payer", "addinvoice", "--amt_msat", str(amount_msat), "--memo", "refund")
    answer = httpx.get(
        withdraw["callback"], params={"k1": withdraw["k1"], "pr": claim["payment_request"]}
    ).json()
    assert answer["status"] == "OK", answer
    claim_hash = claim["r_hash"]
    wait_for(
        "the refund at the payer",
        lambda: chain.lncli("payer", "lookupinvoice", claim_hash)["state"] == "SETTLED",
    )
    received = chain.lncli("payer", "lookupinvoice", claim_hash)
    assert int(received["amt_paid_msat"]) == amount_msat
    # A second claim with a fresh invoice: refused, never paid.
    second = chain.lncli("payer", "addinvoice", "--amt_msat", str(amount_msat))
    again = httpx.get(
        withdraw["callback"], params={"k1": withdraw["k1"], "pr": second["payment_request"]}
    ).json()
    assert again["status"] == "ERROR", again
    # satsgate's lnd paid the claim once, with SendPaymentV2 (its payments list).
    payments = chain.lncli("satsgate", "listpayments")["payments"]
    to_claim = [p for p in payments if p["payment_hash"] == claim_hash]
    assert [p["status"] for p in to_claim] == ["SUCCEEDED"], to_claim
    time.sleep(2)
    assert chain.lncli("payer", "lookupinvoice", second["r_hash"])["state"] == "OPEN"
    t = chain.ledger()["totals"]
    assert t["received_msat"] - before["received_msat"] == amount_msat
    assert t["refunded_msat"] - before["refunded_msat"] == amount_msat
    assert t["refunds_paid"] - before["refunds_paid"] == 1
    assert t["refund_fees_msat"] - before["refund_fees_msat"] == int(to_claim[0]["fee_msat"])
    return dict(to_claim[0])


def test_paid_while_satsgate_was_stopped_is_applied_once_at_start(chain: Chain) -> None:
    before = chain.ledger()["totals"]
    with httpx.Client(base_url=chain.url, timeout=120) as client:
        first = client.post("/api/l402/render-card", json=CARD)
    assert first.status_code == 402, first.text
    payment_id = first.json()["paymentId"]
    macaroon, invoice = l402_challenge(first)
    chain.script("lnd_satsgate.sh", "stop")
    paid = chain.pay(invoice)
    assert chain.payment_row(payment_id)[0] == "unpaid"
    chain.script("lnd_satsgate.sh", "start")
    # Applied by the settlement stream at start, with no request asking.
    chain.wait_status(payment_id, "paid", timeout_s=30)
    chain.script("lnd_satsgate.sh", "stop")
    chain.script("lnd_satsgate.sh", "start")
    resp = httpx.post(
        f"{chain.url}/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {macaroon}:{paid['payment_preimage']}"},
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    t = chain.ledger()["totals"]
    assert t["received_msat"] - before["received_msat"] == int(paid["value_msat"])  # once
    assert t["payments"] - before["payments"] == 1


def test_the_backend_reads_real_lnd_refusals_as_final(chain: Chain) -> None:
    """lnd refuses an expired, amountless or own invoice with a plain error (UNKNOWN)
    before any payment record: the backend says FAILED, with lnd's reason, not pending."""
    backend = LndBackend(
        f"127.0.0.1:{chain.env['REGTEST_LND_SATSGATE_RPC_PORT']}",
        chain.state / "lnd-satsgate" / "tls.cert",
        chain.state / "satsgate.macaroon",  # the README's macaroon
        "regtest",
    )
    expired = chain.lncli("payer", "addinvoice", "--amt_msat", "5000", "--expiry", "1")
    amountless = chain.lncli("payer", "addinvoice")
    time.sleep(1.5)

    async def run() -> None:
        await backend.start()
        try:
            own = await backend.create_invoice(5_000, "own", 600)
            cases = {
                "invoice expired": (expired["payment_request"], None),
                "amount must be specified": (amountless["payment_request"], None),
                "self-payments not allowed": (own.bolt11, None),
            }
            for reason, (bolt11, amount) in cases.items():
                result = await backend.pay_invoice(bolt11, 1_000, 10, amount)
                assert result.state is PaymentState.FAILED, (reason, result)
                assert reason in (result.failure_reason or ""), result
            with pytest.raises(UnknownInvoice):
                await backend.lookup_invoice("00" * 32)
            never = await backend.lookup_payment("00" * 32)
            assert never.state is PaymentState.FAILED
        finally:
            await backend.close()

    asyncio.run(run())
    payments = chain.lncli("satsgate", "listpayments")["payments"]
    refused = {expired["r_hash"], amountless["r_hash"]}
    assert not [p for p in payments if p["payment_hash"] in refused]  # nothing was sent


def test_the_narrowest_macaroon_of_the_docs_is_enough(chain: Chain) -> None:
    """docs/operations.md's uri: macaroon, baked by real lnd: no RPC refused."""
    uris = narrowest_permissions()
    narrow = chain.state / "uri.macaroon"
    chain.lncli_text("satsgate", "bakemacaroon", f"--save_to={narrow}", *uris)
    backend = LndBackend(
        f"127.0.0.1:{chain.env['REGTEST_LND_SATSGATE_RPC_PORT']}",
        chain.state / "lnd-satsgate" / "tls.cert",
        narrow,
        "regtest",
    )

    async def run() -> dict[str, list[str]]:
        await backend.start()
        try:
            return await backend.missing_permissions()
        finally:
            await backend.close()

    assert len(uris) == 10 and asyncio.run(run()) == {}
    # One RPC left out: refused at start, naming it.
    short = chain.state / "short.macaroon"
    chain.lncli_text(
        "satsgate", "bakemacaroon", f"--save_to={short}", *[u for u in uris if "Cancel" not in u]
    )
    chain.script("lnd_satsgate.sh", "stop")
    log = chain.satsgate_fails_to_start(SATSGATE_MACAROON_OVERRIDE=str(short))
    assert "lacks permissions satsgate needs: invoices:write (for CancelInvoice)." in log
    chain.script("lnd_satsgate.sh", "start")


def session_challenge(resp: httpx.Response) -> dict[str, Any]:
    """The 402's session challenge: its auth-params and, under "decoded", its request."""
    line = next(
        v
        for v in resp.headers.get_list("WWW-Authenticate")
        if v.startswith("Payment ") and 'intent="session"' in v
    )
    params: dict[str, Any] = dict(re.findall(r'(\w+)="([^"]*)"', line))
    raw = params["request"]
    params["decoded"] = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    return params


def session_credential(challenge: dict[str, Any], payload: dict[str, Any]) -> str:
    echoed = {k: challenge[k] for k in ("id", "realm", "method", "intent", "request", "expires")}
    doc = {"challenge": echoed, "payload": payload}
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return "Payment " + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def receipt_of(resp: httpx.Response) -> dict[str, Any]:
    value = resp.headers["Payment-Receipt"]
    return dict(json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))))


def test_session_opened_used_closed_and_paid_back_once(chain: Chain) -> None:
    """Open with the payer lnd's amountless return invoice (the answer hands over the
    session token), a bearer call with the deposit's preimage alone (all a routing node
    knows) refused, one with the token served, close: the balance paid back once."""
    session_paid_back_once(chain)


def session_paid_back_once(chain: Chain) -> dict[str, Any]:
    """A session opened, used and closed twice; satsgate's lnd's payment record of the
    balance it paid back (once)."""
    before = chain.ledger()["totals"]
    body = {"template": "headline", "title": "session"}
    url = f"{chain.url}/api/l402/render-card"
    wants_session = {"Accept-Payment": "lightning/charge, lightning/session"}
    first = httpx.post(url, json=body, headers=wants_session, timeout=60)
    assert first.status_code == 402, first.text
    challenge = session_challenge(first)
    request = challenge["decoded"]
    deposit_msat = int(request["depositAmount"]) * 1000
    session_id = request["paymentHash"]
    preimage = chain.pay(request["depositInvoice"])["payment_preimage"]
    # The payer's amountless return invoice: satsgate's lnd pays it with amt_msat.
    return_invoice = chain.lncli("payer", "addinvoice", "--memo", "satsgate session refund")

    def post(payload: dict[str, Any]) -> httpx.Response:
        auth = session_credential(challenge, payload)
        return httpx.post(url, json=body, headers={"Authorization": auth}, timeout=120)

    opened = post(
        {"action": "open", "preimage": preimage, "returnInvoice": return_invoice["payment_request"]}
    )
    assert opened.status_code == 200, opened.text
    assert receipt_of(opened)["reference"] == session_id
    token = opened.headers["Payment-Session-Token"]
    assert receipt_of(opened)["sessionToken"] == token
    route_knows = post({"action": "bearer", "sessionId": session_id, "preimage": preimage})
    assert route_knows.status_code == 402, route_knows.text
    assert route_knows.json()["error_code"] == "SESSION_BINDING_REQUIRED"
    bound = {"sessionId": session_id, "preimage": preimage, "token": token}
    served = post({"action": "bearer", **bound})
    assert served.status_code == 200, served.text
    charged = receipt_of(opened)["chargedMsat"] + receipt_of(served)["chargedMsat"]
    balance = receipt_of(served)["balanceMsat"]
    assert balance == deposit_msat - charged
    close = {"action": "close", **bound}
    closed = post(close)
    assert closed.status_code == 200, closed.text
    assert (closed.json()["status"], closed.json()["refundStatus"]) == ("closed", "succeeded")
    returned = chain.lncli("payer", "lookupinvoice", return_invoice["r_hash"])
    assert (returned["state"], int(returned["amt_paid_msat"])) == ("SETTLED", balance)
    # Closed again: the same answer, nothing more paid.
    again = post(close)
    assert again.status_code == 200 and again.json() == closed.json(), again.text
    time.sleep(2)
    returned = chain.lncli("payer", "lookupinvoice", return_invoice["r_hash"])
    assert int(returned["amt_paid_msat"]) == balance
    payments = chain.lncli("satsgate", "listpayments")["payments"]
    to_return = [p for p in payments if p["payment_hash"] == return_invoice["r_hash"]]
    assert [(p["status"], int(p["value_msat"])) for p in to_return] == [("SUCCEEDED", balance)]
    t = chain.ledger()["totals"]
    assert t["received_msat"] - before["received_msat"] == deposit_msat
    assert t["earned_msat"] - before["earned_msat"] == charged
    assert t["session_refunds_paid_msat"] - before["session_refunds_paid_msat"] == balance
    assert t["session_payout_fees_msat"] - before["session_payout_fees_msat"] == int(
        to_return[0]["fee_msat"]
    )
    return dict(to_return[0])


def payout_fees_committed(chain: Chain) -> list[tuple[int, int]]:
    """The payout fee budget's day rows in satsgate's database: (day, committed_msat)."""
    conn = sqlite3.connect(f"file:{chain.data_dir / 'satsgate.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT day, committed_msat FROM payout_fee_days ORDER BY day")
        return [(int(day), int(committed)) for day, committed in rows]
    finally:
        conn.close()


def start_carol(chain: Chain) -> subprocess.Popen[bytes]:
    """A third lnd behind the payer: a private channel payer -> carol, so carol's
    invoices carry a route hint through the payer, who charges its forwarding fee (lnd's
    default: 1 sat + 1 ppm). A payout to carol needs a routing fee."""
    rpc, p2p = free_port(), free_port()
    chain.env["REGTEST_LND_CAROL_RPC_PORT"] = str(rpc)  # chain.lncli("carol", ...)
    lnddir = chain.state / "lnd-carol"
    lnddir.mkdir()
    with (lnddir / "stdout.log").open("ab") as out:
        proc = subprocess.Popen(
            [
                "lnd",
                f"--lnddir={lnddir}",
                "--noseedbackup",
                "--alias=carol",
                "--norest",
                f"--rpclisten=127.0.0.1:{rpc}",
                f"--listen=127.0.0.1:{p2p}",
                "--bitcoin.regtest",
                "--bitcoin.node=bitcoind",
                f"--bitcoind.rpchost=127.0.0.1:{chain.env['REGTEST_BTC_RPC_PORT']}",
                "--bitcoind.rpcuser=satsgate",
                "--bitcoind.rpcpass=satsgate",
                "--bitcoind.rpcpolling",
                "--bitcoind.blockpollinginterval=1s",
                "--bitcoind.txpollinginterval=1s",
            ],
            env=chain.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def synced(node: str) -> bool:
        try:
            return bool(chain.lncli(node, "getinfo")["synced_to_chain"])
        except AssertionError:  # not answering yet
            return False

    wait_for("carol's lnd", lambda: synced("carol"), 180)
    wait_for("the payer's lnd at the chain tip", lambda: synced("payer"), 120)
    carol_id = chain.lncli("carol", "getinfo")["identity_pubkey"]
    chain.lncli("payer", "connect", f"{carol_id}@127.0.0.1:{p2p}")
    chain.lncli(
        "payer", "openchannel", "--node_key", carol_id, "--local_amt", "500000", "--private"
    )
    chain.mine(6)

    def hinted() -> bool:
        if len(chain.lncli("carol", "listchannels", "--active_only")["channels"]) != 1:
            return False
        probe = chain.lncli("carol", "addinvoice", "--amt_msat", "1000", "--private")
        return bool(chain.lncli("carol", "decodepayreq", probe["payment_request"])["route_hints"])

    wait_for("carol's channel and its route hint", hinted, 120)
    return proc


def stop_carol(chain: Chain, proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(AssertionError):
        chain.lncli_text("carol", "stop")
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def claim(withdraw: dict[str, Any], bolt11: str) -> dict[str, Any]:
    params = {"k1": withdraw["k1"], "pr": bolt11}
    return dict(httpx.get(withdraw["callback"], params=params, timeout=60).json())


def test_payouts_granted_no_fee_take_zero_fee_routes_only(chain: Chain) -> None:
    """With the day's payout fee budget spent (payout_fee_budget_msat = 0 here) every
    payout is granted 0 msat of routing fees, SendPaymentV2's fee_limit_msat = 0, which
    lnd documents as zero-fee routes only: a refund link and a session balance still
    reach the payer over the direct channel, at no fee, and the budget is not touched;
    a refund to a node behind the payer, which needs a fee, finds no route, reads as
    failed and its link opens again, paid (fee and all) once the budget is back."""
    committed = payout_fees_committed(chain)
    carol = start_carol(chain)
    try:
        chain.script("lnd_satsgate.sh", "stop")
        chain.script("lnd_satsgate.sh", "start", SATSGATE_PAYOUT_FEE_BUDGET_MSAT="0")
        try:
            refund = refund_link_paid_once(chain)
            session = session_paid_back_once(chain)
            withdraw, _, _ = failed_paid_call(chain)
            amount_msat = int(withdraw["maxWithdrawable"])
            refused = chain.lncli(
                "carol", "addinvoice", "--amt_msat", str(amount_msat), "--private"
            )
            assert claim(withdraw, refused["payment_request"]) == {"status": "OK"}

            def failed_and_open() -> list[dict[str, Any]]:
                return [
                    p
                    for p in chain.ledger()["refund_payouts"]
                    if p["status"] == "open" and p["payout_error"]
                ]

            wait_for("the payout to carol to fail", lambda: bool(failed_and_open()), 90)
            log = (chain.state / "satsgate.log").read_text()
        finally:
            chain.script("lnd_satsgate.sh", "stop")
            chain.script("lnd_satsgate.sh", "start")
        assert (int(refund["fee_msat"]), int(session["fee_msat"])) == (0, 0)
        # Each payout was granted 0 msat (what satsgate handed lnd as fee_limit_msat).
        granted = re.findall(r"a payout of (\d+) msat may spend (\d+) msat", log)
        assert [(int(a), int(f)) for a, f in granted] == [
            (int(refund["value_msat"]), 0),
            (int(session["value_msat"]), 0),
            (amount_msat, 0),
        ], log
        # (a day row may be new, at 0: no payout had run this day before, when run alone)
        assert sum(c for _, c in payout_fees_committed(chain)) == sum(c for _, c in committed)
        # The payout to carol: lnd found no route within the limit, nothing reached her.
        [problem] = failed_and_open()
        assert problem["amount_msat"] == amount_msat, problem
        assert "FAILURE_REASON_NO_ROUTE" in problem["payout_error"], problem
        assert chain.lncli("carol", "lookupinvoice", refused["r_hash"])["state"] == "OPEN"
        tried = [
            p
            for p in chain.lncli("satsgate", "listpayments", "--include_incomplete")["payments"]
            if p["payment_hash"] == refused["r_hash"]
        ]
        assert [p["status"] for p in tried] == ["FAILED"], tried

        # The default budget again: the payer's next claim is paid, its fee within the cap.
        fees_before = chain.ledger()["totals"]["refund_fees_msat"]
        again = chain.lncli("carol", "addinvoice", "--amt_msat", str(amount_msat), "--private")
        assert claim(withdraw, again["payment_request"]) == {"status": "OK"}
        wait_for(
            "the refund at carol",
            lambda: chain.lncli("carol", "lookupinvoice", again["r_hash"])["state"] == "SETTLED",
            90,
        )
        [paid] = [
            p
            for p in chain.lncli("satsgate", "listpayments")["payments"]
            if p["payment_hash"] == again["r_hash"]
        ]
        assert paid["status"] == "SUCCEEDED", paid
        assert 0 < int(paid["fee_msat"]) <= fee_cap_msat(Settings(), amount_msat), paid
        wait_for(
            "the refund's fee in the ledger",
            lambda: (
                chain.ledger()["totals"]["refund_fees_msat"] == fees_before + int(paid["fee_msat"])
            ),
            30,
        )
    finally:
        stop_carol(chain, carol)
