"""The de-identified record of screened communications: channel, verdict, reasons, a
keyed hash of each recipient, the amount and the time. No text, no address."""

from __future__ import annotations

import json
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection


class ScreeningRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def record(
        self,
        *,
        now: int,
        service: str | None,
        channel: str,
        verdict: str,
        reasons: tuple[str, ...],
        recipient_hashes: tuple[str, ...],
        amount_msat: int | None,
        llm: str,
    ) -> None:
        await self._db.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO screenings (created_at, service, channel, verdict, reasons,"
                " recipient_hashes, amount_msat, llm) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    now,
                    service,
                    channel,
                    verdict,
                    json.dumps(list(reasons)),
                    json.dumps(list(recipient_hashes)),
                    amount_msat,
                    llm,
                ),
            )
        )

    async def recent(self, limit: int = 100) -> list[dict[str, Any]]:
        def go(conn: Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                "SELECT created_at, service, channel, verdict, reasons, recipient_hashes,"
                " amount_msat, llm FROM screenings ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [
                {
                    "created_at": int(r[0]),
                    "service": r[1],
                    "channel": r[2],
                    "verdict": r[3],
                    "reasons": json.loads(r[4]),
                    "recipient_hashes": json.loads(r[5]),
                    "amount_msat": r[6],
                    "llm": r[7],
                }
                for r in rows
            ]

        return await self._db.run_sync(go)
