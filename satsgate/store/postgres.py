"""The store's engine on PostgreSQL (``[store] url = "postgresql://..."``).

The same interface as the SQLite :class:`satsgate.store.engine.Database` (see
:class:`satsgate.store.engine.Engine`), so every repository runs unchanged on it:

- the hot paths' single statements given as text (``write_one``, ``write_rows``,
  ``read_rows``) and ``write_soon``'s batches run on psycopg 3's async connections,
  driven by the event loop itself (:class:`_LoopLanes`): no hop to a thread, whose
  wake-ups and handover of the interpreter lock cost more than the statement; the
  single statements of one loop iteration go out together, as one pipelined exchange
  (:class:`_Statements`);
- a unit of work given as a function (``read``, ``write``, ``run_sync``,
  ``run_in_transaction``, whose Python code is synchronous) runs on psycopg's
  synchronous connections, each on a thread of this engine's own (as many threads as
  connections): the event loop only awaits, it never waits on the network or a lock
  (docs/scale.md says why this driver);
- one statement (``read``, ``write``, ``write_one``, ``write_rows``, ``read_rows``) is
  its own transaction (autocommit), or one of its iteration's exchange, which is one
  transaction answered only once committed: a conditional ``UPDATE ... WHERE status =
  'paid'`` is exactly-once across connections and instances, since PostgreSQL re-checks
  the condition on the row it locked (and, within an exchange, sees the statements
  before it); ``write_soon``'s unwaited writes are gathered into one READ COMMITTED
  transaction per batch (each still a conditional write of its own rows);
- a multi-statement transaction (``run_in_transaction``, and ``transaction(conn)``
  inside ``run_sync``) is SERIALIZABLE: a read-then-write that raced another
  transaction fails with a serialization failure instead of acting on a stale read,
  and the engine runs the whole unit of work again (a few times, then the error);
- the migrations run under a session advisory lock, so two instances starting at once
  migrate once (:func:`satsgate.store.migrations.migrate_postgres`).

Every SQL text goes through :mod:`satsgate.store.dialect` (placeholders).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import random
import select
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg.adapt import Dumper, Loader
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from satsgate.store.dialect import postgres_args, postgres_placeholders
from satsgate.store.migrations import migrate_postgres
from satsgate.store.sql import StoreUnavailable

T = TypeVar("T")

log = logging.getLogger(__name__)

# Connections (and threads) per instance. A paid call makes about three statements, each
# a round trip of a fraction of a millisecond on the same machine: eight keep up with
# hundreds of calls a second; the jobs that wait longer (a transaction meeting a lock)
# take one each.
POOL_SIZE = 8
# Connections the event loop drives itself (see _LoopLanes): a statement there holds its
# connection for one round trip, so a few serve thousands of statements a second.
LOOP_LANES = 4
# A unit of work that lost a serialization race is run again, after a random pause
# growing to at most _RETRY_PAUSE_MAX_S (so contenders spread out), this many times at most.
_RETRIES = 40
_RETRY_PAUSE_MAX_S = 0.05
_CONNECT_WAIT_S = 5.0
_RECONNECT_BOUND_S = 10.0
_NO_CONNECTION = f"no connection to PostgreSQL within {_CONNECT_WAIT_S:g} s"
_RETRY_ERRORS = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


class _BoolAsInteger(Dumper):
    """A Python bool as 0 or 1: the schema keeps flags in integer columns (SQLite has
    no boolean type)."""

    oid = psycopg.postgres.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


class _NumericAsNumber(Loader):
    """``numeric`` (what ``SUM`` of a bigint column gives) as an int when whole, as
    SQLite gives it, else a float."""

    def load(self, data: Any) -> int | float:
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


def _configure(conn: psycopg.Connection[Any]) -> None:
    _adapt(conn)


async def _configure_async(conn: psycopg.AsyncConnection[Any]) -> None:
    _adapt(conn)


def _adapt(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    conn.adapters.register_dumper(bool, _BoolAsInteger)
    conn.adapters.register_loader("numeric", _NumericAsNumber)


class PgConnection:
    """A psycopg connection as a repository's :class:`satsgate.store.sql.Connection`."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, parameters: Any = None, /) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor()
        if not parameters:  # no placeholder to rewrite; psycopg reads no % either
            cur.execute(sql)
            return cur
        query, order = postgres_placeholders(sql)
        cur.execute(query, postgres_args(order, parameters))
        return cur

    def executemany(self, sql: str, parameters: Any, /) -> psycopg.Cursor[Any]:
        query, order = postgres_placeholders(sql)
        cur = self.raw.cursor()
        cur.executemany(query, [postgres_args(order, args) for args in parameters])
        return cur

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One SERIALIZABLE transaction, rolled back on any error."""
        with self._transaction("BEGIN ISOLATION LEVEL SERIALIZABLE"):
            yield

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads that see one state of the database."""
        with self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"):
            yield

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[None]:
        self.raw.execute(begin)
        try:
            yield
            self.raw.execute("COMMIT")
        except BaseException:
            if self.in_transaction:
                with contextlib.suppress(psycopg.Error):
                    self.raw.execute("ROLLBACK")
            raise


