"""Schema migrations: numbered SQL files in this package, applied in order, each once.

``NNNN_what.sql`` is migration NNNN; the numbers run 1, 2, 3, ... without gaps. Each
migration runs in one transaction together with its row in ``schema_migrations``, so
after a crash it has either happened and been recorded, or neither. A migration is
never edited once released: a change of schema is a new file.

The first releases counted their migrations in ``PRAGMA user_version`` only. A
database they made has no ``schema_migrations`` table; on its first open here the
versions up to its ``user_version`` are recorded as applied, and the rest run.
``user_version`` keeps following the latest applied number, so such a release can
still open a database migrated here (it sees its own migrations as done).

PostgreSQL runs the same files (:func:`migrate_postgres`), each statement as
:func:`satsgate.store.dialect.postgres_ddl` spells it there, under an advisory lock:
two instances starting at once migrate once (the second waits, then finds them done).
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from satsgate.store.dialect import postgres_ddl
from satsgate.store.sql import transaction

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """The file's statements, one by one: ``executescript`` would COMMIT first, and a
        migration must stay inside its transaction."""
        found: list[str] = []
        pending = ""
        for piece in self.sql.split(";"):
            pending += piece + ";"
            if sqlite3.complete_statement(pending):
                if _has_code(pending):
                    found.append(pending.strip())
                pending = ""
        if _has_code(pending.rstrip(";")):
            raise ValueError(f"migration {self.version}: unterminated statement {pending!r}")
        return found


def _has_code(sql: str) -> bool:
    lines = (line.split("--", 1)[0] for line in sql.splitlines())
    return any(line.strip(" \t;") for line in lines)


def available() -> tuple[Migration, ...]:
    """Every migration file of this package, by number; numbers without gaps."""
    found = []
    for entry in resources.files(__name__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is not None:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n: {[m.version for m in found]}")
    return tuple(found)


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    return {int(v) for (v,) in conn.execute("SELECT version FROM schema_migrations")}


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] | None = None) -> None:
    """Bring the database on ``conn`` (autocommit mode) up to the latest migration."""
    todo = available() if migrations is None else migrations
    if _recorded_versions(conn) >= {m.version for m in todo}:
        return  # up to date: no write transaction, so a running server is not held up
    with transaction(conn):
        _adopt_legacy_versions(conn, todo)
    for migration in todo:
        # The check is inside the transaction: a second process opening the same
        # database at the same moment waits for the lock, then finds it applied.
        with transaction(conn):
            if migration.version in applied_versions(conn):
                continue
            for statement in migration.statements():
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, int(time.time())),
            )
            conn.execute(f"PRAGMA user_version={migration.version}")


def _recorded_versions(conn: sqlite3.Connection) -> set[int]:
    """The versions recorded as applied; none before the version table exists."""
    if not _has_version_table(conn):
        return set()
    return applied_versions(conn)


def _has_version_table(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    return row is not None


def _adopt_legacy_versions(conn: sqlite3.Connection, migrations: tuple[Migration, ...]) -> None:
    """Create the version table; a database counted by ``user_version`` alone keeps its
    count (versions up to it are recorded as applied)."""
    if _has_version_table(conn):
        return
    conn.execute(_CREATE_TABLE)
    legacy = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.executemany(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)",
        [(m.version, m.name) for m in migrations if m.version <= legacy],
    )


# The advisory lock key the migrations of every satsgate instance take (any 64-bit
# number no other lock of the database uses: "satsgate" in ASCII).
MIGRATION_LOCK = 0x7361747367617465


def migrate_postgres(conn: Any, migrations: tuple[Migration, ...] | None = None) -> None:
    """Bring the PostgreSQL database on ``conn`` (a psycopg connection in autocommit
    mode) up to the latest migration, each in one transaction with its row in
    ``schema_migrations``, under a session advisory lock held until all are done."""
    todo = available() if migrations is None else migrations
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        conn.execute(_CREATE_TABLE.replace("INTEGER", "BIGINT"))
        for migration in todo:
            with conn.transaction():
                row = conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = %s", (migration.version,)
                ).fetchone()
                if row is not None:
                    continue
                for statement in migration.statements():
                    ddl = postgres_ddl(statement)
                    if ddl is not None:
                        conn.execute(ddl)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, int(time.time())),
                )
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
