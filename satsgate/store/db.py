"""The Store: schema, migrations and every query satsgate makes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from satsgate.store.models import Job, JobStatus, Payment, PaymentStatus, Refund, RefundStatus

T = TypeVar("T")

log = logging.getLogger(__name__)

# Inline writes between two checkpoints (see _checkpoint_restart), and how many more
# may go on while one's PASSIVE step runs before writes wait for it: the WAL's bound.
_CHECKPOINT_EVERY_WRITES = 1000
_WRITES_DURING_PASSIVE = 250
_LOCK_ERRORS = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _is_lock_error(exc: sqlite3.OperationalError) -> bool:
    # Extended codes (SQLITE_BUSY_SNAPSHOT, ..._RECOVERY) share the primary byte.
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in _LOCK_ERRORS


class _WriteBatch:
    """The loop connection's transaction for one event-loop iteration's writes.

    Each writer waits on a future of its own: cancelling one writer's wait (at
    shutdown) cancels nobody else's.
    """

    __slots__ = ("error", "settled", "waiters")

    def __init__(self) -> None:
        self.waiters: list[asyncio.Future[None]] = []
        self.settled = False  # committed or failed
        self.error: BaseException | None = None  # why it failed

    def outcome(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A new future for one writer: done when the transaction has committed, or with
        the error that made it fail."""
        future: asyncio.Future[None] = loop.create_future()
        if self.settled:
            self._settle(future)
        else:
            self.waiters.append(future)
        return future

    def settle(self, error: BaseException | None) -> None:
        self.settled, self.error = True, error
        waiters, self.waiters = self.waiters, []
        for future in waiters:
            self._settle(future)

    def _settle(self, future: asyncio.Future[None]) -> None:
        if future.done():  # its writer was cancelled
            return
        if self.error is None:
            future.set_result(None)
        else:
            future.set_exception(self.error)
            future.exception()  # mark retrieved: a cancelled writer never reads it


