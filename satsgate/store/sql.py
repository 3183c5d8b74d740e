"""Small SQLite helpers shared by the engine, the migrations and the repositories."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCK_ERRORS = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def is_lock_error(exc: sqlite3.OperationalError) -> bool:
    """Another connection holds a lock. Extended codes (SQLITE_BUSY_SNAPSHOT,
    ..._RECOVERY) share the primary byte."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in _LOCK_ERRORS


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
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


def json_or_none(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))
