"""ClnBackend against a fake lightningd on a real unix socket: the CLN-specific rules.

The generic LightningBackend rules are in test_cln_contract.py; here are the
ones that depend on Core Lightning's wire: labels and expiry, the pay_index
cursor across restarts, waitanyinvoice timeouts, xpay/pay fallbacks and the
"pending is never failed" reading of CLN's errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from satsgate.backends.cln import LABEL_PREFIX, ClnBackend
from satsgate.backends.cln.rpc import parse_msat
from satsgate.lightning.backend import (
    BackendError,
    InvoiceState,
    PaymentState,
    Settlement,
    UnknownInvoice,
)
from satsgate.lightning.invoices import decode_invoice
from tests.fakes.fake_lightningd import FakeLightningd, FakeNode, running_lightningd


@pytest.fixture
def lightningd() -> Iterator[FakeLightningd]:
    with running_lightningd() as ln:
        yield ln


@pytest.fixture
def payee(lightningd: FakeLightningd) -> FakeNode:
    node = FakeNode(alias="payee")
    lightningd.node.connect(node)
    return node


def make_backend(ln: FakeLightningd, **kwargs: object) -> ClnBackend:
    kwargs.setdefault("wait_timeout_s", 1)
    kwargs.setdefault("pay_grace_s", 0.5)
    return ClnBackend(ln.rpc_path, "regtest", **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def backend(lightningd: FakeLightningd) -> AsyncIterator[ClnBackend]:
    b = make_backend(lightningd)
    await b.start()
    yield b
    await b.close()


async def pay_outside(ln: FakeLightningd, bolt11: str) -> str:
    return await asyncio.to_thread(ln.pay_from_outside, bolt11)


async def next_settlement(stream: AsyncIterator[Settlement], timeout_s: float = 5) -> Settlement:
    return await asyncio.wait_for(anext(stream), timeout_s)


# -- invoices ---------------------------------------------------------------------------------


async def test_invoice_has_satsgate_label_explicit_expiry_and_exact_amount(
    backend: ClnBackend, lightningd: FakeLightningd
) -> None:
    before = int(time.time())
    inv = await backend.create_invoice(21_000, "render-card", expiry_s=300)
    other = await backend.create_invoice(21_000, "render-card", expiry_s=300)
    listed = lightningd.node.listinvoices(payment_hash=inv.payment_hash)["invoices"][0]
    assert listed["label"].startswith(LABEL_PREFIX)
    assert (
        listed["label"]
        != lightningd.node.listinvoices(payment_hash=other.payment_hash)["invoices"][0]["label"]
    )
    assert before + 300 <= inv.expires_at <= int(time.time()) + 300
    decoded = decode_invoice(inv.bolt11)
    assert (decoded.payment_hash, decoded.amount_msat, decoded.network) == (
        inv.payment_hash,
        21_000,
        "regtest",
    )
    assert decoded.payee == (await backend.info()).pubkey


async def test_lookup_invoice_open_settled_expired_unknown(
    backend: ClnBackend, lightningd: FakeLightningd
) -> None:
    open_inv = await backend.create_invoice(5_000, "a", expiry_s=600)
    short = await backend.create_invoice(5_000, "b", expiry_s=1)
    assert (await backend.lookup_invoice(open_inv.payment_hash)).state is InvoiceState.OPEN
    preimage = await pay_outside(lightningd, open_inv.bolt11)
    settled = await backend.lookup_invoice(open_inv.payment_hash)
    assert (settled.state, settled.preimage, settled.amount_received_msat) == (
        InvoiceState.SETTLED,
        preimage,
        5_000,
    )
    await asyncio.sleep(1.05)
    assert (await backend.lookup_invoice(short.payment_hash)).state is InvoiceState.EXPIRED
    with pytest.raises(UnknownInvoice, match="unknown invoice"):
        await backend.lookup_invoice("00" * 32)


# -- settlements and the pay_index cursor ------------------------------------------------------


async def test_settlement_carries_preimage_amount_and_pay_index(
    backend: ClnBackend, lightningd: FakeLightningd
) -> None:
    inv = await backend.create_invoice(7_000, "x", expiry_s=600)
    stream = aiter(backend.settlements(0))
    waiting = asyncio.ensure_future(next_settlement(stream))
    await asyncio.sleep(0.1)
    preimage = await pay_outside(lightningd, inv.bolt11)
    s = await waiting
    assert s.payment_hash == inv.payment_hash
    assert hashlib.sha256(bytes.fromhex(s.preimage)).hexdigest() == inv.payment_hash
    assert (s.preimage, s.amount_received_msat) == (preimage, 7_000)
    paid = lightningd.node.listinvoices(payment_hash=inv.payment_hash)["invoices"][0]
    assert s.cursor == paid["pay_index"] and s.settled_at == paid["paid_at"]


async def test_restart_from_cursor_replays_exactly_what_was_paid_while_down(
    lightningd: FakeLightningd,
) -> None:
    first = make_backend(lightningd)
    await first.start()
    invs = [await first.create_invoice(1_000 * (i + 1), f"n{i}", expiry_s=600) for i in range(3)]
    await pay_outside(lightningd, invs[0].bolt11)
    seen = await next_settlement(aiter(first.settlements(0)))
    cursor = seen.cursor  # what the store persists
    await first.close()

    for inv in invs[1:]:  # satsgate is down
        await pay_outside(lightningd, inv.bolt11)

    second = make_backend(lightningd)
    await second.start()
    try:
        stream = aiter(second.settlements(cursor))
        replayed = [await next_settlement(stream), await next_settlement(stream)]
    finally:
        await second.close()
    assert [s.payment_hash for s in replayed] == [i.payment_hash for i in invs[1:]]
    assert [s.cursor for s in replayed] == [cursor + 1, cursor + 2]


async def test_first_start_skips_history_and_other_applications_invoices(
    backend: ClnBackend, lightningd: FakeLightningd
) -> None:
    node = lightningd.node
    old = node.invoice(3_000, "some-shop-1", "before satsgate")["bolt11"]
    await pay_outside(lightningd, old)
    ours_before = await backend.create_invoice(3_000, "earlier", expiry_s=600)
    await pay_outside(lightningd, ours_before.bolt11)

    start = await backend.initial_cursor()
    assert start == 2  # the node's highest pay_index

    stream = aiter(backend.settlements(start))
    waiting = asyncio.ensure_future(next_settlement(stream))
    foreign = node.invoice(4_000, "some-shop-2", "not ours")["bolt11"]
    ours = await backend.create_invoice(4_000, "now", expiry_s=600)
    await pay_outside(lightningd, foreign)  # pay_index 3: skipped, not ours
    await pay_outside(lightningd, ours.bolt11)  # pay_index 4
    s = await waiting
    assert (s.payment_hash, s.cursor) == (ours.payment_hash, 4)


async def test_idle_stream_outlives_waitanyinvoice_timeouts(
    backend: ClnBackend, lightningd: FakeLightningd
) -> None:
    stream = aiter(backend.settlements(0))
    waiting = asyncio.ensure_future(next_settlement(stream))
    await asyncio.sleep(1.3)  # wait_timeout_s=1: lightningd answered 904 at least once
    inv = await backend.create_invoice(1_000, "late", expiry_s=600)
    await pay_outside(lightningd, inv.bolt11)
    assert (await waiting).payment_hash == inv.payment_hash
    assert lightningd.calls.count("waitanyinvoice") >= 2


async def test_close_ends_a_waiting_stream_at_once(lightningd: FakeLightningd) -> None:
    b = make_backend(lightningd, wait_timeout_s=60)
    await b.start()
    waiting = asyncio.ensure_future(next_settlement(aiter(b.settlements(0)), timeout_s=30))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await b.close()
    with pytest.raises(BackendError, match="closed"):
        await waiting
    assert time.monotonic() - started < 1.0


# -- outgoing payments ------------------------------------------------------------------------


async def test_an_amountless_invoice_is_paid_with_the_amount_given(
    backend: ClnBackend, lightningd: FakeLightningd, payee: FakeNode
) -> None:
    """A payment session's return invoice: xpay (and pay) take amount_msat."""
    bolt11 = payee.invoice("any", "session-refund", "refund")["bolt11"]
    refused = await backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=5)
    assert refused.state is PaymentState.FAILED
    paid = await backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=5, amount_msat=4_321)
    assert (paid.state, paid.amount_msat) == (PaymentState.SUCCEEDED, 4_321)
    got = payee.listinvoices(label="session-refund")["invoices"][0]
    assert (got["status"], got["amount_received_msat"]) == ("paid", 4_321)
    assert "amount_msat" not in got  # lightningd leaves it out of an "any" invoice
    # Paid again with another amount: v26.06's xpay answers -3 (injectpaymentonion's 201,
    # "Already succeeded with amount 4321msat (not 1000msat)"); listpays has the payment.
    again = await backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=5, amount_msat=1_000)
    assert (again.state, again.amount_msat) == (PaymentState.SUCCEEDED, 4_321)
    assert len(lightningd.node.listpays(bolt11=bolt11)["pays"]) == 1
    lightningd.node.has_xpay = False  # an older node: pay takes amount_msat as well
    other = payee.invoice("any", "session-refund-2", "refund")["bolt11"]
    paid = await backend.pay_invoice(other, max_fee_msat=5_000, timeout_s=5, amount_msat=999)
    assert (paid.state, paid.amount_msat) == (PaymentState.SUCCEEDED, 999)