def _json_or_none(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


# The payments table's columns are Payment's fields, in order: rows map positionally.
_PAYMENT_COLUMNS = Payment._fields
_STATUS_INDEX = _PAYMENT_COLUMNS.index("status")
_INSERT_PAYMENT = (
    f"INSERT INTO payments ({', '.join(_PAYMENT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(_PAYMENT_COLUMNS))})"
)
_SELECT_PAYMENT = f"SELECT {', '.join(_PAYMENT_COLUMNS)} FROM payments WHERE "
_SPEND_TOKEN = (
    "UPDATE payments SET status = 'spent', spent_at = ?"
    " WHERE payment_hash = ? AND token_id = ? AND service = ? AND status = 'paid'"
    f" AND amount_msat >= ? RETURNING {', '.join(_PAYMENT_COLUMNS)}"
)


_PAYMENT_STATUSES = {str(status): status for status in PaymentStatus}


def _payment_of(row: Sequence[Any]) -> Payment:
    values = list(row)  # in Payment's field order (see _PAYMENT_COLUMNS)
    values[_STATUS_INDEX] = _PAYMENT_STATUSES[values[_STATUS_INDEX]]
    return Payment._make(values)

_REFUND_COLUMNS = (
    "refund_id",
    "payment_id",
    "amount_msat",
    "k1",
    "status",
    "reason",
    "created_at",
    "expires_at",
    "payout_bolt11",
    "payout_hash",
    "updated_at",
)


def _migration_1(db: sqlite_utils.Database) -> None:
    db.table("payments").create(
        {
            "payment_id": str,
            "payment_hash": str,
            "bolt11": str,
            "service": str,
            "amount_msat": int,
            "status": str,
            "created_at": int,
            "expires_at": int,
            "paid_at": int,
            "spent_at": int,
            "root_key": str,
            "token_id": str,
            "request_digest": str,
            "description": str,
            "via": str,
            "received_msat": int,
        },
        pk="payment_id",
        not_null={
            "payment_hash",
            "bolt11",
            "service",
            "amount_msat",
            "status",
            "created_at",
            "expires_at",
            "root_key",
            "token_id",
            "request_digest",
            "via",
        },
    )
    db.table("payments").create_index(["payment_hash"], unique=True)
    db.table("payments").create_index(["status", "created_at"])
    db.table("refunds").create(
        {
            "refund_id": str,
            "payment_id": str,
            "amount_msat": int,
            "k1": str,
            "status": str,
            "reason": str,
            "created_at": int,
            "expires_at": int,
            "payout_bolt11": str,
            "payout_hash": str,
            "updated_at": int,
        },
        pk="refund_id",
        not_null={
            "payment_id",
            "amount_msat",
            "k1",
            "status",
            "created_at",
            "expires_at",
            "updated_at",
        },
        foreign_keys=[("payment_id", "payments", "payment_id")],
    )
    db.table("refunds").create_index(["k1"], unique=True)
    db.table("refunds").create_index(["payment_id"])
    db.table("refunds").create_index(["status"])
    db.table("cursors").create({"name": str, "value": int}, pk="name")


def _migration_2(db: sqlite_utils.Database) -> None:
    db.table("jobs").create(
        {
            "job_id": str,
            "payment_id": str,
            "service": str,
            "job_type": str,
            "status": str,
            "result_json": str,
            "error_json": str,
            "created_at": int,
            "updated_at": int,
        },
        pk="job_id",
        not_null={"payment_id", "service", "job_type", "status", "created_at", "updated_at"},
        foreign_keys=[("payment_id", "payments", "payment_id")],
    )
    db.table("jobs").create_index(["status"])


def _migration_3(db: sqlite_utils.Database) -> None:
    # One vote per paid call (call_id = payment id): a replayed call never counts twice.
    db.table("votes").create(
        {"call_id": str, "slug": str, "created_at": int},
        pk="call_id",
        not_null={"slug", "created_at"},
    )
    db.table("votes").create_index(["slug"])


def _migration_4(db: sqlite_utils.Database) -> None:
    # No query reads payments by (status, created_at), and the index cost every spend
    # a second page write. Unpaid rows are found by expiry for pruning, through a
    # partial index that a paid or spent row never touches.
    db.execute("DROP INDEX IF EXISTS idx_payments_status_created_at")
    db.execute(
        "CREATE INDEX idx_payments_unpaid_expiry ON payments (expires_at)"
        " WHERE status = 'unpaid'"
    )


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (
    _migration_1,
    _migration_2,
    _migration_3,
    _migration_4,
)


class Store:
    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        self._db: sqlite_utils.Database | None = None
        self._inline: sqlite3.Connection | None = None
        self._writes_since_checkpoint = 0  # inline writes since the last PASSIVE began
        # A checkpoint in two steps (see _checkpoint_restart): the PASSIVE one runs on
        # the store thread; while the RESTART one runs, inline writes wait on this event.
        self._passive_checkpoint: Future[list[Any]] | None = None
        self._writes_open: asyncio.Event | None = None
        # The open group commit of the loop's connection (see _inline_write), if any.
        self._batch: _WriteBatch | None = None
        self._thread_jobs = 0  # store-thread jobs submitted through _run and not yet done
        # Extra schema steps registered by feature modules (jobs, ...), run after ours.
        self._extra: list[Callable[[sqlite_utils.Database], None]] = []

    # -- plumbing ---------------------------------------------------------------------------

    async def open(self) -> None:
        await self._run(self._open)
        self._inline = self._inline_connection()
        self._writes_open = asyncio.Event()
        self._writes_open.set()

    def _inline_connection(self) -> sqlite3.Connection:
        """The event loop's own connection, for the hot paths' point reads and
        one-statement writes (a payment by key; insert; spend). An indexed statement
        costs tens of microseconds, far less than a hop to the store thread; reads
        and writes share it so its page cache stays warm across its own writes.

        A statement here never blocks the loop for longer than itself:
        - WAL with synchronous=NORMAL: a commit appends to the WAL file, no fsync;
          a reader never waits for a writer;
        - wal_autocheckpoint=0: this connection never checkpoints (the store thread
          does, every ``_CHECKPOINT_EVERY_WRITES`` inline writes);
        - busy_timeout=0: it never waits for a lock; a write that meets one is
          handed to the store thread, which may wait (see :meth:`_inline_write`).
        Each write is one statement, atomic alone; the writes of one loop iteration
        commit together (a group commit, :meth:`_inline_write`), and each returns
        only once that commit is done. Every multi-statement transaction, and every
        read that scans, stays on the store thread.
        """
        conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("PRAGMA busy_timeout=0")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _open(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; WAL keeps it safe
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute(f"PRAGMA journal_size_limit={8 * 1024 * 1024}")  # WAL file kept on reset
        db = sqlite_utils.Database(conn)
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        for number, migrate in enumerate(MIGRATIONS, start=1):
            if version < number:
                with self._tx(conn):
                    migrate(db)
                    conn.execute(f"PRAGMA user_version={number}")
        self._db = db

    async def close(self) -> None:
        if self._batch is not None:
            self._commit_batch()  # its writers are owed their outcome
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        if self._db is not None:
            # Jobs queued before this one still find the connection open (one thread,
            # first in first out); it is forgotten only once it is closed.
            await self._run(self._db.conn.close)
            self._db = None
        self._executor.shutdown(wait=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the store thread. While any such job is queued or running
        the loop's writes commit one by one (see :meth:`_inline_write`): the job may
        be waiting for the write lock, which a group commit holds for the rest of a
        loop iteration. Measured under saturating paid load, settlements (written
        here) reached the store within 25-45 ms with this rule, 80-91 ms without."""
        loop = asyncio.get_running_loop()
        job = self._executor.submit(fn, *args)
        self._thread_jobs += 1
        job.add_done_callback(lambda _: self._count_thread_job_done(loop))
        return await asyncio.wrap_future(job)

    def _count_thread_job_done(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to count
            loop.call_soon_threadsafe(self._thread_job_done)

    def _thread_job_done(self) -> None:
        self._thread_jobs -= 1

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("store is not open")
        return self._db.conn

    @staticmethod
    @contextmanager
    def _tx(conn: sqlite3.Connection) -> Iterator[None]:
        """One transaction; rolled back on any error, a failed COMMIT included (left
        open, it would make every later transaction on the connection fail with
        "cannot start a transaction within a transaction")."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def _inline_or_thread(
        self, run: Callable[[sqlite3.Connection], T], *, write: bool
    ) -> T:
        """``run(conn)`` for one statement: on the event loop's connection when the
        database is free, else on the store thread (which may wait for the lock).

        A read runs alone. A write joins the loop iteration's group commit (see
        :meth:`_inline_write`). Either way conditional updates (``... WHERE status =
        'paid'``) stay exactly-once across connections: SQLite serializes writers.
        """
        inline = self._inline
        if inline is None:
            return await self._run(lambda: run(self._conn))
        if write:
            return await self._inline_write(inline, run)
        return await self._alone(inline, run)

    async def _alone(
        self, inline: sqlite3.Connection, run: Callable[[sqlite3.Connection], T]
    ) -> T:
        """One statement as its own transaction on the loop's connection; when another
        connection holds a lock, on the store thread instead (which may wait for it)."""
        try:
            return run(inline)
        except sqlite3.OperationalError as exc:
            if not _is_lock_error(exc):
                raise
        return await self._run(lambda: run(self._conn))

    async def _inline_write(
        self, inline: sqlite3.Connection, run: Callable[[sqlite3.Connection], T]
    ) -> T:
        """One write statement on the loop's connection, in a group commit.

        The writes made during one iteration of the event loop share one transaction,
        committed by a callback at the start of the next iteration. A commit costs
        about as much as the statement itself (the WAL append and half a dozen lock
        calls), so under load this halves a spend's cost. Each writer returns only
        once its transaction has committed, so nothing is served on a write that
        could still be lost; if the commit fails, every writer of it gets the error
        and none of its writes happened.

        Inside the open transaction the loop's connection reads its own uncommitted
        writes; two spends of one payment in one batch still serve once, because the
        second UPDATE sees the first. The write lock is held only until the commit
        callback, so the store thread's writers (which wait on the lock) get their
        turn between iterations.
        """
        if self._checkpoint_pending():
            await self._checkpoint_restart()
        batch = self._batch
        if batch is None:
            if inline.in_transaction:
                # Only a batch whose COMMIT and ROLLBACK both failed leaves one open
                # (its writers got the error): end it, or no write could start again.
                inline.execute("ROLLBACK")
            if self._thread_jobs:
                result = await self._alone(inline, run)  # the lock is free right after
                self._count_write()
                return result
            batch = self._begin_batch(inline)
            if batch is None:  # another connection holds the write lock: wait off the loop
                return await self._run(lambda: run(self._conn))
        try:
            result = run(inline)
        except sqlite3.Error as exc:
            if not inline.in_transaction:  # SQLite rolled the whole transaction back
                self._end_batch(batch, exc)
            raise
        self._count_write()
        loop = asyncio.get_running_loop()
        try:
            await batch.outcome(loop)
        except asyncio.CancelledError:
            # Cancelled (only at shutdown: aiohttp does not cancel handlers when a
            # client goes away) between the write and its commit: let the commit's
            # outcome be settled first, so the write is either done or not, then stop.
            while not batch.settled:
                with contextlib.suppress(asyncio.CancelledError, sqlite3.Error):
                    await batch.outcome(loop)
            raise
        return result

    def _begin_batch(self, inline: sqlite3.Connection) -> _WriteBatch | None:
        """Open the iteration's transaction (taking the write lock now, never waiting
        for it) and schedule its commit; None if another connection holds the lock."""
        try:
            inline.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_lock_error(exc):
                return None
            raise
        loop = asyncio.get_running_loop()
        batch = _WriteBatch()
        self._batch = batch
        # call_soon from inside this iteration's callbacks runs at the start of the
        # next iteration: every write made until then joins this transaction.
        loop.call_soon(self._commit_batch, batch)
        return batch

    def _commit_batch(self, batch: _WriteBatch | None = None) -> None:
        """Commit the open batch (``batch``: only if it is still the open one; the
        scheduled commit of a batch committed early finds nothing to do)."""
        if batch is None:
            batch = self._batch
        inline = self._inline
        if batch is None or batch is not self._batch or inline is None:
            return
        if not inline.in_transaction:  # rolled back under a failed statement already
            self._end_batch(batch, sqlite3.OperationalError("the write transaction was lost"))
            return
        try:
            inline.execute("COMMIT")
        except sqlite3.Error as exc:
            if inline.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    inline.execute("ROLLBACK")
            self._end_batch(batch, exc)
        else:
            self._end_batch(batch, None)

    def _end_batch(self, batch: _WriteBatch, error: BaseException | None) -> None:
        if self._batch is batch:
            self._batch = None
        if batch.settled:
            return
        if error is not None:
            log.error("a group commit of the store failed: %s", error)
        batch.settle(error)

    def _count_write(self) -> None:
        """Count an inline write; every ``_CHECKPOINT_EVERY_WRITES`` start a checkpoint."""
        self._writes_since_checkpoint += 1
        if (
            self._writes_since_checkpoint >= _CHECKPOINT_EVERY_WRITES
            and not self._checkpoint_pending()
        ):
            self._writes_since_checkpoint = 0
            self._passive_checkpoint = self._executor.submit(
                self._checkpoint, "PASSIVE"
            )

    def _checkpoint(self, mode: str) -> list[Any]:
        """Run a checkpoint on the store thread's connection and read its one row: an
        unread row leaves the statement open, and then that connection can neither
        commit a transaction ("SQL statements in progress") nor checkpoint again."""
        return self._conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

    async def _write_one(self, sql: str, args: Sequence[Any]) -> int:
        """One write statement; returns its rowcount."""
        return await self._inline_or_thread(
            lambda conn: int(conn.execute(sql, args).rowcount), write=True
        )

    def _checkpoint_pending(self) -> bool:
        """A checkpoint's PASSIVE step was submitted or its RESTART step is running."""
        writes_open = self._writes_open
        return self._passive_checkpoint is not None or (
            writes_open is not None and not writes_open.is_set()
        )

    async def _checkpoint_restart(self) -> None:
        """Before an inline write: wait for a running RESTART checkpoint, or run one
        once its PASSIVE step is done.

        The WAL is copied into the database in two steps on the store thread, so that
        the loop's own writes never compete with a checkpoint for the write lock (one
        that met it would have to hop to the store thread):
        1. PASSIVE (submitted after ``_CHECKPOINT_EVERY_WRITES`` inline writes) copies
           the WAL and syncs the database while inline writes go on appending: the
           long part, about a thousand pages and an fsync.
        2. RESTART, run here by the first write after that, copies what was appended
           meanwhile and makes the next writer start the WAL over, so it stays bounded
           (PASSIVE alone, racing a steady stream of writes, can stay behind forever).
           Inline writes wait on the loop until it is done, so such a stream cannot
           starve it. The write that runs it awaits it, so it happens even in a loop
           of writes that never yields otherwise.
        A PASSIVE step that falls ``_WRITES_DURING_PASSIVE`` writes behind makes the
        next writes wait for it too, so no more than about ``_CHECKPOINT_EVERY_WRITES
        + _WRITES_DURING_PASSIVE`` writes come between two RESTARTs, however fast
        they come. A few thousand writes a second never wait on it: a PASSIVE step
        takes tens of milliseconds.
        """
        writes_open = self._writes_open
        assert writes_open is not None
        while True:
            while not writes_open.is_set():
                await writes_open.wait()
            passive = self._passive_checkpoint
            if passive is None:
                return
            if passive.done():  # a concurrent Future: known without the loop
                break
            if self._writes_since_checkpoint < _WRITES_DURING_PASSIVE:
                return
            # Wait for it (its error, if any, is read below), then look again:
            # another writer may have run the RESTART meanwhile.
            await asyncio.wait([asyncio.wrap_future(passive)])
        self._passive_checkpoint = None
        writes_open.clear()
        if self._batch is not None:
            # Commit the writes made so far now: RESTART needs the write lock, and would
            # otherwise sleep in its busy handler until the group commit's turn.
            self._commit_batch()
        try:
            passive.result()
            await self._run(self._checkpoint, "RESTART")
        except sqlite3.Error as exc:  # the next checkpoint tries again
            log.warning("WAL checkpoint failed: %s", exc)
        finally:
            writes_open.set()

    async def run_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the store thread (for feature modules' own tables)."""
        return await self._run(lambda: fn(self._conn))

    async def run_in_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def go() -> T:
            with self._tx(self._conn):
                return fn(self._conn)

        return await self._run(go)

    # -- payments ---------------------------------------------------------------------------

    async def insert_payment(self, payment: Payment) -> None:
        values = [getattr(payment, c) for c in _PAYMENT_COLUMNS]
        values[_STATUS_INDEX] = str(payment.status)
        await self._write_one(_INSERT_PAYMENT, values)

    @staticmethod
    def _payment_where(conn: sqlite3.Connection, clause: str, arg: str) -> Payment | None:
        row = conn.execute(_SELECT_PAYMENT + clause, (arg,)).fetchone()
        return None if row is None else _payment_of(row)

    async def get_payment(self, payment_id: str) -> Payment | None:
        return await self._inline_or_thread(
            lambda conn: self._payment_where(conn, "payment_id = ?", payment_id), write=False
        )

    async def get_payment_by_hash(self, payment_hash: str) -> Payment | None:
        return await self._inline_or_thread(
            lambda conn: self._payment_where(conn, "payment_hash = ?", payment_hash),
            write=False,
        )

    async def mark_paid(
        self,
        payment_hash: str,
        received_msat: int,
        paid_at: int,
        cursor: tuple[str, int] | None = None,
    ) -> bool:
        """unpaid -> paid, and (atomically with it) persist the settlement cursor.

        Returns False when the payment was already paid (or is not ours): settling
        twice is harmless. A settlement for less than the invoice amount is not
        accepted as payment.
        """

        def go() -> bool:
            conn = self._conn
            with self._tx(conn):
                cur = conn.execute(
                    "UPDATE payments SET status = 'paid', paid_at = ?, received_msat = ?"
                    " WHERE payment_hash = ? AND status = 'unpaid' AND amount_msat <= ?",
                    (paid_at, received_msat, payment_hash, received_msat),
                )
                if cursor is not None:
                    conn.execute(
                        "INSERT INTO cursors (name, value) VALUES (?, ?) ON CONFLICT(name)"
                        " DO UPDATE SET value = MAX(value, excluded.value)",
                        cursor,
                    )
                return cur.rowcount == 1

        return await self._run(go)

    async def get_cursor(self, name: str) -> int | None:
        row = await self._run(
            lambda: self._conn.execute(
                "SELECT value FROM cursors WHERE name = ?", (name,)
            ).fetchone()
        )
        return None if row is None else int(row[0])

    async def set_cursor(self, name: str, value: int) -> None:
        """Persist a cursor; it only ever moves forward."""
        await self._run(
            lambda: self._conn.execute(
                "INSERT INTO cursors (name, value) VALUES (?, ?) ON CONFLICT(name)"
                " DO UPDATE SET value = MAX(value, excluded.value)",
                (name, value),
            )
        )

    async def spend(self, payment_id: str, now: int) -> bool:
        """paid -> spent. The one rule of pay-per-call: exactly one caller gets True."""
        rowcount = await self._write_one(
            "UPDATE payments SET status = 'spent', spent_at = ?"
            " WHERE payment_id = ? AND status = 'paid'",
            (now, payment_id),
        )
        return rowcount == 1

    async def prune_unpaid(self, expired_before: int) -> int:
        """Delete payments never paid whose invoice expired before ``expired_before``.

        A 402 costs the caller nothing, so unpaid rows would pile up forever. An
        expired invoice can no longer be paid; the caller keeps a margin of days so
        a settlement that raced the expiry (applied late after downtime) still finds
        its row.
        """
        cur = await self._run(
            lambda: self._conn.execute(
                "DELETE FROM payments WHERE status = 'unpaid' AND expires_at < ?",
                (expired_before,),
            )
        )
        return int(cur.rowcount)

    async def spend_token(
        self, payment_hash: str, token_id: str, service: str, price_msat: int, now: int
    ) -> Payment | None:
        """paid -> spent for the payment of this macaroon token, if it covers ``price_msat``;
        the spent row, or None when no such paid payment exists (nothing changed).

        The same one conditional UPDATE as :meth:`spend`, reading the row as it writes.
        """

        def run(conn: sqlite3.Connection) -> Payment | None:
            # fetchall: the statement runs to its end (RETURNING rows are all read), so
            # the transaction it is part of can commit.
            rows = conn.execute(_SPEND_TOKEN, (now, payment_hash, token_id, service, price_msat))
            found = rows.fetchall()
            return _payment_of(found[0]) if found else None

        return await self._inline_or_thread(run, write=True)

    async def refund_unspent(self, payment_id: str, refund: Refund) -> bool:
        """paid -> refunded and the refund row, in one transaction; False if not paid."""

        def go() -> bool:
            conn = self._conn
            with self._tx(conn):
                cur = conn.execute(
                    "UPDATE payments SET status = 'refunded'"
                    " WHERE payment_id = ? AND status = 'paid'",
                    (payment_id,),
                )
                if cur.rowcount != 1:
                    return False
                self._insert_refund(conn, refund)
                return True

        return await self._run(go)

    # -- refunds ----------------------------------------------------------------------------

    @staticmethod
    def _insert_refund(conn: sqlite3.Connection, refund: Refund) -> None:
        values = [getattr(refund, c) for c in _REFUND_COLUMNS]
        values[_REFUND_COLUMNS.index("status")] = str(refund.status)
        conn.execute(
            f"INSERT INTO refunds ({', '.join(_REFUND_COLUMNS)})"
            f" VALUES ({', '.join('?' * len(_REFUND_COLUMNS))})",
            values,
        )

    async def add_refund_for_spent(self, refund: Refund) -> bool:
        """Insert a refund for a spent (or refunded) payment, never more in total than was
        paid. An expired link can never pay out, so it no longer counts against that."""

        def go() -> bool:
            conn = self._conn
            with self._tx(conn):
                row = conn.execute(
                    "SELECT p.amount_msat - COALESCE(SUM(r.amount_msat), 0) FROM payments p"
                    " LEFT JOIN refunds r ON r.payment_id = p.payment_id"
                    " AND r.status != 'expired'"
                    " WHERE p.payment_id = ? AND p.status IN ('spent', 'refunded')",
                    (refund.payment_id,),
                ).fetchone()
                if row is None or row[0] is None or row[0] < refund.amount_msat:
                    return False
                self._insert_refund(conn, refund)
                return True

        return await self._run(go)

    def _refund_where(self, clause: str, args: tuple[Any, ...]) -> list[Refund]:
        rows = self._conn.execute(
            f"SELECT {', '.join(_REFUND_COLUMNS)} FROM refunds WHERE {clause}", args
        ).fetchall()
        out = []
        for row in rows:
            data = dict(zip(_REFUND_COLUMNS, row, strict=True))
            data["status"] = RefundStatus(data["status"])
            out.append(Refund(**data))
        return out

    async def get_refund_by_k1(self, k1: str) -> Refund | None:
        rows = await self._run(self._refund_where, "k1 = ?", (k1,))
        return rows[0] if rows else None

    async def refunds_for_payment(self, payment_id: str) -> list[Refund]:
        return await self._run(
            self._refund_where, "payment_id = ? ORDER BY created_at", (payment_id,)
        )

    async def refunds_in(self, status: RefundStatus) -> list[Refund]:
        return await self._run(self._refund_where, "status = ?", (str(status),))

    async def claim_refund(self, k1: str, bolt11: str, payout_hash: str, now: int) -> bool:
        """open -> claiming, binding the payout invoice. Exactly one claimer wins."""
        cur = await self._run(
            lambda: self._conn.execute(
                "UPDATE refunds SET status = 'claiming', payout_bolt11 = ?, payout_hash = ?,"
                " updated_at = ? WHERE k1 = ? AND status = 'open' AND expires_at > ?",
                (bolt11, payout_hash, now, k1, now),
            )
        )
        return cur.rowcount == 1

    async def settle_refund_claim(self, k1: str, outcome: RefundStatus, now: int) -> bool:
        """claiming -> paid, or claiming -> open after a payout that definitely failed."""
        if outcome not in (RefundStatus.PAID, RefundStatus.OPEN):
            raise ValueError("a claim ends paid, or open again after a definite failure")
        reset = ", payout_bolt11 = NULL, payout_hash = NULL" if outcome is RefundStatus.OPEN else ""
        cur = await self._run(
            lambda: self._conn.execute(
                f"UPDATE refunds SET status = ?, updated_at = ?{reset}"
                " WHERE k1 = ? AND status = 'claiming'",
                (str(outcome), now, k1),
            )
        )
        return cur.rowcount == 1

    async def expire_refunds(self, now: int) -> int:
        cur = await self._run(
            lambda: self._conn.execute(
                "UPDATE refunds SET status = 'expired', updated_at = ?"
                " WHERE status = 'open' AND expires_at <= ?",
                (now, now),
            )
        )
        return int(cur.rowcount)

    # -- jobs -------------------------------------------------------------------------------

    async def insert_job(self, job: Job) -> None:
        await self._run(
            lambda: self._conn.execute(
                "INSERT INTO jobs (job_id, payment_id, service, job_type, status, result_json,"
                " error_json, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    job.job_id,
                    job.payment_id,
                    job.service,
                    job.job_type,
                    str(job.status),
                    _json_or_none(job.result),
                    _json_or_none(job.error),
                    job.created_at,
                    job.updated_at,
                ),
            )
        )

    async def finish_job(
        self,
        job_id: str,
        status: JobStatus,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        now: int,
    ) -> bool:
        """IN_PROGRESS -> COMPLETED or FAILED, once."""
        cur = await self._run(
            lambda: self._conn.execute(
                "UPDATE jobs SET status = ?, result_json = ?, error_json = ?, updated_at = ?"
                " WHERE job_id = ? AND status = 'IN_PROGRESS'",
                (str(status), _json_or_none(result), _json_or_none(error), now, job_id),
            )
        )
        return cur.rowcount == 1

    def _jobs_where(self, clause: str, args: tuple[Any, ...]) -> list[Job]:
        rows = self._conn.execute(
            "SELECT job_id, payment_id, service, job_type, status, result_json, error_json,"
            f" created_at, updated_at FROM jobs WHERE {clause}",
            args,
        ).fetchall()
        return [
            Job(
                r[0],
                r[1],
                r[2],
                r[3],
                JobStatus(r[4]),
                json.loads(r[5]) if r[5] else None,
                json.loads(r[6]) if r[6] else None,
                r[7],
                r[8],
            )
            for r in rows
        ]

    async def get_job(self, job_id: str) -> Job | None:
        jobs = await self._run(self._jobs_where, "job_id = ?", (job_id,))
        return jobs[0] if jobs else None

    async def jobs_in_progress(self) -> list[Job]:
        return await self._run(self._jobs_where, "status = 'IN_PROGRESS'", ())

    # -- operator views ---------------------------------------------------------------------

    async def stats(self, now: float | None = None) -> dict[str, int]:
        """Figures for `satsgate-status` and /api/health."""
        t = time.time() if now is None else now
        day_start = int(t - t % 86400)

        def go() -> dict[str, int]:
            c = self._conn
            paid_today = c.execute(
                "SELECT COUNT(*) FROM payments WHERE paid_at >= ?", (day_start,)
            ).fetchone()[0]
            ledger = self._ledger(c)
            refunds_open = c.execute(
                "SELECT COUNT(*), COALESCE(SUM(amount_msat), 0) FROM refunds"
                " WHERE status IN ('open', 'claiming')"
            ).fetchone()
            return {
                "payments_today": int(paid_today),
                "earned_sats": ledger["earned_msat"] // 1000,
                "refunds_open": int(refunds_open[0]),
                "refunds_open_sats": int(refunds_open[1]) // 1000,
            }

        return await self._run(go)

    @staticmethod
    def _ledger(c: sqlite3.Connection) -> dict[str, int]:
        received, used, open_paid = c.execute(
            "SELECT"
            " COALESCE(SUM(CASE WHEN status != 'unpaid' THEN amount_msat END), 0),"
            " COALESCE(SUM(CASE WHEN status IN ('spent', 'refunded') THEN amount_msat END), 0),"
            " COALESCE(SUM(CASE WHEN status = 'paid' THEN amount_msat END), 0)"
            " FROM payments"
        ).fetchone()
        # Refunds belong to spent or refunded payments; an expired link stays earned.
        refunded, paid_out = c.execute(
            "SELECT COALESCE(SUM(CASE WHEN status != 'expired' THEN amount_msat END), 0),"
            " COALESCE(SUM(CASE WHEN status = 'paid' THEN amount_msat END), 0) FROM refunds"
        ).fetchone()
        return {
            "received_msat": int(received),
            "earned_msat": int(used - refunded),
            "refunded_msat": int(refunded),
            "refunds_paid_out_msat": int(paid_out),
            "open_msat": int(open_paid),
        }

    async def ledger(self) -> dict[str, int]:
        """received = earned + refunded + open (paid, not yet used), always."""
        return await self._run(lambda: self._ledger(self._conn))
