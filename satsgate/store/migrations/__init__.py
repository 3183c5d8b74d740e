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
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from importlib import resources

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
