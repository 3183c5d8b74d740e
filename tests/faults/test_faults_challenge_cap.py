"""A flood of unpaid challenges from many addresses cannot grow the database without
bound: the node keeps at most ``max_unpaid_challenges`` invoices unpaid and unexpired
(the calls' challenges and the session deposits and top-ups offered with them), refuses
the rest with RATE_LIMITED and Retry-After before any invoice, and gives slots back as
invoices are paid or expire. Unpaid rows, deposits too, are pruned within the hour."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.config.settings import load_settings
from satsgate.edge.ratelimit import ChallengeBudget
from satsgate.errors import ApiError
from satsgate.payments.session_wire import PROBLEMS as SESSION_PROBLEMS
from satsgate.server.app import UNPAID_PRUNE_EVERY_S, _prune_unpaid
from satsgate.services.registry import BY_SLUG
from satsgate.store import Payment, PaymentStatus, Store
from tests.conftest import ThreadedServer, dev_pay, http_client, make_settings
from tests.faults.test_faults_prune import stored_payment
from tests.mcp_client import tool_result
from tests.payments.test_gateway import CARD, assert_envelope, mpp_credential, payment_count
from tests.payments.test_sessions import WANTS_SESSION
from tests.payments.test_sessions import Client as SessionClient

CAP = 10


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(
        make_settings(
            tmp_path / "data",
            max_unpaid_challenges=CAP,
            challenge_rate_per_min=2,  # per address: the flood comes from many
            trusted_proxies=("127.0.0.0/8",),
        )
    )
    yield srv
    srv.stop()


def unpaid_rows(server: ThreadedServer) -> int:
    """Every unpaid payment row, of every mode (calls' challenges and session deposits)."""
    return int(
        server.call(
            lambda: server.store.db.run_sync(
                lambda c: c.execute(
                    "SELECT COUNT(*) FROM payments WHERE status = 'unpaid'"
                ).fetchone()[0]
            )
        )
    )


def offers_session(resp: httpx.Response) -> bool:
    return any('intent="session"' in v for v in resp.headers.get_list("www-authenticate"))


def invoices(server: ThreadedServer) -> int:
    """Every invoice the dev node made (a 402's call payment and its session deposit)."""
    path = server.settings.data_dir / "dev_node.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM invoices").fetchone()[0])


async def _post(client: httpx.AsyncClient, xff: str) -> httpx.Response:
    """A 402 for a client that asks for the session offer too (a deposit invoice each)."""
    headers = {"X-Forwarded-For": xff, **WANTS_SESSION}
    return await client.post("/api/l402/render-card", json=CARD, headers=headers)


async def test_a_flood_from_many_addresses_cannot_pass_the_nodes_cap(
    capped: ThreadedServer,
) -> None:
    async for client in http_client(capped):
        addresses = [f"198.51.{i // 250}.{i % 250 + 1}" for i in range(60)]
        answers = await asyncio.gather(*(_post(client, xff) for xff in addresses))
        challenged = [r for r in answers if r.status_code == 402]
        # Each 402 takes a slot for its call's invoice and one for the session deposit it
        # offers; a 402 that got the last slot offers no session (its challenge stands).
        with_session = sum(offers_session(r) for r in challenged)
        assert len(challenged) + with_session == CAP
        assert CAP // 2 <= len(challenged) <= CAP
        for resp in answers:
            if resp.status_code == 429:
                body = assert_envelope(resp, "RATE_LIMITED", 429)
                assert 1 <= int(resp.headers["Retry-After"]) <= 60
                assert body["retry_after_seconds"] == int(resp.headers["Retry-After"])
                assert "too many unpaid payment requests" in body["error"]
        assert payment_count(capped) == len(challenged)
        # No row, and no invoice, past the cap: deposits count like challenges.
        assert unpaid_rows(capped) == CAP
        made = invoices(capped)
        assert made == CAP

        # MCP create_payment draws on the same bound.
        tool = await tool_result(client, "create_payment", {"toolName": "render_card"})
        assert tool["structuredContent"]["error_code"] == "RATE_LIMITED"
        assert unpaid_rows(capped) == CAP and invoices(capped) == made

        # A challenge paid gives its slot back (seen at the next recount, within a second).
        first = challenged[0].json()
        preimage = await dev_pay(client, first["invoice"])
        paid = await client.post(
            "/api/l402/render-card",
            json=CARD,
            headers={"Authorization": f"L402 {first['macaroon']}:{preimage}"},
        )
        assert paid.status_code == 200, paid.text  # a credential is never refused by the cap
        await asyncio.sleep(1.1)
        one_slot = await _post(client, "203.0.113.200")
        assert one_slot.status_code == 402 and not offers_session(one_slot)
        assert (await _post(client, "203.0.113.201")).status_code == 429
        assert unpaid_rows(capped) == CAP and invoices(capped) == CAP + 1