async def test_pay_reports_fee_and_preimage_and_repeat_is_success(
    backend: ClnBackend, lightningd: FakeLightningd, payee: FakeNode
) -> None:
    bolt11 = payee.invoice(50_000, "refund-1", "refund")["bolt11"]
    result = await backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=5)
    payee_inv = payee.listinvoices(label="refund-1")["invoices"][0]
    assert result.state is PaymentState.SUCCEEDED
    assert (result.preimage, result.amount_msat, result.fee_msat) == (
        payee_inv["payment_preimage"],
        50_000,
        lightningd.node.route_fee_msat,
    )
    assert payee_inv["status"] == "paid"

    again = await backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=5)
    assert again.state is PaymentState.SUCCEEDED  # xpay said 219 "already paid"
    assert again.preimage == result.preimage
    assert len(lightningd.node.listpays(payment_hash=result.payment_hash)["pays"]) == 1


async def test_fee_cap_below_route_fee_fails_and_sends_nothing(
    backend: ClnBackend, lightningd: FakeLightningd, payee: FakeNode
) -> None:
    bolt11 = payee.invoice(50_000, "r", "refund")["bolt11"]
    result = await backend.pay_invoice(bolt11, max_fee_msat=999, timeout_s=5)
    assert result.state is PaymentState.FAILED
    assert "excessive cost" in (result.failure_reason or "")
    assert lightningd.node.listpays()["pays"] == []
    assert payee.listinvoices(label="r")["invoices"][0]["status"] == "unpaid"


