"""The database a satsgate under test keeps its store in, opened beside it, for the tests
that read rows (or set one up) themselves: the SQLite file or the PostgreSQL database its
settings name, with the repositories' one SQL (``?`` placeholders) on both."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any, Protocol

import psycopg

from satsgate.store.postgres import PgConnection
from satsgate.store.sql import Connection


class StoreSettings(Protocol):
    """What names a store: its SQLite file, or a PostgreSQL URL that wins over it."""

    @property
    def db_path(self) -> Any: ...

    @property
    def store_url(self) -> str: ...


@contextlib.contextmanager
def opened_store(settings: StoreSettings) -> Iterator[Connection]:
    """A connection of the test's own to the store; each statement commits by itself."""
    if settings.store_url:
        with psycopg.connect(settings.store_url, autocommit=True) as raw:
            yield PgConnection(raw)
        return
    with contextlib.closing(sqlite3.connect(settings.db_path, isolation_level=None)) as conn:
        yield conn


def store_rows(settings: StoreSettings, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects."""
    with opened_store(settings) as conn:
        return [tuple(row) for row in conn.execute(sql, args).fetchall()]


def store_value(settings: StoreSettings, sql: str, *args: Any) -> Any:
    """The first column of the one row ``sql`` selects."""
    (row,) = store_rows(settings, sql, *args)
    return row[0]


def store_write(settings: StoreSettings, sql: str, *args: Any) -> int:
    """Runs one statement; how many rows it changed."""
    with opened_store(settings) as conn:
        return conn.execute(sql, args).rowcount