async def test_session_top_ups_draw_on_the_same_bound(tmp_path: Path) -> None:
    """A session whose balance runs out is answered 402 with a fresh charge challenge and a
    top-up deposit: both are invoices for a request not paid yet, and both take a slot."""
    cap = 4
    srv = ThreadedServer(
        make_settings(tmp_path / "data", max_unpaid_challenges=cap, session_deposit_multiplier=1)
    )
    try:
        async for http in http_client(srv):
            session = SessionClient(http)
            opened = await session.open("render-card", CARD)  # slots: call 1, deposit (paid)
            assert opened.status_code == 200, opened.text
            empty = await session.bearer("render-card", CARD)  # the balance was one call
            assert empty.status_code == 402
            assert offers_session(empty) and unpaid_rows(srv) == 3  # call 1, charge, top-up
            await asyncio.sleep(1.1)  # the paid deposit's slot is seen free at a recount
            last = await session.bearer("render-card", CARD)
            assert last.status_code == 402 and "invoice" in last.json()
            assert not offers_session(last)  # the charge took the last slot; no top-up
            assert unpaid_rows(srv) == cap
            full = await session.bearer("render-card", CARD)
            assert full.status_code == 402 and "invoice" not in full.json()
            assert not offers_session(full)
            # Nothing in it can be paid: the problem stands and says when to come back.
            problem = assert_unpayable(full, "PAYMENT_INSUFFICIENT")
            assert problem["type"] == SESSION_PROBLEMS + "insufficient-balance"
            assert unpaid_rows(srv) == cap and invoices(srv) == cap + 1  # + the paid deposit
    finally:
        srv.stop()


async def test_a_refused_credential_keeps_its_402_and_refund_when_the_bound_is_full(
    tmp_path: Path,
) -> None:
    """The charge intent answers a refused credential with a 402 and a fresh challenge.
    With the node's unpaid invoices at their cap there is no fresh challenge: the 402
    still names the problem and carries the refund of a payment too small for the request
    (never traded for a bare 429), and says when a retry can be paid."""
    cap = 2
    srv = ThreadedServer(make_settings(tmp_path / "data", max_unpaid_challenges=cap))
    try:
        async for http in http_client(srv):
            short = srv.call(
                lambda: srv.gate.create_payment(
                    BY_SLUG["render-card"], amount_sats=1, digest="t", via="http"
                )
            )
            preimage = await dev_pay(http, short.payment.bolt11)
            lines = [("WWW-Authenticate", v) for v in short.www_authenticate()]
            auth = mpp_credential(httpx.Response(402, headers=lines), preimage)
            await asyncio.sleep(1.1)  # the paid one's slot is seen free at a recount
            filled = await _post(http, "192.0.2.1")  # the call's invoice and a deposit
            assert filled.status_code == 402 and offers_session(filled)
            assert unpaid_rows(srv) == cap

            refused = await http.post(
                "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
            )
            problem = assert_unpayable(refused, "PAYMENT_INSUFFICIENT")
            assert refused.headers["Content-Type"].startswith("application/problem+json")
            assert problem["type"] == "https://paymentauth.org/problems/payment-insufficient"
            assert problem["refund"]["amount_sats"] == 1
            assert problem["refund"]["lnurl_withdraw"].startswith("LNURL1")
            assert unpaid_rows(srv) == cap
    finally:
        srv.stop()


def assert_unpayable(resp: httpx.Response, code: str) -> dict[str, Any]:
    """A 402 problem that no challenge could be added to (the node's bound is full): its
    own problem, nothing to pay, and when a retry can be paid (header and body agree)."""
    body = assert_envelope(resp, code, 402)
    assert resp.headers.get_list("WWW-Authenticate") == [] and "invoice" not in body
    seconds = int(resp.headers["Retry-After"])
    assert 1 <= seconds <= 60 and body["retry_after_seconds"] == seconds
    for key in ("detail", "error"):
        assert "too many unpaid payment requests outstanding" in body[key]
    assert body["suggestion"].startswith(f"Retry in {seconds} s")
    return body


