"""Votes for planned services: one per paid call, keyed by the call id."""

from __future__ import annotations

import time

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection


class VoteRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def record(self, slug: str, call_id: str) -> int:
        """Count one vote for ``slug`` (once per ``call_id``: a retried handler never
        counts twice); returns the slug's total."""

        def go(conn: Connection) -> int:
            conn.execute(
                "INSERT INTO votes (call_id, slug, created_at) VALUES (?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (call_id, slug, int(time.time())),
            )
            row = conn.execute("SELECT COUNT(*) FROM votes WHERE slug = ?", (slug,)).fetchone()
            return int(row[0])

        return await self._db.run_in_transaction(go)

    async def counts(self) -> dict[str, int]:
        """Votes per slug, for every slug voted for."""

        def go(conn: Connection) -> dict[str, int]:
            rows = conn.execute("SELECT slug, COUNT(*) FROM votes GROUP BY slug").fetchall()
            return {str(slug): int(n) for slug, n in rows}

        return await self._db.run_sync(go)
