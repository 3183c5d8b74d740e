"""The store's inline writes: exactly-once spends, and never a wait on the event loop."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from satsgate.store import Database, Payment, PaymentStatus, Store
from satsgate.store.payments import _PRUNE_UNPAID


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """An open store at tmp_path/satsgate.db, closed after the test."""
    opened = Store(tmp_path / "satsgate.db")
    await opened.open()
    yield opened
    await opened.close()


def sqlite_db(store: Store) -> Database:
    """The SQLite engine of ``store`` (this module's engine tests are of it)."""
    assert isinstance(store.db, Database)
    return store.db


@pytest.fixture
async def any_store(tmp_path: Path, store_url: str) -> AsyncIterator[Store]:
    """An open store on each engine (tests/conftest.py STORES), closed after the test."""
    opened = Store(tmp_path / "satsgate.db", store_url)
    await opened.open()
    yield opened
    await opened.close()


def _paid_payment() -> Payment:
    now = int(time.time())
    return Payment(
        payment_id=f"pay_{secrets.token_hex(16)}",
        payment_hash=secrets.token_hex(32),
        bolt11="lnbcrt1test",
        service="render-card",
        amount_msat=5000,
        status=PaymentStatus.PAID,
        created_at=now,
        expires_at=now + 600,
        paid_at=now,
        spent_at=None,
        root_key=secrets.token_hex(32),
        token_id=secrets.token_hex(32),
        request_digest="d" * 64,
        description="test",
        via="http",
    )


async def test_spend_while_another_connection_holds_the_write_lock(
    store: Store,
    tmp_path: Path,
) -> None:
    payment = _paid_payment()
    await store.payments.insert(payment)
    assert await store.payments.get(payment.payment_id) == payment  # positional mapping

    # Another process-like writer takes the database's write lock and keeps it.
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        conn = sqlite3.connect(tmp_path / "satsgate.db", isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(5)
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert await asyncio.to_thread(locked.wait, 5)

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    tick_task = asyncio.create_task(ticker())
    spends = [asyncio.create_task(store.payments.spend(payment.payment_id, 1)) for _ in range(5)]
    await asyncio.sleep(0.3)
    # The loop kept running while the spends waited for the lock off the loop.
    assert ticks >= 10
    assert not any(s.done() for s in spends)
    release.set()
    results = await asyncio.gather(*spends)
    tick_task.cancel()
    holder.join()
    assert sorted(results) == [False, False, False, False, True]
    spent = await store.payments.get(payment.payment_id)
    assert spent is not None and spent.status is PaymentStatus.SERVING


async def test_concurrent_inline_spends_serve_once(any_store: Store) -> None:
    store = any_store
    payments = [_paid_payment() for _ in range(50)]
    for p in payments:
        await store.payments.insert(p)
    attempts = [store.payments.spend(p.payment_id, 1) for p in payments for _ in range(3)]
    results = await asyncio.gather(*attempts)
    assert sum(results) == 50
    ledger = await store.ledger.totals()
    assert ledger["received_msat"] == 50 * 5000
    # Spent, not yet answered: held, neither earned nor open.
    assert ledger["held_msat"] == 50 * 5000
    assert ledger["earned_msat"] == 0 and ledger["open_msat"] == 0


async def test_deferred_answered_marks_all_land_and_a_failing_write_loses_no_other(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    batches: list[int] = []
    if store.db.postgres:  # count the transactions the deferred writes went out in
        from satsgate.store import postgres

        real = postgres._write_batch_async

        async def counted(conn: Any, batch: Any) -> None:
            batches.append(len(batch))
            await real(conn, batch)

        monkeypatch.setattr(postgres, "_write_batch_async", counted)
    payments = [_paid_payment() for _ in range(30)]
    for p in payments:
        await store.payments.insert(p)
    assert all(await asyncio.gather(*(store.payments.spend(p.payment_id, 1) for p in payments)))
    for p in payments[:20]:  # one loop iteration's answers, a bad write among them
        store.payments.answered(p.payment_id)
        if p is payments[10]:
            store.db.write_soon("UPDATE no_such_table SET x = 1", ())
    await asyncio.sleep(0)
    for p in payments[20:]:  # and more while those are being written
        store.payments.answered(p.payment_id)
    ledger: dict[str, Any] = {}
    for _ in range(200):  # committed: the ledger's snapshot sees them all answered
        ledger = dict(await store.ledger.totals())
        if ledger["held_msat"] == 0:
            break
        await asyncio.sleep(0.02)
    assert ledger["held_msat"] == 0 and ledger["earned_msat"] > 0, ledger
    rows = [await store.payments.get(p.payment_id) for p in payments]
    assert [r.status for r in rows if r is not None] == [PaymentStatus.SPENT] * 30
    if store.db.postgres:
        # The first batch (21 writes) failed whole and its writes were tried one by one.
        assert batches[0] == 21 and batches[1:22] == [1] * 21
        assert sum(batches[22:]) == 10 and len(batches) < 22 + 10


async def test_prune_unpaid_keeps_everything_paid_and_recent(any_store: Store) -> None:
    store = any_store
    now = int(time.time())
    old_unpaid = _paid_payment()._replace(status=PaymentStatus.UNPAID, expires_at=now - 100)
    new_unpaid = _paid_payment()._replace(status=PaymentStatus.UNPAID, expires_at=now + 600)
    old_paid = _paid_payment()._replace(expires_at=now - 100)
    for p in (old_unpaid, new_unpaid, old_paid):
        await store.payments.insert(p)
    assert await store.payments.prune_unpaid(now) == 1
    assert await store.payments.get(old_unpaid.payment_id) is None
    assert await store.payments.get(new_unpaid.payment_id) == new_unpaid
    assert await store.payments.get(old_paid.payment_id) == old_paid
    if not isinstance(store.db, Database):
        return
    # The query uses the partial index rather than scanning the table (SQLite's plan).
    plan = await store.db.run_sync(
        lambda c: c.execute("EXPLAIN QUERY PLAN " + _PRUNE_UNPAID, (1, 1000)).fetchall()
    )
    assert "idx_payments_unpaid_expiry" in str(plan)


async def test_wal_stays_bounded_under_a_stream_of_inline_writes(
    store: Store,
    tmp_path: Path,
) -> None:
    payments = [_paid_payment() for _ in range(2500)]
    for p in payments:
        await store.payments.insert(p)
        assert await store.payments.spend(p.payment_id, 1)
    await store.db.run_sync(lambda c: None)  # let a queued checkpoint finish
    wal = tmp_path / "satsgate.db-wal"
    # Without the store's checkpoints these 5000 commits leave ~50 MB of WAL; with
    # them it never holds more than ~1000 commits' pages (an insert writes ~3).
    assert wal.stat().st_size <= 16 * 1024 * 1024


async def test_writes_stay_on_the_loop_through_checkpoints(store: Store) -> None:
    """A checkpoint never sends the loop's writes to the store thread: they wait for its
    short RESTART step on the loop instead, so none pays a thread hop or meets its lock."""
    on_store_thread: list[str] = []  # every statement the store thread's connection runs
    await sqlite_db(store).run_sync(lambda conn: conn.set_trace_callback(on_store_thread.append))
    payments = [_paid_payment() for _ in range(1200)]
    for p in payments:
        await store.payments.insert(p)
        await asyncio.sleep(0)  # other requests' turn, as on a busy loop
    served = 0
    for p in payments * 2:  # 2400 spends, the repeats refused
        served += await store.payments.spend(p.payment_id, 1)
        await asyncio.sleep(0)
    await sqlite_db(store).run_sync(lambda conn: conn.set_trace_callback(None))
    assert served == len(payments)
    assert any("wal_checkpoint(RESTART)" in sql for sql in on_store_thread)
    writes = [s for s in on_store_thread if s.lstrip().upper().startswith(("INSERT", "UPDATE"))]
    assert writes == []


def _status_seen_elsewhere(db_path: Path, payment_id: str) -> str:
    """The payment's status as another connection (another process) sees it: committed."""
    conn = sqlite3.connect(db_path)
    try:
        row = conn.execute(
            "SELECT status FROM payments WHERE payment_id = ?", (payment_id,)
        ).fetchone()
        return str(row[0])
    finally:
        conn.close()


async def _add_commit_probe(store: Store) -> None:
    """A table whose rows must name a payment, checked at COMMIT (a deferred foreign
    key): inserting 'pay_none' into it is a way to make one commit fail."""
    await store.db.run_sync(
        lambda c: c.execute(
            "CREATE TABLE commit_probe (payment_id TEXT REFERENCES payments (payment_id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
    )


async def test_the_writes_of_one_loop_iteration_share_one_commit(
    store: Store,
    tmp_path: Path,
) -> None:
    payments = [_paid_payment() for _ in range(40)]
    for p in payments:
        await store.payments.insert(p)
    statements: list[str] = []
    inline = sqlite_db(store)._inline
    assert inline is not None
    inline.set_trace_callback(statements.append)
    returned: list[int] = []

    async def spend(index: int) -> bool:
        spent = await store.payments.spend(payments[index].payment_id, 1)
        # The commit that holds this spend happened before the spend returned.
        returned.append(statements.count("COMMIT"))
        # Whichever of the pair spent it, its commit is done when either returns.
        assert _status_seen_elsewhere(tmp_path / "satsgate.db", payments[index].payment_id) == (
            "serving"
        )
        return spent

    # 40 spends and 40 repeats, all started in the same iteration of the loop
    results = await asyncio.gather(*(spend(i % 40) for i in range(80)))
    inline.set_trace_callback(None)
    assert sorted(results) == [False] * 40 + [True] * 40
    updates = [s for s in statements if s.startswith("UPDATE")]
    assert len(updates) == 80
    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    assert min(returned) == 1


async def test_a_write_is_not_visible_or_returned_before_its_commit(
    store: Store,
    tmp_path: Path,
) -> None:
    payment = _paid_payment()
    await store.payments.insert(payment)
    spending = asyncio.create_task(store.payments.spend(payment.payment_id, 1))
    await asyncio.sleep(0)  # the task ran its UPDATE and now waits for the commit
    assert not spending.done()
    assert _status_seen_elsewhere(tmp_path / "satsgate.db", payment.payment_id) == "paid"
    assert await spending is True
    assert _status_seen_elsewhere(tmp_path / "satsgate.db", payment.payment_id) == "serving"


async def test_a_failed_commit_fails_every_write_in_it_and_keeps_none(
    store: Store,
) -> None:
    await _add_commit_probe(store)
    payment = _paid_payment()
    await store.payments.insert(payment)

    async def orphan_row() -> int:
        return await store.db.write_one("INSERT INTO commit_probe VALUES ('pay_none')", ())

    spend, orphan = await asyncio.gather(
        store.payments.spend(payment.payment_id, 1), orphan_row(), return_exceptions=True
    )
    assert isinstance(spend, sqlite3.IntegrityError)
    assert isinstance(orphan, sqlite3.IntegrityError)
    fresh = await store.payments.get(payment.payment_id)
    assert fresh is not None and fresh.status is PaymentStatus.PAID  # nothing was spent
    # The next iteration's writes commit normally; the payment is served once.
    assert await store.payments.spend(payment.payment_id, 2) is True
    assert await store.payments.spend(payment.payment_id, 3) is False


async def test_store_thread_writes_get_the_lock_under_a_stream_of_loop_writes(
    store: Store,
) -> None:
    """The store thread's writers wait for the write lock; a group commit that never
    let go of it would starve them (settlements are written there)."""
    payments = [_paid_payment() for _ in range(4000)]
    stop = asyncio.Event()

    async def stream(offset: int) -> int:
        for _ in range(offset % 3):  # staggered: some writer writes in every iteration
            await asyncio.sleep(0)
        done = 0
        for p in payments[offset::8]:
            if stop.is_set():
                break
            await store.payments.insert(p)
            done += 1
        return done

    writers = [asyncio.create_task(stream(i)) for i in range(8)]
    await asyncio.sleep(0.05)
    unpaid = _paid_payment()._replace(status=PaymentStatus.UNPAID, paid_at=None)
    await store.payments.insert(unpaid)
    started = time.monotonic()
    assert await store.payments.mark_paid(unpaid.payment_hash, 5000, int(time.time()))
    waited = time.monotonic() - started
    stop.set()
    inserted = sum(await asyncio.gather(*writers))
    assert inserted > 0
    assert waited < 1.0  # the thread's own busy timeout is 5 s


async def test_a_store_thread_transaction_commits_right_after_a_checkpoint_began(
    store: Store,
) -> None:
    """The PASSIVE step's result row must be read: left unread, its statement stays
    open and the store thread's next transaction cannot commit (settlements are
    written in such transactions)."""
    unpaid = _paid_payment()._replace(status=PaymentStatus.UNPAID, paid_at=None)
    await store.payments.insert(unpaid)
    for _ in range(1000):  # the 1000th inline write starts a checkpoint's PASSIVE step
        await store.payments.insert(_paid_payment())
    assert sqlite_db(store)._passive_checkpoint is not None
    await store.db.run_sync(lambda c: None)  # the PASSIVE step has run
    assert await store.payments.mark_paid(unpaid.payment_hash, 5000, int(time.time()))
    paid = await store.payments.get(unpaid.payment_id)
    assert paid is not None and paid.status is PaymentStatus.PAID


async def test_a_cancelled_writer_cancels_nobody_else_and_its_write_still_commits(
    store: Store,
    tmp_path: Path,
) -> None:
    first, second = _paid_payment(), _paid_payment()
    for p in (first, second):
        await store.payments.insert(p)
    cancelled = asyncio.create_task(store.payments.spend(first.payment_id, 1))
    other = asyncio.create_task(store.payments.spend(second.payment_id, 1))
    await asyncio.sleep(0)  # both ran their UPDATE in one batch and wait for its commit
    assert not cancelled.done() and not other.done()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    # It gave up only once the commit was settled: its write is done, not half-done.
    assert _status_seen_elsewhere(tmp_path / "satsgate.db", first.payment_id) == "serving"
    assert await other is True
    assert _status_seen_elsewhere(tmp_path / "satsgate.db", second.payment_id) == "serving"


async def test_a_failed_commit_on_the_store_thread_leaves_its_connection_usable(
    store: Store,
) -> None:
    """A COMMIT that fails must roll back: a transaction left open made every later
    one on that connection fail ("cannot start a transaction within a transaction"),
    settlements included, until a restart."""
    await _add_commit_probe(store)
    with pytest.raises(sqlite3.IntegrityError):  # the deferred check fails at COMMIT
        await store.db.run_in_transaction(
            lambda c: c.execute("INSERT INTO commit_probe VALUES ('pay_none')")
        )
    unpaid = _paid_payment()._replace(status=PaymentStatus.UNPAID, paid_at=None)
    await store.payments.insert(unpaid)
    assert await store.payments.mark_paid(unpaid.payment_hash, 5000, int(time.time()))
    orphans = await store.db.run_sync(
        lambda c: c.execute("SELECT count(*) FROM commit_probe").fetchone()[0]
    )
    assert orphans == 0
