"""The payout fee budget cannot be farmed: the payer names the payout invoice and may
route it through a last hop of its own (a private route hint whose fee it collects).
Every payout the node makes (a refund link claimed, a session's balance on close) is
capped at ``max_fee_msat`` of its amount, absolute ceiling included, and the node
refuses a route that costs more rather than paying it at the cap; what a payout did
cost is in the ledger as the operator's cost."""

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

from satsgate.app import REFUNDS
from satsgate.config import load_settings
from satsgate.operator import ledger_text
from tests.conftest import ThreadedServer, http_client, make_settings
from tests.ledger_check import assert_ledger_balances
from tests.test_gateway import CARD
from tests.test_refunds import claim, refund_link_of_failed_call, wait_refund_status
from tests.test_sessions import Client as SessionClient

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
        cap = node.app[REFUNDS].max_fee_msat(amount)
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


def test_the_fee_settings_come_from_the_environment() -> None:
    settings = load_settings(environ={"SATSGATE_REFUND_FEE_MAX_MSAT": "7000"})
    assert settings.refund_fee_max_msat == 7_000
    with pytest.raises(ValueError, match="refund_fee_max_msat"):
        load_settings(environ={"SATSGATE_REFUND_FEE_MAX_MSAT": "-1"})
