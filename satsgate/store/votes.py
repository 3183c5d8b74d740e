"""Votes for planned services: one per paid call, keyed by the call id."""

from __future__ import annotations

import sqlite3
import time

from satsgate.store.engine import Database


class VoteRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, slug: str, call_id: str) -> int:
        """Count one vote for ``slug`` (once per ``call_id``: a retried handler never
        counts twice); returns the slug's total."""

        def go(conn: sqlite3.Connection) -> int:
            conn.execute(
                "INSERT OR IGNORE INTO votes (call_id, slug, created_at) VALUES (?, ?, ?)",
                (call_id, slug, int(time.time())),
            )
            row = conn.execute("SELECT COUNT(*) FROM votes WHERE slug = ?", (slug,)).fetchone()
            return int(row[0])

        return await self._db.run_in_transaction(go)

    async def counts(self) -> dict[str, int]:
        """Votes per slug, for every slug voted for."""

        def go(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute("SELECT slug, COUNT(*) FROM votes GROUP BY slug").fetchall()
            return {str(slug): int(n) for slug, n in rows}

        return await self._db.run_sync(go)