async def test_rotating_addresses_inside_one_ipv6_64_share_one_limit(
    capped: ThreadedServer,
) -> None:
    async for client in http_client(capped):
        codes = [(await _post(client, f"2001:db8:7:1::{i:x}")).status_code for i in range(1, 5)]
        assert codes == [402, 402, 429, 429]
        assert (await _post(client, "2001:db8:7:2::1")).status_code == 402  # the next /64


def _unpaid(expires_at: int, mode: str = "invoice") -> Payment:
    return stored_payment(PaymentStatus.UNPAID, expires_at, mode)


async def test_the_budget_counts_what_the_store_holds_and_gives_back_expired_slots(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "satsgate.db")
    await store.open()
    try:
        now = int(time.time())
        for payment in (
            _unpaid(now + 600),
            _unpaid(now + 600),
            _unpaid(now + 2),  # expires first
            _unpaid(now - 5),  # expired: not outstanding
            _unpaid(now + 600, mode="deposit"),  # a session deposit: an invoice too
        ):
            await store.payments.insert(payment)
        assert await store.payments.outstanding_unpaid(now) == (4, now + 2)

        async def issue() -> None:  # as the challenger does: the invoice's row in a slot
            async with budget.issuing():
                await store.payments.insert(_unpaid(int(time.time()) + 600))

        # After a restart the store still holds four of the cap of five: one more fits.
        budget = ChallengeBudget(5, store.payments.outstanding_unpaid, recount_s=0)
        await issue()
        with pytest.raises(ApiError) as refused:
            await issue()
        assert refused.value.code == "RATE_LIMITED"
        assert 1 <= int(refused.value.headers["Retry-After"]) <= 2  # when the first expires
        await asyncio.sleep(2.1)
        await issue()  # that one expired: its slot came back
        with pytest.raises(ApiError):
            await issue()
        # One taken and given back (its invoice failed) leaves no trace.
        budget = ChallengeBudget(6, store.payments.outstanding_unpaid, recount_s=0)
        with pytest.raises(RuntimeError):
            async with budget.issuing():
                raise RuntimeError("the invoice failed")
        await issue()
        with pytest.raises(ApiError):
            await issue()
        await ChallengeBudget(0, store.payments.outstanding_unpaid).take()  # 0: no cap
    finally:
        await store.close()


def test_settings_for_the_bound_and_the_prune() -> None:
    defaults = load_settings(environ={})
    assert defaults.max_unpaid_challenges == 10_000
    assert defaults.unpaid_retention_s <= 3600  # pruned within the hour, not a week later
    env = {"SATSGATE_MAX_UNPAID_CHALLENGES": "50", "SATSGATE_UNPAID_RETENTION_S": "120"}
    settings = load_settings(environ=env)
    assert settings.max_unpaid_challenges == 50 and settings.unpaid_retention_s == 120


async def test_expired_unpaid_rows_are_pruned_within_the_hour(tmp_path: Path) -> None:
    """The app's prune job, with the default retention, on a real store: a row expired two
    hours ago goes, one expired ten minutes ago (a late settlement may still want it)
    stays; the job runs every few minutes, not hourly or weekly."""
    store = Store(tmp_path / "satsgate.db")
    await store.open()
    try:
        now = int(time.time())
        old, recent = _unpaid(now - 7200), _unpaid(now - 600)
        old_deposit = _unpaid(now - 7200, mode="deposit")
        recent_deposit = _unpaid(now - 600, mode="deposit")
        for payment in (old, recent, old_deposit, recent_deposit):
            await store.payments.insert(payment)
        await _prune_unpaid(store, load_settings(environ={}).unpaid_retention_s)
        assert await store.payments.get(old.payment_id) is None
        assert await store.payments.get(old_deposit.payment_id) is None
        assert await store.payments.get(recent.payment_id) == recent
        assert await store.payments.get(recent_deposit.payment_id) == recent_deposit
        assert UNPAID_PRUNE_EVERY_S <= 600
    finally:
        await store.close()
