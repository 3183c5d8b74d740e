"""The payout fee budget cannot be farmed: the payer names the payout invoice and may
route it through a last hop of its own (a private route hint whose fee it collects).
Every payout the node makes (a refund link claimed, a session's balance on close) is
capped at ``PayoutFees.cap_msat`` of its amount, absolute ceiling included, and the node
refuses a route that costs more rather than paying it at the cap; what a payout did
cost is in the ledger as the operator's cost. And all payouts of a day together spend at
most the day's budget (``payout_fee_budget_msat``): a payer cycling its own money through
sessions or refund links, from as many addresses and invoices as it likes, collects at
most that a day; once it is spent, a payout that needs a fee fails and is retried, one
that needs none is paid."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import bolt11
import coincurve
import httpx
import pytest

from satsgate.config.settings import load_settings
from satsgate.operator import ledger_text
from satsgate.server.app import REFUNDS
from tests.conftest import ThreadedServer, http_client, make_settings
from tests.ledger_check import assert_ledger_balances
from tests.payments.test_gateway import CARD
from tests.payments.test_sessions import Client as SessionClient
from tests.payouts.test_refunds import claim, refund_link_of_failed_call, wait_refund_status

PAYER_WALLET = coincurve.PrivateKey()
PAYER_HOP = coincurve.PrivateKey()  # the payer's own routing node: the hint's last hop


def hinted_invoice(amount_msat: int | None, base_fee_msat: int, ppm: int = 0) -> str:
    """The payer's invoice, reached only through its own node, whose fee it names."""
    tags = bolt11.Tags()
    tags.add(bolt11.TagChar.payment_hash, hashlib.sha256(os.urandom(32)).hexdigest())
    tags.add(bolt11.TagChar.payment_secret, os.urandom(32).hex())
    tags.add(bolt11.TagChar.description, "refund")
    tags.add(bolt11.TagChar.expire_time, 7200)
    hop = bolt11.Route(
        public_key=PAYER_HOP.public_key.format().hex(),
        short_channel_id="103x1x0",
        base_fee=base_fee_msat,
        ppm_fee=ppm,
        cltv_expiry_delta=40,
    )
    tags.add(bolt11.TagChar.route_hint, bolt11.RouteHint([hop]))
    invoice = bolt11.Bolt11(
        currency="bcrt",
        date=int(time.time()),
        tags=tags,
        amount_msat=bolt11.MilliSatoshi(amount_msat) if amount_msat else None,
    )
    return bolt11.encode(invoice, PAYER_WALLET.secret.hex())


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(make_settings(tmp_path / "data"))
    yield srv
    srv.stop()


async def outgoing(client: httpx.AsyncClient, invoice: str) -> list[dict[str, Any]]:
    payments = (await client.get("/api/dev/outgoing")).json()["payments"]
    return [p for p in payments if p["bolt11"] == invoice]


async def test_a_refund_routed_through_the_payers_costly_hop_is_not_paid(
    node: ThreadedServer,
) -> None:
    async for client in http_client(node):
        info = await refund_link_of_failed_call(node, client)  # a 10-sat refund
        amount = 10_000
        cap = node.app[REFUNDS].fees.cap_msat(amount)
        # The payer asks for the whole budget and then some through its own hop.
        greedy = hinted_invoice(amount, base_fee_msat=cap + 1)
        assert (await claim(client, info, greedy))["status"] == "OK"
        await wait_refund_status(node, info["k1"], "open")  # not paid: the link is open again
        [attempt] = await outgoing(client, greedy)
        assert attempt["state"] == "failed" and attempt["fee_msat"] == 0
        error = node.call(partial(node.app[REFUNDS].last_payout_error, info["k1"]))
        assert error is not None and "fee cap" in error
        assert node.call(node.store.ledger.totals)["payout_fees_msat"] == 0

        # A route within the cap is paid, and what it cost is the operator's, in the ledger.
        modest = hinted_invoice(amount, base_fee_msat=1_000)
        assert (await claim(client, info, modest))["status"] == "OK"
        await wait_refund_status(node, info["k1"], "paid")
        [paid] = await outgoing(client, modest)
        fee = paid["fee_msat"]
        assert paid["state"] == "succeeded" and 1_000 < fee <= cap  # the payer's hop was paid
        report = assert_ledger_balances(node)
        totals = report["totals"]
        assert totals["refund_fees_msat"] == totals["payout_fees_msat"] == fee
        text = ledger_text(report)
        assert f"the operator's cost, outside the equation): {fee} msat" in text
        assert f"earned less those fees: {totals['earned_msat'] - fee} msat" in text


async def test_a_session_payout_through_a_costly_hop_is_not_paid(
    node: ThreadedServer,
) -> None:
    """The return invoice of a session is the payer's: a balance paid to it may spend the
    cap and no more, however large the balance."""
    async for http in http_client(node):
        session = SessionClient(http)
        # More than any payout's cap (refund_fee_max_msat, 50 sat by default).
        session.return_invoice = hinted_invoice(None, base_fee_msat=50_001)
        opened = await session.open("render-card", CARD)
        assert opened.status_code == 200, opened.text
        closed = await session.close()
        assert closed.status_code == 200, closed.text
        assert closed.json()["refundStatus"] == "failed"
        row = node.call(partial(node.store.sessions.get, session.session_id))
        assert row.payout_status == "failed" and row.payout_fee_msat is None
        assert "fee cap" in (row.payout_error or "")
        [attempt] = await outgoing(http, session.return_invoice)
        assert attempt["state"] == "failed" and attempt["fee_msat"] == 0
        assert node.call(node.store.ledger.totals)["payout_fees_msat"] == 0


