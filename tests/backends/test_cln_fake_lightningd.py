"""The fake lightningd keeps the wire facts ClnBackend relies on (from CLN's source and schemas).

If these drift, the ClnBackend tests would pass against something that is
not Core Lightning.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyln.client import LightningRpc, RpcError

from tests.fakes.fake_lightningd import FakeLightningd, running_lightningd


@pytest.fixture
def lightningd() -> Iterator[FakeLightningd]:
    with running_lightningd() as ln:
        yield ln


def raw_exchange(path: str, chunks: list[bytes], answers: int) -> list[dict[str, Any]]:
    """Write the chunks (pausing between them), read ``answers`` blank-line framed replies."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        for chunk in chunks:
            sock.sendall(chunk)
            time.sleep(0.05)
        buf = b""
        while buf.count(b"\n\n") < answers:
            data = sock.recv(65536)
            assert data, "connection closed early"
            buf += data
    frames = buf.split(b"\n\n")
    assert frames[-1] == b""  # every answer ends with a blank line
    return [json.loads(f) for f in frames[:-1]]


def test_stream_of_requests_split_and_batched(lightningd: FakeLightningd) -> None:
    one = json.dumps({"jsonrpc": "2.0", "id": "a:1", "method": "getinfo", "params": {}})
    two = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "nosuch", "params": []})
    data = (one + two).encode()
    answers = raw_exchange(lightningd.rpc_path, [data[:10], data[10:]], answers=2)
    assert answers[0]["id"] == "a:1" and answers[0]["result"]["network"] == "regtest"
    assert answers[1] == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32601, "message": "Unknown command 'nosuch'"},
    }


def test_params_checked_like_lightningd(lightningd: FakeLightningd) -> None:
    rpc = LightningRpc(lightningd.rpc_path)
    with pytest.raises(RpcError) as unknown:
        rpc.call("invoice", {"amount_msat": 1000, "label": "x", "description": "d", "bogus": 1})
    assert unknown.value.error["code"] == -32602
    assert "unknown parameter: bogus" in unknown.value.error["message"]
    with pytest.raises(RpcError) as missing:
        rpc.call("invoice", {"amount_msat": 1000, "label": "x"})
    assert missing.value.error["message"] == "missing required parameter: description"
    positional = rpc.call("invoice", [2000, "pos", "by position", 60])
    assert positional["expires_at"] <= int(time.time()) + 60


def test_invoice_fields_errors_and_lookups(lightningd: FakeLightningd) -> None:
    rpc = LightningRpc(lightningd.rpc_path)
    inv = rpc.invoice(amount_msat=5000, label="l1", description="d", expiry=600)
    assert set(inv) == {"bolt11", "payment_hash", "payment_secret", "expires_at", "created_index"}
    with pytest.raises(RpcError) as dup:
        rpc.invoice(amount_msat=5000, label="l1", description="d")
    assert dup.value.error["code"] == 900
    by = [
        rpc.listinvoices(label="l1"),
        rpc.listinvoices(payment_hash=inv["payment_hash"]),
        rpc.listinvoices(invstring=inv["bolt11"]),
    ]
    assert all(r["invoices"][0]["status"] == "unpaid" for r in by)
    with pytest.raises(RpcError) as two:
        rpc.listinvoices(label="l1", payment_hash=inv["payment_hash"])
    assert two.value.error["code"] == -32602

    paid = rpc.call("dev-fake-pay", {"bolt11": inv["bolt11"]})
    assert (
        hashlib.sha256(bytes.fromhex(paid["payment_preimage"])).hexdigest() == inv["payment_hash"]
    )
    assert (paid["status"], paid["pay_index"], paid["amount_received_msat"]) == ("paid", 1, 5000)
    with pytest.raises(RpcError) as wrong_status:
        rpc.delinvoice(label="l1", status="unpaid")
    assert wrong_status.value.error["code"] == 906
    assert wrong_status.value.error["data"] == {
        "current_status": "paid",
        "expected_status": "unpaid",
    }
    assert rpc.delinvoice(label="l1", status="paid")["label"] == "l1"
    assert rpc.listinvoices(label="l1")["invoices"] == []
    decoded = rpc.decode(rpc.invoice(1000, "l2", "x")["bolt11"])
    assert (decoded["type"], decoded["currency"], decoded["payee"]) == (
        "bolt11 invoice",
        "bcrt",
        lightningd.node.node_id,
    )