class _LoopLanes:
    """A few of psycopg's async connections, each kept by a lane from an async pool until
    it breaks (as the threads keep theirs, see ``PostgresDatabase._connection``): a
    statement takes a free lane, runs, and gives the lane back. The pool connects,
    configures and reconnects; the lanes spare each statement the pool's checkout.

    Units are run by tasks of the engine's own (a loop iteration's exchange, see
    :class:`_Statements`; a batch of ``write_soon``'s writes), never by a caller's task:
    a caller that gives up (a client gone, a timeout) never cuts a statement mid-way,
    so the lane's connection is never left in an unknown state; a unit on a thread
    likewise runs to its end (a spend that commits after its caller left is one in
    doubt either way, see ``PaymentRepository``)."""

    def __init__(self, url: str, size: int) -> None:
        self._size = size
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            url,
            min_size=size,
            max_size=size,
            kwargs={"autocommit": True},
            configure=_configure_async,
            open=False,
            name="satsgate-store-loop",
            timeout=_CONNECT_WAIT_S,
            reconnect_timeout=_RECONNECT_BOUND_S,
        )
        # A free lane is its connection, or None until its first unit takes one. A lane
        # given back goes to the unit that has waited longest (see _release): with
        # asyncio.Queue a unit arriving just then would take it first, and a unit that
        # lost that race waits again at the back, some for hundreds of statements.
        self._free: list[psycopg.AsyncConnection[Any] | None] = []
        self._waiting: collections.deque[asyncio.Future[psycopg.AsyncConnection[Any] | None]]
        self._waiting = collections.deque()
        self._open = False
        self._taken: set[psycopg.AsyncConnection[Any]] = set()

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=30)
        self._free = [None] * self._size
        self._open = True

    async def close(self) -> None:
        self._open = False
        for conn in list(self._taken):
            await self._pool.putconn(conn)
        self._taken.clear()
        await self._pool.close()

    async def run(self, unit: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        conn = await self._acquire()
        try:
            for attempt in range(_RETRIES):
                if conn is not None and _closed_by_server(conn):
                    await conn.close()
                    conn = await self._after_unit(conn)  # back to the pool, which replaces it
                if conn is None:
                    conn = await self._take()
                try:
                    return await unit(conn)
                except _RETRY_ERRORS:
                    if attempt == _RETRIES - 1:
                        raise
                    pause = random.uniform(0, min(_RETRY_PAUSE_MAX_S, 0.001 * 2**attempt))
                    await asyncio.sleep(pause)
                except psycopg.OperationalError as exc:  # the server went away or refused
                    raise StoreUnavailable(f"{type(exc).__name__}: {exc}"[:300]) from exc
                finally:
                    conn = await self._after_unit(conn)
            raise AssertionError("unreachable")
        finally:
            self._release(conn)

    async def _acquire(self) -> psycopg.AsyncConnection[Any] | None:
        if not self._open:
            raise RuntimeError("store is not open")
        if self._free and not self._waiting:
            return self._free.pop()
        waiter: asyncio.Future[psycopg.AsyncConnection[Any] | None]
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a lane as it was cancelled
                self._release(waiter.result())
            raise

    def _release(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._free.append(conn)

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        """A connection from the pool, past those its server closed (see
        :func:`_closed_by_server`; the pool replaces each)."""
        try:
            for _ in range(self._size + 1):
                conn = await self._pool.getconn()
                if not _closed_by_server(conn):
                    self._taken.add(conn)
                    return conn
                await conn.close()
                await self._pool.putconn(conn)
        except PoolTimeout as exc:
            raise StoreUnavailable(_NO_CONNECTION) from exc
        raise StoreUnavailable(_NO_CONNECTION)

    async def _after_unit(
        self, conn: psycopg.AsyncConnection[Any]
    ) -> psycopg.AsyncConnection[Any] | None:
        """The lane's connection for its next unit: None when it broke (it goes back to
        the pool, which replaces it); one left in a transaction is rolled back."""
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            return conn
        if not conn.closed:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
            if conn.info.transaction_status == TransactionStatus.IDLE:
                return conn
        self._taken.discard(conn)
        await self._pool.putconn(conn)
        return None


def _closed_by_server(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection kept between units was closed by its server meanwhile
    (PostgreSQL restarted or ended it). An idle connection that listens to nothing has
    nothing to read unless its server wrote its last words (or its end) to it, so a
    poll of its socket tells at no round trip's cost, and the kept connection is
    replaced before its next unit instead of failing it."""
    if conn.closed:
        return True
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


async def _rows_of(cursor: psycopg.AsyncCursor[Any]) -> list[Any]:
    return await cursor.fetchall()


async def _rowcount_of(cursor: psycopg.AsyncCursor[Any]) -> int:
    return int(cursor.rowcount)


# A statement's text and arguments as psycopg takes them, what its caller reads of its
# cursor (rows or a count), and the caller's future.
_Read = Callable[[psycopg.AsyncCursor[Any]], Awaitable[Any]]
_Queued = tuple[str, Sequence[Any], _Read, "asyncio.Future[Any]"]
# Statements in one pipelined exchange at the most; more queued in one loop iteration
# go out as several, on as many lanes.
_PIPELINE_MAX = 64


class _Statements:
    """The single statements (``write_one``, ``write_rows``, ``read_rows``) of one
    event-loop iteration, sent together on one lane as one pipelined exchange: one
    write and one wake-up of PostgreSQL's backend for all of them instead of one
    each, which is most of what such a statement costs the server
    (bench/README.md, issue 29).

    The exchange is one implicit transaction (its statements, then one Sync): each
    statement sees those before it in the exchange as it would one after another on
    one connection, so two spends of one payment in it still serve once. Nothing is
    told to any caller before the exchange has committed. When it fails, PostgreSQL
    rolled all of it back, and each statement runs again alone (its own transaction,
    as a lone statement always does), so one statement's error is that statement's
    only; a lost connection is every caller's StoreUnavailable (each in doubt, as a
    lone statement's would be). The exchange runs to its end whatever its callers do
    (see :class:`_LoopLanes`)."""

    def __init__(self, lanes: _LoopLanes) -> None:
        self._lanes = lanes
        self._queued: list[_Queued] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(
        self,
        sql: str,
        args: Sequence[Any],
        read: Callable[[psycopg.AsyncCursor[Any]], Awaitable[T]],
    ) -> T:
        query, order = postgres_placeholders(sql)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._send)  # after the rest of this iteration's callbacks
        self._queued.append((query, postgres_args(order, args), read, future))
        return await future

    async def drain(self) -> None:
        """Wait for every statement queued or under way (at shutdown)."""
        while self._queued or self._sending:
            if self._queued:
                self._send()
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _send(self) -> None:
        queued, self._queued = self._queued, []
        for start in range(0, len(queued), _PIPELINE_MAX):
            task = asyncio.ensure_future(self._exchange(queued[start : start + _PIPELINE_MAX]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _exchange(self, batch: list[_Queued]) -> None:
        try:
            if len(batch) > 1 and await self._pipelined(batch):
                return
            for query, params, read, future in batch:
                try:
                    alone = functools.partial(_alone, query=query, params=params, read=read)
                    outcome = await self._lanes.run(alone)
                except Exception as exc:
                    _tell(future, error=exc)
                else:
                    _tell(future, outcome)
        finally:  # cancelled (the loop is closing): nobody is left waiting for an answer
            for *_, future in batch:
                future.cancel()

    async def _pipelined(self, batch: list[_Queued]) -> bool:
        """Whether ``batch`` was answered by one exchange (False: it was rolled back)."""
        try:
            outcomes = await self._lanes.run(lambda conn: _pipelined(conn, batch))
        except _RolledBack:
            return False
        except Exception as exc:  # the store is unavailable (each in doubt), or closed
            for *_, future in batch:
                _tell(future, error=exc)
        else:
            for (*_, future), outcome in zip(batch, outcomes, strict=True):
                _tell(future, outcome)
        return True


def _tell(
    future: asyncio.Future[Any], outcome: Any = None, *, error: BaseException | None = None
) -> None:
    """Settle a caller's future, unless the caller has stopped waiting for it."""
    if future.done():
        return
    if error is None:
        future.set_result(outcome)
    else:
        future.set_exception(error)


async def _alone(
    conn: psycopg.AsyncConnection[Any], query: str, params: Sequence[Any], read: _Read
) -> Any:
    return await read(await conn.execute(query, params))


class _RolledBack(Exception):
    """A statement of a pipelined exchange failed on a sound connection: PostgreSQL
    rolled the whole exchange back (its implicit transaction)."""


async def _pipelined(conn: psycopg.AsyncConnection[Any], batch: list[_Queued]) -> list[Any]:
    """``batch``'s statements sent at once, then one Sync: one implicit transaction.
    A deadlock or serialization failure is raised as it is (the lane runs the exchange
    again); any other error on a connection still sound as :class:`_RolledBack`, so
    that a statement's error (psycopg raises one as an ``OperationalError`` too, or its
    followers' ``PipelineAborted``) is not taken for a lost connection.

    One ``execute`` a statement, not ``executemany(..., returning=True)`` for a run of
    one text: to keep each answer, psycopg flushes and waits for them before the Sync,
    a round trip more, and the answers arrive before the commit."""
    try:
        async with conn.pipeline() as pipeline:
            cursors = []
            for query, params, _, _ in batch:
                cursor = conn.cursor()
                await cursor.execute(query, params)
                cursors.append(cursor)
            await pipeline.sync()
        return [await read(cursor) for cursor, (_, _, read, _) in zip(cursors, batch, strict=True)]
    except _RETRY_ERRORS:
        raise
    except psycopg.Error as exc:
        if conn.closed or conn.broken:
            raise
        raise _RolledBack(str(exc)) from exc


async def _write_batch_async(
    conn: psycopg.AsyncConnection[Any], batch: Sequence[tuple[str, Sequence[Any]]]
) -> None:
    """``batch``'s statements in one READ COMMITTED transaction (each a conditional
    write of its own rows, as it would be alone in autocommit), pipelined: BEGIN, the
    statements in one exchange, COMMIT. Any error rolls the whole transaction back.

    A run of the same statement (a loop iteration's answered marks) goes as one
    ``executemany``: its text is converted once and its executions pipelined by psycopg,
    each still a statement of its own."""
    async with conn.transaction():
        cursor = conn.cursor()
        for text, rows in itertools.groupby(batch, key=lambda item: item[0]):
            query, order = postgres_placeholders(text)
            await cursor.executemany(query, [postgres_args(order, values) for _, values in rows])


def _migrate(conn: PgConnection) -> None:
    migrate_postgres(conn.raw)


class PostgresDatabase:
    """The PostgreSQL engine of the store (see the module docstring)."""

    postgres = True

    def __init__(self, url: str, pool_size: int = POOL_SIZE, loop_lanes: int = LOOP_LANES) -> None:
        self._url = url
        self._pool_size = pool_size
        self._executor: ThreadPoolExecutor | None = None
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._later: set[asyncio.Task[Any]] = set()  # write_soon's writes
        # write_soon's writes not yet sent, and the task sending them (see write_soon).
        self._soon: list[tuple[str, Sequence[Any]]] = []
        self._sending: asyncio.Task[None] | None = None
        # Each of the engine's threads keeps one connection of the pool (see _connection).
        self._thread = threading.local()
        self._taken: list[psycopg.Connection[Any]] = []
        self._taken_lock = threading.Lock()
        self._lanes = _LoopLanes(url, loop_lanes)
        self._statements = _Statements(self._lanes)

    async def open(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=self._pool_size, thread_name_prefix="store-pg"
        )
        self._pool = ConnectionPool(
            self._url,
            min_size=self._pool_size,
            max_size=self._pool_size,
            kwargs={"autocommit": True},
            configure=_configure,
            open=False,
            name="satsgate-store",
            # How long a request waits for a connection while PostgreSQL is away before
            # it is answered 503 (STORE_UNAVAILABLE).
            timeout=_CONNECT_WAIT_S,
            # The pool's reconnection attempts back off exponentially; bounded, a long
            # outage is followed by a new connection within seconds of PostgreSQL's
            # return (the next request starts a fresh attempt), not up to half the
            # outage later, so no instance stays cut off for a lease after the others
            # are back (satsgate/cluster/presence.py).
            reconnect_timeout=_RECONNECT_BOUND_S,
        )
        pool = self._pool
        try:
            await self._in_thread(lambda: pool.open(wait=True, timeout=30))
            await self.run_sync(_migrate)
            await self._lanes.open()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        await self._statements.drain()
        if self._later:
            await asyncio.gather(*self._later, return_exceptions=True)
        executor, self._executor = self._executor, None
        pool, self._pool = self._pool, None
        await self._lanes.close()
        loop = asyncio.get_running_loop()
        if executor is not None:  # the units of work under way end first
            await loop.run_in_executor(None, lambda: executor.shutdown(wait=True))
        if pool is not None:
            with self._taken_lock:
                taken, self._taken = self._taken, []
            for conn in taken:
                pool.putconn(conn)
            await loop.run_in_executor(None, pool.close)

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        if self._executor is None:
            raise RuntimeError("store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _unit(self, fn: Callable[[PgConnection], T]) -> T:
        """``fn`` on this thread's connection, run again when it lost a serialization
        race (its transaction was rolled back whole, so nothing of it happened)."""
        for attempt in range(_RETRIES):
            conn = self._connection()
            try:
                return fn(PgConnection(conn))
            except _RETRY_ERRORS:
                if attempt == _RETRIES - 1:
                    raise
                time.sleep(random.uniform(0, min(_RETRY_PAUSE_MAX_S, 0.001 * 2**attempt)))
            except psycopg.OperationalError as exc:  # the server went away or refused
                raise StoreUnavailable(f"{type(exc).__name__}: {exc}"[:300]) from exc
            finally:
                self._after_unit(conn)
        raise AssertionError("unreachable")

    def _connection(self) -> psycopg.Connection[Any]:
        """The connection this thread keeps, taken from the pool on its first unit of
        work: a hop to the pool's lock and its checks for every statement cost about
        as much as the statement itself (measured: 75 us against 28 us)."""
        conn: psycopg.Connection[Any] | None = getattr(self._thread, "conn", None)
        pool = self._pool
        if pool is None:
            raise RuntimeError("store is not open")
        if conn is not None:
            if not _closed_by_server(conn):
                return conn
            conn.close()
            self._after_unit(conn)  # back to the pool, which replaces it
        try:
            for _ in range(self._pool_size + 1):  # past those closed by their server
                conn = pool.getconn()
                if not _closed_by_server(conn):
                    with self._taken_lock:
                        self._taken.append(conn)
                    self._thread.conn = conn
                    return conn
                conn.close()
                pool.putconn(conn)
        except PoolTimeout as exc:
            raise StoreUnavailable(_NO_CONNECTION) from exc
        raise StoreUnavailable(_NO_CONNECTION)

    def _after_unit(self, conn: psycopg.Connection[Any]) -> None:
        """A connection that broke goes back to the pool (which replaces it); one left
        in a transaction (a unit that failed mid-way) is rolled back."""
        if conn.closed:
            self._thread.conn = None
            with self._taken_lock:
                if conn in self._taken:
                    self._taken.remove(conn)
            pool = self._pool
            if pool is not None:
                pool.putconn(conn)
            return
        if conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()

    async def read(self, run: Callable[[Any], T]) -> T:
        return await self._in_thread(lambda: self._unit(run))

    async def write(self, run: Callable[[Any], T]) -> T:
        return await self._in_thread(lambda: self._unit(run))

    async def write_one(self, sql: str, args: Sequence[Any]) -> int:
        return await self._statements.run(sql, args, _rowcount_of)

    async def write_rows(self, sql: str, args: Sequence[Any]) -> list[Any]:
        return await self._statements.run(sql, args, _rows_of)

    async def read_rows(self, sql: str, args: Sequence[Any]) -> list[Any]:
        return await self._statements.run(sql, args, _rows_of)

    def write_soon(self, sql: str, args: Sequence[Any], *more: tuple[str, Sequence[Any]]) -> None:
        """One write (and ``more``, in one transaction with it) nobody waits for (see
        ``Database.write_soon``). The writes of one loop iteration, and those made while
        the previous ones were being written, go out together: one hop to a thread and
        one transaction, the statements pipelined (a group commit, as SQLite's). A
        batch that fails is rolled back whole and its writes are tried again one by one,
        so one write's error loses no other. Several statements (``more``) keep a
        SERIALIZABLE transaction of their own, as ``run_in_transaction``."""
        if more:
            statements = ((sql, args), *more)

            def run(conn: Any) -> int:
                return sum(int(conn.execute(t, values).rowcount) for t, values in statements)

            later = asyncio.ensure_future(self.run_in_transaction(run))
            self._later.add(later)
            later.add_done_callback(self._later_done)
            return
        self._soon.append((sql, args))
        if self._sending is None:
            self._sending = task = asyncio.ensure_future(self._send_soon())
            self._later.add(task)
            task.add_done_callback(self._later_done)

    async def _send_soon(self) -> None:
        try:
            while self._soon:
                batch, self._soon = self._soon, []
                try:
                    await self._write_batch(batch)
                except Exception as exc:
                    if len(batch) == 1 or isinstance(exc, StoreUnavailable):
                        log.error("a deferred write failed: %s", exc)
                        continue
                    for one_write in batch:
                        try:
                            await self._write_batch([one_write])
                        except Exception as one:
                            log.error("a deferred write failed: %s", one)
        finally:
            self._sending = None

    async def _write_batch(self, batch: Sequence[tuple[str, Sequence[Any]]]) -> None:
        await self._lanes.run(lambda conn: _write_batch_async(conn, batch))

    def _later_done(self, task: asyncio.Task[Any]) -> None:
        self._later.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a deferred write failed: %s", task.exception())

    async def run_sync(self, fn: Callable[[Any], T]) -> T:
        return await self._in_thread(lambda: self._unit(fn))

    async def run_in_transaction(self, fn: Callable[[Any], T]) -> T:
        def go(conn: PgConnection) -> T:
            with conn.transaction():
                return fn(conn)

        return await self._in_thread(lambda: self._unit(go))
