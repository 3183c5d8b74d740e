"""An appeal invoice replaced in the last minute of its life stays its hold's: paid, it
asks for the review if the hold can still take it, else its sat is refunded exactly once
(on the appeal page and by the scheduler). On a real server whose invoices live 60 s,
so every visit to the appeal page replaces the invoice it showed, paid through the dev
node, with the e-mail engine on a loopback SMTP server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.appkeys import HELD_REQUESTS
from tests.conftest import dev_pay, http_client
from tests.ledger_check import assert_ledger_balances
from tests.outreach.test_holds import (
    Node,
    appeal_invoice,
    held_call,
    open_appeal,
    operator,
    serving_node,
)
from tests.store_access import store_rows

# The page replaces an appeal invoice that has less than this left (holds.appeal_invoice).
REPLACED_WITHIN_S = 60


def serving(data: Path, **overrides: Any) -> Iterator[Node]:
    """A node whose invoices live 60 s (every appeal invoice is in its last minute at
    once), sending e-mail to a loopback SMTP server."""
    yield from serving_node(data, invoice_expiry_s=REPLACED_WITHIN_S, **overrides)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from serving(tmp_path_factory.mktemp("appeal-race"))


@pytest.fixture
async def client(node: Node) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(node.server):
        yield c
    assert_ledger_balances(node.server)


def payment_of(node: Node, bolt11: str) -> tuple[str, str]:
    """(payment id, status) of the payment row of an invoice."""
    ((payment_id, status),) = store_rows(
        node.server.settings, "SELECT payment_id, status FROM payments WHERE bolt11 = ?", bolt11
    )
    return str(payment_id), str(status)


def refunds_of(node: Node, payment_id: str) -> int:
    return node.count("SELECT COUNT(*) FROM refunds WHERE payment_id = ?", payment_id)


async def settled(node: Node, bolt11: str) -> str:
    """Wait (generously) for the settlement watcher to record the invoice as paid."""
    for _ in range(600):
        payment_id, status = payment_of(node, bolt11)
        if status != "unpaid":
            return payment_id
        await asyncio.sleep(0.05)
    raise AssertionError(f"{bolt11} never settled")


async def replaced_pair(
    node: Node, client: httpx.AsyncClient, to: str
) -> tuple[dict[str, object], str, str]:
    """A held request and two appeal invoices: the first, replaced by the second."""
    held = await held_call(client, to)
    first = await appeal_invoice(client, held)
    second = await appeal_invoice(client, held)  # the first had under a minute left
    assert first != second
    hold = node.server.call(lambda: node.server.app[HELD_REQUESTS].get(str(held["hold_id"])))
    assert hold is not None and hold.appeal_payment_id == payment_of(node, second)[0]
    return held, first, second


async def test_a_replaced_appeal_invoice_paid_asks_for_the_review_and_a_second_is_refunded(
    node: Node, client: httpx.AsyncClient
) -> None:
    held, first, second = await replaced_pair(node, client, "replaced@example.org")
    url = str(held["appeal_url"])
    await dev_pay(client, first)  # the invoice the page no longer shows
    page = await open_appeal(client, url)
    assert 'data-status="review_requested"' in page.text
    first_id, status = payment_of(node, first)
    assert status == "spent"  # its sat is earned: it bought the review
    desk = node.server.app[HELD_REQUESTS]
    hold = node.server.call(lambda: desk.get(str(held["hold_id"])))
    assert hold is not None and hold.appeal_payment_id == first_id
    assert 'id="appeal-void"' in page.text  # the second is open: do not pay it
    listing = (await client.get("/api/operator/holds", headers=operator(node))).json()
    mine = next(h for h in listing["holds"] if h["hold_id"] == held["hold_id"])
    assert mine["review_requested"] is True

    await dev_pay(client, second)  # paid anyway: it can buy nothing now
    page = await open_appeal(client, url)
    second_id, status = payment_of(node, second)
    assert status == "refunded" and refunds_of(node, second_id) == 1
    assert 'id="appeal-refund"' in page.text and 'id="appeal-refund-sats">1<' in page.text
    assert "another appeal payment" in page.text
    assert 'data-status="review_requested"' in page.text
    # Looking again, and the scheduler, refund nothing more.
    await open_appeal(client, url)
    assert node.server.call(lambda: desk.refund_late_appeals()) == 0
    assert refunds_of(node, second_id) == 1 and refunds_of(node, first_id) == 0


async def test_a_replaced_appeal_invoice_paid_after_the_decision_is_refunded_once(
    node: Node, client: httpx.AsyncClient
) -> None:
    """The operator refunds the hold; the payer then pays the invoice the page replaced.
    Nobody opens the page: the scheduler refunds its sat, once, and the page shows it."""
    held, first, second = await replaced_pair(node, client, "replaced-late@example.org")
    resp = await client.post(
        f"/api/operator/holds/{held['hold_id']}/refund", headers=operator(node)
    )
    assert resp.status_code == 200, resp.text
    await dev_pay(client, first)
    first_id = await settled(node, first)
    desk = node.server.app[HELD_REQUESTS]
    # (The app's own every-minute run of the same sweep may come first.)
    node.server.call(lambda: desk.refund_late_appeals())
    assert node.server.call(lambda: desk.refund_late_appeals()) == 0
    assert payment_of(node, first)[1] == "refunded" and refunds_of(node, first_id) == 1
    page = await open_appeal(client, held["appeal_url"])
    assert 'data-status="refunded"' in page.text
    assert 'id="appeal-refund"' in page.text and "after the request was decided" in page.text
    secret = page.text.split('id="appeal-refund-secret">', 1)[1].split("<", 1)[0]
    recover = await client.post("/recover", data={"payment_id": first_id, "refund_secret": secret})
    assert recover.status_code == 200 and "Refund of 1 sat" in recover.text
    assert refunds_of(node, first_id) == 1
    assert payment_of(node, second)[1] == "unpaid"  # never paid: nothing to refund


async def test_both_appeal_invoices_paid_count_once_and_refund_once_under_a_race(
    node: Node, client: httpx.AsyncClient
) -> None:
    """The replaced invoice and its replacement both paid, then the page (twice) and the
    scheduler apply them at once: one asks for the review, the other is refunded, once."""
    held, first, second = await replaced_pair(node, client, "both@example.org")
    await dev_pay(client, first)
    await dev_pay(client, second)
    ids = [await settled(node, first), await settled(node, second)]
    desk = node.server.app[HELD_REQUESTS]
    url = str(held["appeal_url"])
    await asyncio.gather(
        open_appeal(client, url),
        open_appeal(client, url),
        asyncio.to_thread(node.server.call, lambda: desk.refund_late_appeals()),
    )
    statuses = sorted(payment_of(node, bolt11)[1] for bolt11 in (first, second))
    assert statuses == ["refunded", "spent"]
    assert sum(refunds_of(node, pid) for pid in ids) == 1
    hold = node.server.call(lambda: desk.get(str(held["hold_id"])))
    assert hold is not None and hold.status == "review_requested"
    counted = hold.appeal_payment_id
    assert counted in ids and refunds_of(node, str(counted)) == 0
    assert node.server.call(lambda: desk.refund_late_appeals()) == 0
    assert sum(refunds_of(node, pid) for pid in ids) == 1


async def test_a_new_appeal_invoice_draws_on_the_nodes_bound_on_unpaid_invoices(
    tmp_path: Path,
) -> None:
    """An appeal invoice is made for a request not paid yet: it takes a place of
    ``max_unpaid_challenges`` like a call's challenge. With none left, the page answers
    429 with Retry-After and makes no invoice; the invoice it showed stays payable."""
    for capped in serving(tmp_path / "data", max_unpaid_challenges=1):
        async for client in http_client(capped.server):
            held = await held_call(client, "bounded@example.org")  # its 402: the call's invoice
            await asyncio.sleep(1.1)  # the paid call's place is seen free at a recount
            shown = await appeal_invoice(client, held)  # the last place
            token = str(held["appeal_url"]).split("t=", 1)[1]
            full = await client.post("/appeal", data={"t": token}, follow_redirects=False)
            assert full.status_code == 429
            assert 1 <= int(full.headers["Retry-After"]) <= 60
            assert "too many unpaid payment requests" in full.text
            assert 'id="appeal-error"' in full.text and shown in full.text
            unpaid = "SELECT COUNT(*) FROM payments WHERE status = 'unpaid'"
            assert capped.count(unpaid) == 1  # the appeal's invoice alone
            await dev_pay(client, shown)  # the invoice shown still asks for the review
            page = await open_appeal(client, held["appeal_url"])
            assert 'data-status="review_requested"' in page.text
