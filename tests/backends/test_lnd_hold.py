"""Charge only on success: hold invoices for the paymentId flow (MCP) over LND.

Through a real satsgate server on loopback with ``--backend lnd`` and
``hold_invoices = true`` against the fake lnd: the payer's HTLC is held (ACCEPTED),
counts as paid, is settled with the kept preimage only after the call succeeded and
canceled after a failure (the payer is never charged, no refund link); a restart finds
undecided holds and decides them; held payments near their CLTV expiry, or unused, are
canceled; L402 keeps ordinary invoices.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.backends.lnd.backend import LndBackend
from satsgate.config.settings import Settings
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.payments.refund_request import operator_refund
from satsgate.server.app import REFUNDS
from satsgate.store import Payment, PaymentStatus
from tests.conftest import ThreadedServer, free_port, make_settings
from tests.engines.test_ai_openai import CHAT, MODELS
from tests.engines_down import PROVIDER_KINDS as DOWN_KINDS
from tests.engines_down import down_engines
from tests.fakes import fake_ai_upstream
from tests.fakes.fake_ai_upstream import OPENAI_KEY, FakeAIUpstream
from tests.fakes.fake_lnd import FakeLnd, running_lnd
from tests.fakes.fake_lnd.node import FakeInvoice
from tests.ledger_check import assert_ledger_balances
from tests.mcp_client import tool_result as tool
from tests.pg_cluster import PgCluster

CARD = {"template": "headline", "title": "hi"}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def lnd(tmp_path: Path) -> Iterator[FakeLnd]:
    with running_lnd(tmp_path) as fake:
        yield fake


def start(lnd: FakeLnd, settings: Settings) -> ThreadedServer:
    backend = LndBackend(
        lnd.target, lnd.tls_cert, lnd.macaroon_path, "regtest", max_backoff_s=0.5, pay_grace_s=0.5
    )
    srv = ThreadedServer(settings, {**PROVIDER_KINDS, **DOWN_KINDS}, backend=backend)
    assert srv.gate.holds is not None
    srv.gate.holds.poll_s = 0.05  # the watcher's period (1 s by default)
    return srv


def hold_settings(data: Path, **overrides: Any) -> Settings:
    return make_settings(
        data, backend="lnd", hold_invoices=True, **down_engines(["text"]), **overrides
    )


@pytest.fixture
async def srv(lnd: FakeLnd, tmp_path: Path) -> AsyncIterator[ThreadedServer]:
    server = start(lnd, hold_settings(tmp_path / "data"))
    yield server
    server.stop()


async def create_payment(
    client: httpx.AsyncClient, tool_name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    result = await tool(client, "create_payment", {"toolName": tool_name, "arguments": arguments})
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


def payment_of(srv: ThreadedServer, payment_id: str) -> Payment:
    payment = srv.call(partial(srv.store.payments.get, payment_id))
    assert payment is not None
    return payment  # type: ignore[no-any-return]


def invoice_at_node(lnd: FakeLnd, payment: Payment) -> FakeInvoice:
    return lnd.node.lookup(bytes.fromhex(payment.payment_hash))


async def node_state_soon(lnd: FakeLnd, payment: Payment, wanted: str) -> str:
    """The invoice's state at the node once it is ``wanted``: satsgate records a
    decision first and tells the node right after."""
    state = invoice_at_node(lnd, payment).state
    for _ in range(200):
        if state == wanted:
            break
        await asyncio.sleep(0.025)
        state = invoice_at_node(lnd, payment).state
    return state


async def status_soon(srv: ThreadedServer, payment_id: str, wanted: PaymentStatus) -> Payment:
    payment = payment_of(srv, payment_id)
    for _ in range(200):
        if payment.status is wanted:
            break
        await asyncio.sleep(0.025)
        payment = payment_of(srv, payment_id)
    return payment


async def test_success_settles_the_held_payment_after_the_call(
    lnd: FakeLnd, srv: ThreadedServer
) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        created = await create_payment(client, "render_card", CARD)
        payment = payment_of(srv, created["paymentId"])
        assert payment.mode == "hold"  # the ledger records the mode
        # The payer's HTLC arrives and is held: paid for satsgate, not charged yet.
        assert lnd.node.pay_from_outside(created["lightningInvoice"]) == ""
        assert invoice_at_node(lnd, payment).state == "ACCEPTED"
        await status_soon(srv, payment.payment_id, PaymentStatus.PAID)  # satsgate saw it
        status = await tool(client, "check_payment_status", {"paymentId": payment.payment_id})
        assert status["structuredContent"]["paid"] is True
        assert invoice_at_node(lnd, payment).state == "ACCEPTED"  # still held
        # Accepted, not used yet: open (canceled if never used), not earned.
        held = assert_ledger_balances(srv)["totals"]
        assert (
            held["received_msat"],
            held["held_msat"],
            held["earned_msat"],
            held["open_msat"],
        ) == (payment.amount_msat, 0, 0, payment.amount_msat)

        result = await tool(client, "render_card", {"paymentId": payment.payment_id, **CARD})
        assert not result.get("isError"), result
        image = next(c for c in result["content"] if c["type"] == "image")
        assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
    # Settled with the preimage satsgate kept, only now.
    held = invoice_at_node(lnd, payment)
    assert held.state == "SETTLED"
    assert hashlib.sha256(held.r_preimage).hexdigest() == payment.payment_hash
    # serving -> spent joins the store's next group commit, which may follow the answer.
    spent = await status_soon(srv, payment.payment_id, PaymentStatus.SPENT)
    assert spent.status is PaymentStatus.SPENT
    assert srv.call(partial(srv.store.holds.decision, payment.payment_hash)) == "settled"
    totals = assert_ledger_balances(srv)["totals"]
    assert totals["received_msat"] == totals["earned_msat"] == payment.amount_msat
    assert totals["held_msat"] == 0


async def test_failure_cancels_and_the_payer_is_never_charged(
    lnd: FakeLnd, srv: ThreadedServer
) -> None:
    args = {"prompt": "hi", "modelId": 31}  # served by the down provider: fails after payment
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        created = await create_payment(client, "generate_text", args)
        payment = payment_of(srv, created["paymentId"])
        lnd.node.pay_from_outside(created["lightningInvoice"])
        await status_soon(srv, payment.payment_id, PaymentStatus.PAID)  # the HTLC is held
        result = await tool(client, "generate_text", {"paymentId": payment.payment_id, **args})
        assert result["isError"] is True
        envelope = result["structuredContent"]
        assert envelope["error_code"] == "SERVICE_ERROR"
        refund = envelope["refund"]
        assert refund["hold_invoice_canceled"] is True and "lnurl_withdraw" not in refund
        assert refund["amount_sats"] == payment.amount_msat // 1000
        # The same payment again: canceled, not served, still nothing charged.
        again = await tool(
            client,
            "generate_text",
            {"paymentId": payment.payment_id, "prompt": "other", "modelId": 31},
        )
        assert again["isError"] is True
    held = invoice_at_node(lnd, payment)
    assert held.state == "CANCELED" and held.settle_index == 0 and held.r_preimage == b""
    assert payment_of(srv, payment.payment_id).status is PaymentStatus.CANCELED
    assert srv.call(partial(srv.store.refunds.for_payment, payment.payment_id)) == []
    totals = assert_ledger_balances(srv)["totals"]
    assert totals["received_msat"] == totals["earned_msat"] == 0
    # A canceled hold is outside the equation, shown apart.
    assert (totals["canceled_holds"], totals["canceled_holds_msat"]) == (1, payment.amount_msat)


async def test_a_restart_decides_undecided_holds(lnd: FakeLnd, tmp_path: Path) -> None:
    settings = hold_settings(tmp_path / "data")
    srv = start(lnd, settings)
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        unused = await create_payment(client, "render_card", CARD)
        lost = await create_payment(client, "render_card", CARD)
    for created in (unused, lost):
        lnd.node.pay_from_outside(created["lightningInvoice"])
        await status_soon(srv, created["paymentId"], PaymentStatus.PAID)
    # A call was running on ``lost`` when the process died: spent, never decided.
    srv.gate.holds.running(payment_of(srv, lost["paymentId"]))  # as the spender does, first
    assert srv.call(partial(srv.store.payments.spend, lost["paymentId"], 0)) is True
    srv.stop()

    srv = start(lnd, settings)
    try:
        gone = await status_soon(srv, lost["paymentId"], PaymentStatus.CANCELED)
        assert gone.status is PaymentStatus.CANCELED
        assert await node_state_soon(lnd, gone, "CANCELED") == "CANCELED"  # given back
        # The held, unused payment is kept held and still serves its call.
        kept = payment_of(srv, unused["paymentId"])
        assert kept.status is PaymentStatus.PAID
        assert invoice_at_node(lnd, kept).state == "ACCEPTED"
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            result = await tool(client, "render_card", {"paymentId": kept.payment_id, **CARD})
        assert not result.get("isError"), result
        assert invoice_at_node(lnd, kept).state == "SETTLED"
    finally:
        srv.stop()


async def test_held_payments_are_canceled_well_before_their_cltv_expiry(
    lnd: FakeLnd, srv: ThreadedServer
) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        created = await create_payment(client, "render_card", CARD)
    lnd.node.pay_from_outside(created["lightningInvoice"])
    payment = await status_soon(srv, created["paymentId"], PaymentStatus.PAID)
    held = invoice_at_node(lnd, payment)
    margin = srv.gate.holds.margin_blocks
    # Not yet near: still held.
    lnd.node.mine(held.cltv_expiry - margin - 5)
    await asyncio.sleep(0.3)
    assert invoice_at_node(lnd, payment).state == "ACCEPTED"
    # Within the margin (lnd itself would cancel only 12 blocks before): satsgate cancels.
    lnd.node.mine(10)
    canceled = await status_soon(srv, payment.payment_id, PaymentStatus.CANCELED)
    assert canceled.status is PaymentStatus.CANCELED
    assert await node_state_soon(lnd, payment, "CANCELED") == "CANCELED"
    assert held.htlc_expiry_height - lnd.node.block_height > 12


async def test_an_unused_held_payment_is_given_back(lnd: FakeLnd, tmp_path: Path) -> None:
    srv = start(lnd, hold_settings(tmp_path / "data", hold_max_unused_s=1))
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            idle = await create_payment(client, "render_card", CARD)
        lnd.node.pay_from_outside(idle["lightningInvoice"])
        paid = await status_soon(srv, idle["paymentId"], PaymentStatus.PAID)
        assert paid.status in (PaymentStatus.PAID, PaymentStatus.CANCELED)
        done = await status_soon(srv, idle["paymentId"], PaymentStatus.CANCELED)
        assert done.status is PaymentStatus.CANCELED
        assert await node_state_soon(lnd, done, "CANCELED") == "CANCELED"
    finally:
        srv.stop()


async def test_a_refund_request_cancels_the_held_payment(lnd: FakeLnd, srv: ThreadedServer) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        asked = await create_payment(client, "render_card", CARD)
        lnd.node.pay_from_outside(asked["lightningInvoice"])
        await status_soon(srv, asked["paymentId"], PaymentStatus.PAID)
        refund = await tool(
            client,
            "request_refund",
            {"paymentId": asked["paymentId"], "invoice": asked["lightningInvoice"]},
        )
        assert refund["structuredContent"]["payout"] == "canceled", refund
    payment = payment_of(srv, asked["paymentId"])
    assert payment.status is PaymentStatus.CANCELED
    assert invoice_at_node(lnd, payment).state == "CANCELED"
    assert srv.call(partial(srv.store.refunds.for_payment, payment.payment_id)) == []


async def test_the_operators_refund_cancels_a_held_payment_instead_of_issuing_a_link(
    lnd: FakeLnd, srv: ThreadedServer
) -> None:
    """A refund link for a payment the node still holds would give it back twice: once
    by the link, once when the hold is canceled (unused, or near its expiry)."""
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        asked = await create_payment(client, "render_card", CARD)
        lnd.node.pay_from_outside(asked["lightningInvoice"])
    paid = await status_soon(srv, asked["paymentId"], PaymentStatus.PAID)
    done = srv.call(lambda: operator_refund(srv.gate, srv.app[REFUNDS], srv.store.sessions, paid))
    assert done["payout"] == "canceled" and done["refund"]["hold_invoice_canceled"]
    payment = payment_of(srv, asked["paymentId"])
    assert payment.status is PaymentStatus.CANCELED
    assert await node_state_soon(lnd, payment, "CANCELED") == "CANCELED"
    assert srv.call(partial(srv.store.refunds.for_payment, payment.payment_id)) == []
    assert_ledger_balances(srv)


async def test_an_unused_cancel_read_before_a_spend_leaves_the_call_to_its_outcome(
    lnd: FakeLnd, srv: ThreadedServer
) -> None:
    """The watcher reads a held payment as paid and unused too long; a call spends it
    before the watcher cancels. The cancel is refused: before, it canceled the payment
    under the running call, whose success then found it given back (served for free)."""
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        asked = await create_payment(client, "render_card", CARD)
        lnd.node.pay_from_outside(asked["lightningInvoice"])
    read_by_watcher = await status_soon(srv, asked["paymentId"], PaymentStatus.PAID)
    holds = srv.gate.holds
    assert holds is not None
    holds.running(read_by_watcher)  # the call starts here, as the spender does
    assert srv.call(lambda: srv.store.payments.spend(read_by_watcher.payment_id, int(time.time())))
    holds.max_unused_s = 0
    srv.call(lambda: holds._check(read_by_watcher, None))
    payment = payment_of(srv, asked["paymentId"])
    assert payment.status is PaymentStatus.SERVING
    assert invoice_at_node(lnd, payment).state == "ACCEPTED"
    assert srv.call(lambda: holds.settle(payment))  # the call's success keeps the payment
    assert await node_state_soon(lnd, payment, "SETTLED") == "SETTLED"


async def test_l402_keeps_ordinary_invoices(lnd: FakeLnd, srv: ThreadedServer) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        resp = await client.post("/api/l402/render-card", json=CARD)
    assert resp.status_code == 402
    payment = payment_of(srv, resp.json()["paymentId"])
    assert payment.mode == "invoice"
    assert not invoice_at_node(lnd, payment).hold


def test_hold_invoices_need_lnd(tmp_path: Path) -> None:
    from satsgate.config.settings import load_settings

    with pytest.raises(ValueError, match="LND"):
        load_settings(overrides={"backend": "cln", "hold_invoices": True})
    assert (
        load_settings(
            overrides={"backend": "lnd"}, environ={"SATSGATE_HOLD_INVOICES": "true"}
        ).hold_invoices
        is True
    )


async def test_a_settle_lnd_missed_is_finished_when_it_is_back(
    lnd: FakeLnd, srv: ThreadedServer
) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        created = await create_payment(client, "render_card", CARD)
        lnd.node.pay_from_outside(created["lightningInvoice"])
        payment = await status_soon(srv, created["paymentId"], PaymentStatus.PAID)
        await asyncio.to_thread(lnd.stop)  # lnd goes away while the call runs
        result = await tool(client, "render_card", {"paymentId": payment.payment_id, **CARD})
    assert not result.get("isError"), result  # the call was delivered
    # The decision is recorded; lnd has not heard it yet.
    assert srv.call(partial(srv.store.holds.decision, payment.payment_hash)) == "settling"
    assert invoice_at_node(lnd, payment).state == "ACCEPTED"
    await asyncio.to_thread(lnd.start)
    assert await node_state_soon(lnd, payment, "SETTLED") == "SETTLED"
    for _ in range(100):
        if srv.call(partial(srv.store.holds.decision, payment.payment_hash)) == "settled":
            break
        await asyncio.sleep(0.05)
    assert srv.call(partial(srv.store.holds.decision, payment.payment_hash)) == "settled"


async def test_a_hold_invoice_never_paid_just_expires(lnd: FakeLnd, tmp_path: Path) -> None:
    srv = start(lnd, hold_settings(tmp_path / "data", invoice_expiry_s=1))
    try:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            created = await create_payment(client, "render_card", CARD)
        payment = payment_of(srv, created["paymentId"])
        for _ in range(100):  # lnd cancels it at expiry; satsgate stops watching it
            if srv.call(partial(srv.store.holds.decision, payment.payment_hash)) == "expired":
                break
            await asyncio.sleep(0.05)
        assert srv.call(partial(srv.store.holds.decision, payment.payment_hash)) == "expired"
        assert payment_of(srv, payment.payment_id).status is PaymentStatus.UNPAID  # pruned later
        assert srv.call(srv.store.holds.open) == []
    finally:
        srv.stop()


async def test_another_instances_watcher_leaves_a_running_call_to_the_instance_serving_it(
    lnd: FakeLnd, tmp_path: Path, pg_cluster: PgCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two instances on one store: a call paid by a held payment runs at A for longer
    than B's watcher takes to look. B leaves it to A (which settles it when the call
    succeeds); before, B took it for a call a restart had lost and canceled the hold, so
    the payer got the answer and the payment back."""
    monkeypatch.setattr(fake_ai_upstream, "SLOW_S", 1.0)  # the upstream's answer time
    upstream = FakeAIUpstream()
    try:
        store_url = pg_cluster.new_database()
        provider = {
            "kind": "openai",
            "base_url": f"{upstream.url}/v1",
            "api_key": OPENAI_KEY,
            "timeout_s": 10.0,
            "models": MODELS,
        }
        settings = make_settings(  # one data dir (secret, files) shared, as instances do
            tmp_path / "data",
            backend="lnd",
            hold_invoices=True,
            store_url=store_url,
            providers={"cloud": provider},
            engines={"text": "cloud"},
        )
        a = start(lnd, settings)
        b = start(lnd, replace(settings, port=free_port()))
        try:
            args = {"prompt": "Say hello", "tier": "standard"}
            async with httpx.AsyncClient(base_url=a.url, timeout=30) as client:
                created = await create_payment(client, "generate_text", args)
                payment = payment_of(a, created["paymentId"])
                lnd.node.pay_from_outside(created["lightningInvoice"])
                await status_soon(a, payment.payment_id, PaymentStatus.PAID)
                upstream.fail_next(CHAT, "slow")
                result = await tool(
                    client, "generate_text", {"paymentId": payment.payment_id, **args}
                )
            assert not result.get("isError"), result
            assert len(upstream.requests(CHAT)) == 1
            assert await node_state_soon(lnd, payment, "SETTLED") == "SETTLED"
            assert a.call(partial(a.store.holds.decision, payment.payment_hash)) == "settled"
            totals = assert_ledger_balances(b)["totals"]
            assert totals["earned_msat"] == payment.amount_msat
        finally:
            b.stop()
            a.stop()
    finally:
        upstream.stop()
