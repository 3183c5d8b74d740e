"""The do-not-contact list: normalised numbers and addresses that opted out."""

from __future__ import annotations

import time
from collections.abc import Sequence

from satsgate.domain.addresses import normalise_address
from satsgate.store.engine import Engine
from satsgate.store.sql import Connection


class DoNotContactRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def add(self, address: str, source: str, now: int | None = None) -> bool:
        """Add a normalised address; True when it was not on the list yet."""
        when = int(time.time()) if now is None else now
        key = normalise_address(address)
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO do_not_contact (address, source, created_at)"
                " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (key, source, when),
            )
        )
        return cur.rowcount == 1

    async def remove(self, address: str) -> bool:
        key = normalise_address(address)
        cur = await self._db.run_sync(
            lambda conn: conn.execute("DELETE FROM do_not_contact WHERE address = ?", (key,))
        )
        return cur.rowcount == 1

    async def opted_out(self, addresses: Sequence[str]) -> list[str]:
        """Those of ``addresses`` (any form) on the list, as given."""
        keys: dict[str, str] = {}
        for address in addresses:
            try:
                keys[normalise_address(address)] = address
            except ValueError:
                continue
        if not keys:
            return []

        def go(conn: Connection) -> list[str]:
            marks = ", ".join("?" * len(keys))
            rows = conn.execute(
                f"SELECT address FROM do_not_contact WHERE address IN ({marks})", list(keys)
            ).fetchall()
            return [keys[str(r[0])] for r in rows]

        return await self._db.read(go)

    async def listing(self, limit: int = 1000) -> list[dict[str, object]]:
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT address, source, created_at FROM do_not_contact"
                " ORDER BY created_at DESC LIMIT ?",
                (limit,),
            ).fetchall()
        )
        return [{"address": r[0], "source": r[1], "created_at": int(r[2])} for r in rows]