async def test_node_without_xpay_pays_with_pay_and_remembers(
    backend: ClnBackend, lightningd: FakeLightningd, payee: FakeNode
) -> None:
    lightningd.node.has_xpay = False
    for label in ("a", "b"):
        bolt11 = payee.invoice(10_000, label, "refund")["bolt11"]
        result = await backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=5)
        assert result.state is PaymentState.SUCCEEDED
        assert result.fee_msat == lightningd.node.route_fee_msat
    sends = [c for c in lightningd.calls if c in ("xpay", "pay")]
    assert sends == ["xpay", "pay", "pay"]


async def test_stuck_payment_is_pending_until_the_node_resolves_it(
    backend: ClnBackend, lightningd: FakeLightningd, payee: FakeNode
) -> None:
    lightningd.node.hold_outgoing = True
    bolt11 = payee.invoice(20_000, "stuck", "refund")["bolt11"]
    pay = asyncio.ensure_future(backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=1))

    # The event loop keeps running while xpay blocks in lightningd.
    lags = []
    for _ in range(20):
        t = time.monotonic()
        await asyncio.sleep(0.01)
        lags.append(time.monotonic() - t)
    await backend.create_invoice(1_000, "meanwhile", expiry_s=60)
    assert max(lags) < 0.1

    result = await pay
    assert result.state is PaymentState.PENDING
    assert (await backend.lookup_payment(result.payment_hash)).state is PaymentState.PENDING
    # A second attempt while the first is in flight: xpay refuses (-3), still pending.
    assert (await backend.pay_invoice(bolt11, 5_000, 1)).state is PaymentState.PENDING

    assert lightningd.node.release_held(succeed=True) == 1
    for _ in range(50):
        done = await backend.lookup_payment(result.payment_hash)
        if done.state is not PaymentState.PENDING:
            break
        await asyncio.sleep(0.02)
    preimage = payee.listinvoices(label="stuck")["invoices"][0]["payment_preimage"]
    assert (done.state, done.preimage) == (PaymentState.SUCCEEDED, preimage)