def test_waitanyinvoice_cursor_timeout_and_filter(lightningd: FakeLightningd) -> None:
    rpc = LightningRpc(lightningd.rpc_path)
    for label in ("a", "b"):
        lightningd.pay_from_outside(rpc.invoice(1000, label, "x")["bolt11"])
    assert rpc.waitanyinvoice(lastpay_index=0)["label"] == "a"
    assert rpc.waitanyinvoice(lastpay_index=1)["pay_index"] == 2
    started = time.monotonic()
    with pytest.raises(RpcError) as timed_out:
        rpc.waitanyinvoice(lastpay_index=2, timeout=1)
    assert timed_out.value.error["code"] == 904
    assert 0.9 < time.monotonic() - started < 3
    trimmed = rpc.call("listinvoices", {}, filter={"invoices": [{"pay_index": True}]})
    assert trimmed == {"invoices": [{"pay_index": 1}, {"pay_index": 2}]}


def test_xpay_failures_and_listpays_as_core_lightning_v26_06(lightningd: FakeLightningd) -> None:
    """As seen on a real v26.06 node (regtest): the codes, messages and listpays rows of
    failed payments, and a repeat of an amountless invoice with another amount."""
    from tests.fakes.fake_lightningd import FakeNode

    payee = FakeNode(alias="payee")
    lightningd.node.connect(payee)
    stranger = FakeNode(alias="stranger")  # no channel to it
    rpc = LightningRpc(lightningd.rpc_path)

    lost = payee.invoice("any", "deleted", "d")["bolt11"]
    payee.delinvoice("deleted", "unpaid")
    with pytest.raises(RpcError) as err:
        rpc.call("xpay", {"invstring": lost, "amount_msat": 5_000})
    assert err.value.error == {
        "code": 203,
        "message": "Destination said it doesn't know invoice: incorrect_or_unknown_payment_details",
    }
    (failed,) = rpc.listpays(bolt11=lost)["pays"]
    assert failed["status"] == "failed" and failed["amount_sent_msat"] == 0
    assert "amount_msat" not in failed

    far = stranger.invoice(5_000, "far", "d")["bolt11"]
    with pytest.raises(RpcError) as err:
        rpc.call("xpay", {"invstring": far})
    assert err.value.error["code"] == 205
    assert err.value.error["message"] == f"Failed: Unknown destination node {stranger.node_id}"
    assert rpc.listpays(bolt11=far)["pays"] == []

    any_amount = payee.invoice("any", "paid", "d")["bolt11"]
    assert rpc.call("xpay", {"invstring": any_amount, "amount_msat": 1_234})["amount_msat"] == 1_234
    with pytest.raises(RpcError) as err:
        rpc.call("xpay", {"invstring": any_amount, "amount_msat": 1_234})
    assert err.value.error == {"code": 219, "message": "Already paid this invoice successfully"}
    with pytest.raises(RpcError) as err:
        rpc.call("xpay", {"invstring": any_amount, "amount_msat": 999})
    assert err.value.error == {
        "code": -3,
        "message": 'Unexpected injectpaymentonion error 201: {"code":201,'
        '"message":"Already succeeded with amount 1234msat (not 999msat)"}',
    }
    with pytest.raises(RpcError) as err:
        rpc.call("xpay", {"invstring": payee.invoice("any", "no-amount", "d")["bolt11"]})
    assert err.value.error == {"code": -32602, "message": "amount_msat required"}
    with pytest.raises(RpcError) as err:
        rpc.call("xpay", {"invstring": far, "amount_msat": 5_000})
    assert err.value.error == {"code": -32602, "message": "amount_msat unnecessary"}