def committed_today(node: ThreadedServer) -> int:
    """What today's payouts have been granted, less what came back (msat)."""
    day = int(time.time()) // 86_400
    return int(node.call(partial(node.store.payout_fees.committed, day)))


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[ThreadedServer]:
    """A node whose payouts may spend 10 sat a day in routing fees between them."""
    srv = ThreadedServer(make_settings(tmp_path / "data", payout_fee_budget_msat=10_000))
    yield srv
    srv.stop()


async def test_cycling_sessions_through_the_payers_hop_collects_at_most_the_days_budget(
    budgeted: ThreadedServer,
) -> None:
    """The farm: open a session, close it to a return invoice behind the payer's own hop
    charging 4 sat (within any one payout's cap), again and again. The first two payouts
    are paid (8 sat to the payer's hop, and the dev node's own 1 ppt); the third would
    need more than the day has left and is not paid (its grant comes back: it is retried
    later); a payout whose route costs less than what is left still is."""
    hop_fee = 4_000
    async for http in http_client(budgeted):
        fees = budgeted.app[REFUNDS].fees
        outcomes, paid_fees = [], 0
        for _ in range(3):
            session = SessionClient(http)
            session.return_invoice = hinted_invoice(None, base_fee_msat=hop_fee)
            opened = await session.open("render-card", CARD)
            assert opened.status_code == 200, opened.text
            balance = budgeted.call(partial(budgeted.store.sessions.get, session.session_id))
            assert fees.cap_msat(balance.balance_msat) > hop_fee  # each alone is within its cap
            closed = await session.close()
            assert closed.status_code == 200, closed.text
            outcomes.append(closed.json()["refundStatus"])
            [attempt] = await outgoing(http, session.return_invoice)
            if outcomes[-1] == "failed":
                assert attempt["state"] == "failed" and attempt["fee_msat"] == 0
                row = budgeted.call(partial(budgeted.store.sessions.get, session.session_id))
                left = 10_000 - paid_fees
                assert f"the cap is {left}" in (row.payout_error or ""), row.payout_error
            else:
                assert hop_fee < attempt["fee_msat"] < hop_fee + 200  # the hop was paid
                paid_fees += attempt["fee_msat"]
        assert outcomes == ["succeeded", "succeeded", "failed"]
        assert committed_today(budgeted) == paid_fees  # the failed grant came back

        direct = SessionClient(http)  # its return invoice has no private hop to pay
        assert (await direct.open("render-card", CARD)).status_code == 200
        closed = await direct.close()
        assert closed.json()["refundStatus"] == "succeeded", closed.text
        [attempt] = await outgoing(http, direct.return_invoice)
        paid_fees += attempt["fee_msat"]

        totals = assert_ledger_balances(budgeted)["totals"]
        assert totals["payout_fees_msat"] == paid_fees <= budgeted.settings.payout_fee_budget_msat
        assert committed_today(budgeted) == paid_fees


async def test_a_refund_link_waits_out_a_spent_budget_and_is_paid_on_a_new_day(
    budgeted: ThreadedServer,
) -> None:
    """A refund link whose payout needs more than the day has left opens again (nothing
    moved); the next day's budget pays it."""
    async for client in http_client(budgeted):
        fees = budgeted.app[REFUNDS].fees
        repository = budgeted.store.payout_fees
        today = int(time.time()) // 86_400
        # Other payouts have spent all but 1 sat of today's budget.
        assert budgeted.call(partial(repository.grant, today, 9_000, 10_000)) == 9_000
        info = await refund_link_of_failed_call(budgeted, client)  # 10 sat, cap 5 sat
        invoice = hinted_invoice(10_000, base_fee_msat=2_000)
        assert (await claim(client, info, invoice))["status"] == "OK"
        await wait_refund_status(budgeted, info["k1"], "open")
        error = budgeted.call(partial(budgeted.app[REFUNDS].last_payout_error, info["k1"]))
        assert error is not None and "the cap is 1000" in error
        assert committed_today(budgeted) == 9_000

        # A new day: the same link, a fresh invoice through the same hop, is paid.
        budgeted.call(partial(repository.release, today, 9_000))  # as a new day's row would be
        again = hinted_invoice(10_000, base_fee_msat=2_000)
        assert (await claim(client, info, again))["status"] == "OK"
        await wait_refund_status(budgeted, info["k1"], "paid")
        [paid] = await outgoing(client, again)
        assert 2_000 < paid["fee_msat"] <= fees.cap_msat(10_000)
        assert committed_today(budgeted) == paid["fee_msat"]
        totals = assert_ledger_balances(budgeted)["totals"]
        assert totals["payout_fees_msat"] == paid["fee_msat"]


def test_the_fee_settings_come_from_the_environment() -> None:
    settings = load_settings(environ={"SATSGATE_REFUND_FEE_MAX_MSAT": "7000"})
    assert settings.refund_fee_max_msat == 7_000
    with pytest.raises(ValueError, match="refund_fee_max_msat"):
        load_settings(environ={"SATSGATE_REFUND_FEE_MAX_MSAT": "-1"})
    settings = load_settings(environ={"SATSGATE_PAYOUT_FEE_BUDGET_MSAT": "250000"})
    assert settings.payout_fee_budget_msat == 250_000
    with pytest.raises(ValueError, match="payout_fee_budget_msat"):
        load_settings(environ={"SATSGATE_PAYOUT_FEE_BUDGET_MSAT": "-1"})
