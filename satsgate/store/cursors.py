"""Cursors: named positions in a stream that only move forward (the node's settlements)."""

from __future__ import annotations

from satsgate.store.engine import Engine

# A cursor never moves back: a late or repeated write of an older position is a no-op.
UPSERT_CURSOR = (
    "INSERT INTO cursors (name, value) VALUES (?, ?) ON CONFLICT(name)"
    " DO UPDATE SET value = CASE WHEN excluded.value > cursors.value"
    " THEN excluded.value ELSE cursors.value END"
)


class CursorRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def get(self, name: str) -> int | None:
        row = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT value FROM cursors WHERE name = ?", (name,)
            ).fetchone()
        )
        return None if row is None else int(row[0])

    async def advance(self, name: str, value: int) -> None:
        """Persist a cursor; it only ever moves forward."""
        await self._db.run_sync(lambda conn: conn.execute(UPSERT_CURSOR, (name, value)))
