"""The session store's open: one session per return invoice, decided by the database
even when two opens race past the open check, and a migration that copes with the
duplicates an older release let in."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from pathlib import Path

import pytest

from satsgate.store import Payment, PaymentStatus, Store
from satsgate.store.migrations import available, migrate
from satsgate.store.sessions import ReturnInvoiceTaken, SessionRepository
from satsgate.store.sql import Connection

RETURN_INVOICE = "lnbcrt1pexamplereturninvoice"
TOKEN_SHA256 = "ab" * 32  # what the store keeps of a session token


async def paid_deposit(store: Store, amount_msat: int = 50_000) -> str:
    """A deposit payment, settled and unused; its payment hash (the session's id)."""
    payment_hash = secrets.token_hex(32)
    now = int(time.time())
    await store.payments.insert(
        Payment(
            f"dep_{payment_hash}", payment_hash, "lnbcrt1deposit", "generate-text",
            amount_msat, PaymentStatus.UNPAID, now, now + 600, None, None, "00", "11",
            "d", "", "http", "deposit",
        )
    )  # fmt: skip
    assert await store.payments.mark_paid(payment_hash, amount_msat, now)
    return payment_hash


async def payment_status(store: Store, payment_hash: str) -> str:
    payment = await store.payments.get(f"dep_{payment_hash}")
    assert payment is not None
    return str(payment.status)


async def test_two_concurrent_opens_with_one_return_invoice_open_one_session(
    store: Store,
) -> None:
    """Both opens passed the read check (it is not consulted here at all): the unique
    index lets exactly one insert; the other changes nothing, its deposit stays paid."""
    return_hash = secrets.token_hex(32)
    deposits = [await paid_deposit(store) for _ in range(2)]
    now = int(time.time())
    outcomes = await asyncio.gather(
        *(
            store.sessions.open(d, f"ch_{i}", RETURN_INVOICE, return_hash, TOKEN_SHA256, now)
            for i, d in enumerate(deposits)
        ),
        return_exceptions=True,
    )
    opened = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(opened) == 1 and opened[0] is not None
    assert len(refused) == 1 and isinstance(refused[0], ReturnInvoiceTaken)
    count = await store.db.run_sync(
        lambda c: c.execute("SELECT count(*) FROM sessions").fetchone()[0]
    )
    assert count == 1
    loser = next(d for d in deposits if d != opened[0].session_id)
    assert await payment_status(store, loser) == "paid"  # rolled back: usable again
    assert await store.sessions.deposit_use(loser) is None
    # Upper-case hex is the same hash.
    assert await store.sessions.return_invoice_taken("other", return_hash.upper(), loser)
    # The same deposit with a fresh return invoice opens.
    fresh = await store.sessions.open(
        loser, "ch_again", "lnbcrt1pfresh", secrets.token_hex(32), TOKEN_SHA256, now
    )
    assert fresh is not None and fresh.session_id == loser


async def test_the_return_hash_migration_keeps_old_duplicates_and_guards_new_opens(
    tmp_path: Path,
) -> None:
    """A database whose older release let two sessions share a return invoice migrates
    (their hash is unknown, NULL); a new open naming that invoice is still refused by
    the open check, which compares the invoice text too."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    before = tuple(m for m in available() if m.version < 19)
    assert [m.name for m in available() if m.version == 19] == ["session_return_hash"]
    migrate(conn, before)
    for session_id in ("aa" * 32, "bb" * 32):
        conn.execute(
            "INSERT INTO sessions (session_id, deposit_msat, return_invoice, status,"
            " created_at, last_used_at, updated_at) VALUES (?, 1000, ?, 'open', 1, 1, 1)",
            (session_id, RETURN_INVOICE),
        )
    conn.close()
    store = Store(path)
    await store.open()
    try:
        rows = await store.db.run_sync(
            lambda c: c.execute("SELECT return_hash FROM sessions").fetchall()
        )
        assert rows == [(None,), (None,)]
        assert await store.sessions.return_invoice_taken(
            RETURN_INVOICE.upper(), secrets.token_hex(32), "cc" * 32
        )
        deposit = await paid_deposit(store)
        fresh_hash = secrets.token_hex(32)
        opened = await store.sessions.open(
            deposit, "ch", "lnbcrt1pnew", fresh_hash, TOKEN_SHA256, int(time.time())
        )
        assert opened is not None
        with pytest.raises(ReturnInvoiceTaken):
            await store.sessions.open(
                await paid_deposit(store),
                "ch2",
                "lnbcrt1pnew2",
                fresh_hash,
                TOKEN_SHA256,
                int(time.time()),
            )
    finally:
        await store.close()


async def test_a_gone_instance_gives_back_only_what_its_own_calls_held(store: Store) -> None:
    """Two instances debit one session; one answers a call, credits part of another and
    is gone with one call in flight: its unanswered debits go back to the balance, the
    live instance's call stays held, to the msat, on each engine."""
    session_id = await paid_deposit(store, 100_000)
    now = int(time.time())
    assert await store.sessions.open(session_id, "ch", RETURN_INVOICE, "cd" * 32,
                                     TOKEN_SHA256, now)  # fmt: skip
    gone = store.sessions  # this store's instance
    live = SessionRepository(store.db, "live-instance")
    assert await gone.debit(session_id, 10_000, now) == 90_000
    assert await gone.debit(session_id, 7_000, now) == 83_000  # answered below
    assert await gone.debit(session_id, 5_000, now) == 78_000  # used 2,000 of it
    assert await live.debit(session_id, 4_000, now) == 74_000  # in flight elsewhere
    gone.answered(session_id, 7_000)
    assert await gone.credit(session_id, 3_000, now, held_msat=5_000) == 77_000

    async def held() -> tuple[int, dict[str, int]]:
        def read(conn: Connection) -> tuple[int, dict[str, int]]:
            total = conn.execute(
                "SELECT held_msat FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            rows = conn.execute(
                "SELECT instance_id, held_msat FROM session_holds WHERE session_id = ?",
                (session_id,),
            ).fetchall()
            return int(total), {str(i): int(h) for i, h in rows}

        return await store.db.run_sync(read)

    for _ in range(100):  # the answered mark is written without waiting for it
        if (await held())[0] == 14_000:
            break
        await asyncio.sleep(0.02)
    assert await held() == (14_000, {store.instance_id: 10_000, "live-instance": 4_000})
    assert await store.sessions.give_back_held(store.instance_id, now) == 1
    assert await store.sessions.give_back_held(store.instance_id, now) == 0  # once
    row = await store.sessions.get(session_id)
    assert row is not None and row.balance_msat == 87_000  # 100,000 - 7,000 - 2,000 - 4,000
    assert await held() == (4_000, {"live-instance": 4_000})
