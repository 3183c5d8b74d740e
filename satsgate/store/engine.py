"""The store's engine: its two connections, the group commit, the store thread and the
WAL checkpoints. Repositories (one per aggregate, beside this module) hand it single
statements and transactions; it decides where each runs.

- One connection on the event loop for the hot paths' point reads and one-statement
  writes (a payment by key, its INSERT, the spend): :meth:`Database.read`,
  :meth:`Database.write`, :meth:`Database.write_one`. The writes of one loop
  iteration share one transaction (a group commit); each returns only once it has
  committed.
- One connection on the store thread for every multi-statement transaction and every
  scan: :meth:`Database.run_sync`, :meth:`Database.run_in_transaction`; it also runs
  the migrations and the checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from satsgate.store.migrations import migrate
from satsgate.store.sql import Connection, is_lock_error, transaction

T = TypeVar("T")


class Engine(Protocol):
    """What the repositories ask of an engine: :class:`Database` (SQLite, the default)
    and :class:`satsgate.store.postgres.PostgresDatabase` both offer it. ``read``,
    ``write``, ``write_one``, ``write_rows``, ``read_rows`` and ``write_soon`` run one
    statement (the hot paths'; given as text, PostgreSQL runs it on the event loop),
    ``run_sync`` a unit of work that opens its own transactions (or none), and
    ``run_in_transaction`` a unit of work inside one transaction. ``postgres``: what a
    repository that must be one statement on PostgreSQL (where ``write`` is autocommit)
    but may be two on SQLite (where the group commit holds both) asks."""

    postgres: bool

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def read(self, run: Callable[[Connection], T]) -> T: ...

    async def write(self, run: Callable[[Connection], T]) -> T: ...

    async def write_one(self, sql: str, args: Sequence[Any]) -> int: ...

    async def write_rows(self, sql: str, args: Sequence[Any]) -> list[Any]: ...

    async def read_rows(self, sql: str, args: Sequence[Any]) -> list[Any]: ...

    def write_soon(
        self, sql: str, args: Sequence[Any], *more: tuple[str, Sequence[Any]]
    ) -> None: ...

    async def run_sync(self, fn: Callable[[Connection], T]) -> T: ...

    async def run_in_transaction(self, fn: Callable[[Connection], T]) -> T: ...


log = logging.getLogger(__name__)

# Inline writes between two checkpoints (see _checkpoint_restart), and how many more
# may go on while one's PASSIVE step runs before writes wait for it: the WAL's bound.
_CHECKPOINT_EVERY_WRITES = 1000
_WRITES_DURING_PASSIVE = 250


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


class Database:
    """The connection-and-commit engine of the store (see the module docstring)."""

    postgres = False

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        self._thread_conn: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None
        self._writes_since_checkpoint = 0  # inline writes since the last PASSIVE began
        # A checkpoint in two steps (see _checkpoint_restart): the PASSIVE one runs on
        # the store thread; while the RESTART one runs, inline writes wait on this event.
        self._passive_checkpoint: Future[list[Any]] | None = None
        self._writes_open: asyncio.Event | None = None
        # The open group commit of the loop's connection (see _inline_write), if any.
        self._batch: _WriteBatch | None = None
        self._thread_jobs = 0  # store-thread jobs submitted through _run and not yet done
        self._later: set[asyncio.Task[int]] = set()  # write_soon's writes that had to wait

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
        migrate(conn)
        self._thread_conn = conn

    async def close(self) -> None:
        if self._later:
            await asyncio.gather(*self._later, return_exceptions=True)
        if self._batch is not None:
            self._commit_batch()  # its writers are owed their outcome
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        if self._thread_conn is not None:
            # Jobs queued before this one still find the connection open (one thread,
            # first in first out); it is forgotten only once it is closed.
            await self._run(self._thread_conn.close)
            self._thread_conn = None
        self._executor.shutdown(wait=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the store thread. While any such job is queued or running
        the loop's writes commit one by one (see :meth:`_inline_write`): the job may
        be waiting for the write lock, which a group commit holds for the rest of a
        loop iteration, so a settlement (written here) does not queue behind group
        commits under saturating paid load (bench/README.md, settlement latency)."""
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
        if self._thread_conn is None:
            raise RuntimeError("store is not open")
        return self._thread_conn

    async def read(self, run: Callable[[sqlite3.Connection], T]) -> T:
        """``run(conn)`` for one read statement, alone: on the event loop's connection
        when the database is free, else on the store thread (which may wait for the
        lock)."""
        inline = self._inline
        if inline is None:
            return await self._run(lambda: run(self._conn))
        return await self._alone(inline, run)

    async def write(self, run: Callable[[sqlite3.Connection], T]) -> T:
        """``run(conn)`` for one write statement, joining the loop iteration's group
        commit (see :meth:`_inline_write`); on the store thread before the loop's
        connection is open. Conditional updates (``... WHERE status = 'paid'``) stay
        exactly-once across connections: SQLite serializes writers."""
        inline = self._inline
        if inline is None:
            return await self._run(lambda: run(self._conn))
        return await self._inline_write(inline, run)

    async def _alone(self, inline: sqlite3.Connection, run: Callable[[sqlite3.Connection], T]) -> T:
        """One statement as its own transaction on the loop's connection; when another
        connection holds a lock, on the store thread instead (which may wait for it)."""
        try:
            return run(inline)
        except sqlite3.OperationalError as exc:
            if not is_lock_error(exc):
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
            if is_lock_error(exc):
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
            self._passive_checkpoint = self._executor.submit(self._checkpoint, "PASSIVE")

    def _checkpoint(self, mode: str) -> list[Any]:
        """Run a checkpoint on the store thread's connection and read its one row: an
        unread row leaves the statement open, and then that connection can neither
        commit a transaction ("SQL statements in progress") nor checkpoint again."""
        return self._conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

    async def write_one(self, sql: str, args: Sequence[Any]) -> int:
        """One write statement (see :meth:`write`); returns its rowcount."""
        return await self.write(lambda conn: int(conn.execute(sql, args).rowcount))

    async def write_rows(self, sql: str, args: Sequence[Any]) -> list[Any]:
        """One write statement (see :meth:`write`); the rows it returns (``RETURNING``)."""
        return await self.write(lambda conn: conn.execute(sql, args).fetchall())

    async def read_rows(self, sql: str, args: Sequence[Any]) -> list[Any]:
        """One read statement (see :meth:`read`); its rows."""
        return await self.read(lambda conn: conn.execute(sql, args).fetchall())

    def write_soon(self, sql: str, args: Sequence[Any], *more: tuple[str, Sequence[Any]]) -> None:
        """One write statement (and ``more``, in the same transaction) that nobody waits
        for: it joins the loop iteration's open group commit (opening one if the lock is
        free) and returns at once, so it costs the statement, never a commit or a wait of
        its own. When it cannot join one now (a checkpoint step, the store thread at
        work, a lock held elsewhere) it is written by a task, like :meth:`write`. A crash
        before the commit loses it: only for writes whose loss the next start repairs
        (see ``PaymentRepository.answered``)."""
        statements = ((sql, args), *more)
        inline = self._inline
        if inline is not None and not self._thread_jobs and not self._checkpoint_pending():
            batch = self._batch
            if batch is None and not inline.in_transaction:
                batch = self._begin_batch(inline)
            if batch is not None:
                try:
                    for text, values in statements:
                        inline.execute(text, values)
                except sqlite3.Error as exc:
                    if not inline.in_transaction:  # SQLite rolled the transaction back
                        self._end_batch(batch, exc)
                    log.error("a deferred write failed: %s", exc)
                    return
                self._count_write()
                return

        def run(conn: sqlite3.Connection) -> int:
            return sum(int(conn.execute(text, values).rowcount) for text, values in statements)

        task = asyncio.ensure_future(self.write(run))
        self._later.add(task)
        task.add_done_callback(self._later_done)

    def _later_done(self, task: asyncio.Task[int]) -> None:
        self._later.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a deferred write failed: %s", task.exception())

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
        """Run ``fn(conn)`` on the store thread: scans, and single statements off the
        hot paths."""
        return await self._run(lambda: fn(self._conn))

    async def run_in_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the store thread inside one transaction (rolled back on
        any error)."""

        def go() -> T:
            with transaction(self._conn):
                return fn(self._conn)

        return await self._run(go)
