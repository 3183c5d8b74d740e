"""Small SQL helpers shared by the engines, the migrations and the repositories.

Repositories write one SQL for both engines (SQLite and PostgreSQL) against
:class:`Connection`: ``?`` placeholders (``?N`` numbered ones too), ``ON CONFLICT ...
DO NOTHING`` rather than ``INSERT OR IGNORE``, ``CASE`` rather than two-argument
``MAX``/``MIN``. On SQLite the connection is ``sqlite3.Connection`` itself; on
PostgreSQL it is :class:`satsgate.store.postgres.PgConnection`, which rewrites the
placeholders (see :mod:`satsgate.store.dialect`, where every other difference lives).
The helpers here (:func:`transaction`, :func:`snapshot`, :func:`is_unique_violation`,
:func:`table_columns`) are the few places a repository meets the difference.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

_LOCK_ERRORS = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


class StoreUnavailable(Exception):
    """The database server did not answer a unit of work (PostgreSQL restarting,
    unreachable, or its connection dropped): the unit did not run, or its transaction
    was rolled back with the connection. Callers answer 503 (STORE_UNAVAILABLE)."""


class Cursor(Protocol):
    """What a repository reads of an executed statement (``sqlite3.Cursor`` has it)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The connection a repository's statements run on (``sqlite3.Connection`` has it)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Any, /) -> Cursor: ...

    @property
    def in_transaction(self) -> bool: ...


def is_lock_error(exc: sqlite3.OperationalError) -> bool:
    """Another connection holds a lock. Extended codes (SQLITE_BUSY_SNAPSHOT,
    ..._RECOVERY) share the primary byte."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in _LOCK_ERRORS


def _pg(conn: Connection) -> Any:
    """The PostgreSQL connection behind ``conn``, or None for SQLite."""
    return None if isinstance(conn, sqlite3.Connection) else conn


@contextmanager
def transaction(conn: Connection) -> Iterator[None]:
    """One write transaction; rolled back on any error, a failed COMMIT included (left
    open, it would make every later transaction on the connection fail with
    "cannot start a transaction within a transaction").

    SQLite: BEGIN IMMEDIATE takes the one write lock first, so a read inside sees what
    the writes act on. PostgreSQL: SERIALIZABLE, so a read-then-write that raced
    another fails (serialization failure) and the engine runs the whole unit again."""
    pg = _pg(conn)
    if pg is not None:
        with pg.transaction():
            yield
        return
    assert isinstance(conn, sqlite3.Connection)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextmanager
def snapshot(conn: Connection) -> Iterator[None]:
    """Several reads that see one state of the database (a read transaction: SQLite's
    deferred BEGIN, PostgreSQL's REPEATABLE READ), ended after them."""
    pg = _pg(conn)
    if pg is not None:
        with pg.snapshot():
            yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        # A read transaction may have been ended by SQLite already (an error).
        conn.execute("COMMIT" if conn.in_transaction else "SELECT 1")


def is_unique_violation(exc: BaseException) -> bool:
    """A UNIQUE (or primary key) constraint refused an INSERT or UPDATE, on either engine."""
    if isinstance(exc, sqlite3.IntegrityError):
        return exc.sqlite_errorcode in (
            sqlite3.SQLITE_CONSTRAINT_UNIQUE,
            sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY,
        )
    return getattr(exc, "sqlstate", None) == "23505"


def is_integrity_error(exc: BaseException) -> bool:
    """Any constraint refused a write (unique, foreign key, check), on either engine."""
    if isinstance(exc, sqlite3.IntegrityError):
        return True
    return str(getattr(exc, "sqlstate", "") or "").startswith("23")


def table_columns(conn: Connection, table: str) -> set[str]:
    """The names of ``table``'s columns."""
    pg = _pg(conn)
    if pg is not None:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        ).fetchall()
        return {str(r[0]) for r in rows}
    return {str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall()}


def json_or_none(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))