async def test_lightningd_stopping_mid_payment_is_pending_not_failed(
    backend: ClnBackend, lightningd: FakeLightningd, payee: FakeNode
) -> None:
    lightningd.node.hold_outgoing = True
    bolt11 = payee.invoice(20_000, "cut", "refund")["bolt11"]
    pay = asyncio.ensure_future(backend.pay_invoice(bolt11, max_fee_msat=5_000, timeout_s=30))
    await asyncio.sleep(0.2)
    await asyncio.to_thread(lightningd.stop)  # xpay answers -5, then the socket is gone
    result = await asyncio.wait_for(pay, 5)
    assert result.state is PaymentState.PENDING


async def test_definite_failures_are_failed(backend: ClnBackend, payee: FakeNode) -> None:
    stranger = FakeNode(alias="not-connected")
    no_route = await backend.pay_invoice(
        stranger.invoice(1_000, "x", "y")["bolt11"], max_fee_msat=5_000, timeout_s=5
    )
    assert no_route.state is PaymentState.FAILED and no_route.failure_reason
    garbage = await backend.pay_invoice("lnbcrt1garbage", max_fee_msat=5_000, timeout_s=5)
    assert garbage.state is PaymentState.FAILED
    unknown = await backend.lookup_payment("11" * 32)
    assert unknown.state is PaymentState.FAILED


# -- node ---------------------------------------------------------------------------------------


async def test_info_and_network_check() -> None:
    with running_lightningd("bitcoin") as ln:
        ok = ClnBackend(ln.rpc_path, "mainnet")  # satsgate's alias for CLN's "bitcoin"
        await ok.start()
        info = await ok.info()
        await ok.close()
        assert (info.network, info.pubkey) == ("bitcoin", ln.node.node_id)
        wrong = ClnBackend(ln.rpc_path, "regtest")
        with pytest.raises(BackendError, match=r"network mismatch.*bitcoin.*regtest"):
            await wrong.start()
        await wrong.close()


async def test_missing_socket_is_a_backend_error(tmp_path: object) -> None:
    b = ClnBackend("/nonexistent/lightning-rpc", "regtest")
    with pytest.raises(BackendError, match="lightning-rpc"):
        await b.start()
    await b.close()


def test_msat_fields_old_and_new_forms() -> None:
    assert parse_msat(1500) == parse_msat("1500msat") == 1500
    with pytest.raises(ValueError):
        parse_msat("15sat?")
