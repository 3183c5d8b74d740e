"""Deposit settlement (satsgate/payouts/deposits.py) on a real server: the used part billed, the
rest refunded exactly once, to a Lightning address (a loopback LNURL-pay wallet whose
invoices the dev node pays) or as an LNURL-withdraw link; a failed payout falls back to
the link; settling twice, or twice at once, pays once; a restart takes up a payout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.payouts.deposits import Settlement
from satsgate.server.app import DEPOSITS
from tests.conftest import (
    STORES,
    ThreadedServer,
    dev_pay,
    http_client,
    make_settings,
    store_url_for,
)
from tests.fakes.fake_lnurlp import FakeLightningAddress
from tests.ledger_check import assert_ledger_balances
from tests.payouts.test_refunds import NoParams, _fine, claim, external_invoice, make_spec, withdraw


@pytest.fixture(scope="module")
def wallet() -> Iterator[FakeLightningAddress]:
    w = FakeLightningAddress()
    yield w
    w.stop()


@pytest.fixture(scope="module", params=STORES)
def node(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    wallet: FakeLightningAddress,
) -> Iterator[ThreadedServer]:
    """The module's server, once on each engine of the store."""
    settings = make_settings(
        tmp_path_factory.mktemp("deposits"),
        lightning_address_hosts=wallet.hosts,
        store_url=store_url_for(request),
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def node_client(node: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(node):
        yield c


async def spent_deposit(node: ThreadedServer, client: httpx.AsyncClient, sats: int) -> Any:
    """A paid deposit of ``sats``, spent on its call (serving), as a deposit service's is."""
    spec = make_spec(_fine)
    payment = node.call(
        lambda: node.gate.create_payment(spec, amount_sats=sats, digest="d", via="http")
    ).payment
    await dev_pay(client, payment.bolt11)
    for _ in range(200):
        fresh = node.call(lambda: node.store.payments.get(payment.payment_id))
        if str(fresh.status) == "paid":
            break
        await asyncio.sleep(0.01)
    assert node.call(lambda: node.store.payments.spend(payment.payment_id, 1))
    return payment


def settle(node: ThreadedServer, payment_id: str, used_msat: int, **kw: Any) -> Settlement:
    settled = node.call(lambda: node.app[DEPOSITS].settle(payment_id, used_msat, **kw))
    assert isinstance(settled, Settlement)
    return settled


async def outgoing_to(client: httpx.AsyncClient, bolt11s: set[str]) -> list[dict[str, Any]]:
    payments = (await client.get("/api/dev/outgoing")).json()["payments"]
    return [p for p in payments if p["bolt11"] in bolt11s]


async def test_unused_part_goes_to_the_lightning_address(
    node: ThreadedServer, node_client: httpx.AsyncClient, wallet: FakeLightningAddress
) -> None:
    payment = await spent_deposit(node, node_client, 300)
    before = len(wallet.issued)
    settled = settle(node, payment.payment_id, 120_000, refund_address=wallet.address("alice"))
    assert (settled.deposit_msat, settled.used_msat, settled.refund_msat) == (
        300_000,
        120_000,
        180_000,
    )
    assert settled.refund_status == "paid" and settled.payout_state == "paid"
    issued = wallet.issued[before:]
    assert [(i.name, i.amount_msat) for i in issued] == [("alice", 180_000)]
    paid = await outgoing_to(node_client, {issued[0].bolt11})
    assert len(paid) == 1 and paid[0]["amount_msat"] == 180_000
    assert settled.body() == {
        "depositSats": 300,
        "usedSats": 120,
        "refundableSats": 180,
        "refund_status": "paid",
        "refund_address": "alice@wallet.test",
    }
    # Settling again changes nothing and pays nothing.
    again = settle(node, payment.payment_id, 0, refund_address=wallet.address("alice"))
    assert again.refund_msat == 180_000 and again.used_msat == 120_000
    assert len(wallet.issued) == before + 1
    report = assert_ledger_balances(node)
    assert report["totals"]["refunds_paid_msat"] >= 180_000
    assert any(d["payout_state"] == "paid" for d in report["deposits"])


async def test_concurrent_settlements_pay_once(
    node: ThreadedServer, node_client: httpx.AsyncClient, wallet: FakeLightningAddress
) -> None:
    payment = await spent_deposit(node, node_client, 200)
    before = len(wallet.issued)
    deposits = node.app[DEPOSITS]

    async def both() -> list[Settlement | None]:
        return list(
            await asyncio.gather(
                *(
                    deposits.settle(payment.payment_id, used, refund_address=wallet.address("bob"))
                    for used in (50_000, 60_000, 70_000, 80_000)
                )
            )
        )

    results = node.call(both)
    assert all(r is not None for r in results)
    refunded = {r.refund_msat for r in results if r is not None}
    assert len(refunded) == 1 and refunded.pop() in (150_000, 140_000, 130_000, 120_000)
    node.call(deposits.wait_payouts)
    issued = wallet.issued[before:]
    assert len(issued) == 1
    assert len(await outgoing_to(node_client, {issued[0].bolt11})) == 1
    refunds = node.call(lambda: node.store.refunds.for_payment(payment.payment_id))
    assert len(refunds) == 1 and str(refunds[0].status) == "paid"
    final = settle(node, payment.payment_id, 0)
    assert final.refund_status == "paid"
    assert_ledger_balances(node)


async def test_without_an_address_the_refund_is_a_withdraw_link(
    node: ThreadedServer, node_client: httpx.AsyncClient
) -> None:
    payment = await spent_deposit(node, node_client, 100)
    settled = settle(node, payment.payment_id, 61_000)
    assert settled.refund_msat == 39_000 and settled.payout_state == "withdraw"
    assert settled.refund_status == "claimable" and settled.refund is not None
    assert settled.body()["usedSats"] == 61 and "refund" not in settled.body()
    assert settled.body(with_link=True)["refund"]["amount_sats"] == 39
    info = await withdraw(node_client, settled.refund)
    assert info["minWithdrawable"] == info["maxWithdrawable"] == 39_000
    assert await claim(node_client, info, external_invoice(39_000)) == {"status": "OK"}
    for _ in range(100):
        if settle(node, payment.payment_id, 0).refund_status == "paid":
            break
        await asyncio.sleep(0.02)
    assert settle(node, payment.payment_id, 0).refund_status == "paid"


@pytest.mark.parametrize("mode", ["error", "wrong_hash", "wrong_amount", "down"])
async def test_a_failed_payout_falls_back_to_the_withdraw_link(
    node: ThreadedServer,
    node_client: httpx.AsyncClient,
    wallet: FakeLightningAddress,
    mode: str,
) -> None:
    payment = await spent_deposit(node, node_client, 100)
    before = len(wallet.issued)
    wallet.mode = mode
    try:
        settled = settle(node, payment.payment_id, 40_000, refund_address=wallet.address("carol"))
    finally:
        wallet.mode = "ok"
    assert settled.payout_state == "fallback" and settled.refund_status == "claimable"
    assert settled.payout_error and settled.refund is not None
    assert settled.refund["amount_sats"] == 60
    issued = {i.bolt11 for i in wallet.issued[before:]}
    assert not await outgoing_to(node_client, issued)  # nothing was paid
    assert "refund_note" in settled.body()


@pytest.mark.parametrize(
    "domain",
    ["wallet.invalid", "[64:ff9b::7f00:1]", "[::7f00:1]", "[2002:7f00:1::1]", "[64:ff9b:1::1]"],
)
async def test_an_address_outside_the_public_internet_is_never_asked(
    node: ThreadedServer, node_client: httpx.AsyncClient, domain: str
) -> None:
    """A domain the node is not told to map must be public https; one that does not
    resolve publicly (.invalid; IPv6 spellings of 127.0.0.1: NAT64, IPv4-compatible,
    6to4; local-use NAT64) falls back to the link, and nothing is paid."""
    payment = await spent_deposit(node, node_client, 100)
    settled = settle(node, payment.payment_id, 0, refund_address=f"nobody@{domain}")
    assert settled.payout_state == "fallback" and settled.refund_status == "claimable"
    assert settled.payout_error is not None and "not public" in settled.payout_error


async def test_a_payout_the_node_refuses_falls_back(
    node: ThreadedServer, node_client: httpx.AsyncClient, wallet: FakeLightningAddress
) -> None:
    payment = await spent_deposit(node, node_client, 100)
    await node_client.post("/api/dev/outgoing-mode", json={"mode": "fail"})
    try:
        settled = settle(node, payment.payment_id, 0, refund_address=wallet.address("dave"))
    finally:
        await node_client.post("/api/dev/outgoing-mode", json={"mode": "succeed"})
    assert settled.refund_msat == 100_000
    assert settled.payout_state == "fallback" and settled.refund_status == "claimable"
    info = await withdraw(node_client, settled.refund or {})
    assert info["maxWithdrawable"] == 100_000


async def test_used_is_capped_and_unknown_payments_are_not_settled(
    node: ThreadedServer, node_client: httpx.AsyncClient
) -> None:
    payment = await spent_deposit(node, node_client, 50)
    settled = settle(node, payment.payment_id, 10**9)
    assert (settled.used_msat, settled.refund_msat, settled.refund_status) == (50_000, 0, "none")
    assert node.call(lambda: node.app[DEPOSITS].settle("pay_unknown", 0)) is None


@pytest.mark.parametrize("left", ["pending", "paying"])
def test_a_restart_takes_up_an_interrupted_payout(
    tmp_path: Path, wallet: FakeLightningAddress, left: str
) -> None:
    """A settlement written but not paid out (the process died before the payout, or
    after its payout was claimed for this process and before the refund's claim) is paid
    to the Lightning address when the node starts again."""
    settings = make_settings(tmp_path / "data", lightning_address_hosts=wallet.hosts)
    first = ThreadedServer(settings)
    try:

        async def prepare() -> str:
            async with httpx.AsyncClient(base_url=first.url, timeout=30) as c:
                payment = await spent_deposit(first, c, 90)
            return str(payment.payment_id)

        payment_id = asyncio.run(prepare())
        deposits = first.app[DEPOSITS]

        async def settle_without_payout() -> Any:
            # The settlement's transaction commits; the payout never starts (as if the
            # process died right then).
            settled = await deposits.settle(
                payment_id, 30_000, refund_address=wallet.address("erin"), wait=False
            )
            for task in list(deposits._payouts):
                task.cancel()
            return settled

        first.call(settle_without_payout)
        first.call(lambda: first.store.deposits.move(payment_id, ("paying",), "pending", None, 0))
        if left == "paying":  # claimed for the first process, which died then
            moved = first.call(
                lambda: first.store.deposits.move(payment_id, ("pending",), "paying", None, 0)
            )
            assert moved
    finally:
        first.stop()
    before = len(wallet.issued)
    second = ThreadedServer(settings)
    try:
        second.call(second.app[DEPOSITS].wait_payouts)
        settled = second.call(lambda: second.app[DEPOSITS].get(payment_id))
        assert settled is not None and settled.refund_status == "paid"
        assert [(i.name, i.amount_msat) for i in wallet.issued[before:]] == [("erin", 60_000)]
        assert_ledger_balances(second)
    finally:
        second.stop()


_ = NoParams  # the spec's params, imported for make_spec's callers
