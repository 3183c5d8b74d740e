"""receive-fax: inbound fax numbers leased to payments, and the faxes received on them.

A number is leased to one payment at a time: a lease is one INSERT inside the
transaction that checked no other lease holds the number (nor held it within the reuse
gap, so a late fax meant for the previous payer never reaches the next one). A received
fax is keyed by the upstream's fax id: a webhook delivered twice stores it once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from satsgate.store.engine import Database


@dataclass(frozen=True)
class FaxLease:
    inbox_id: str
    payment_id: str
    number: str
    forward_email: str | None
    created_at: int
    expires_at: int


@dataclass(frozen=True)
class ReceivedFax:
    fax_id: str
    inbox_id: str
    sender: str  # "" when withheld, or deleted by retention
    pages: int | None
    file_name: str | None  # None once retention deleted the document (or none was fetched)
    status: str  # "received" | "unavailable" (the document could not be fetched)
    received_at: int


_LEASE = "inbox_id, payment_id, number, forward_email, created_at, expires_at"
_FAX = "fax_id, inbox_id, sender, pages, file_name, status, received_at"


def _lease(row: Sequence[object]) -> FaxLease:
    return FaxLease(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        None if row[3] is None else str(row[3]),
        int(str(row[4])),
        int(str(row[5])),
    )


def _fax(row: Sequence[object]) -> ReceivedFax:
    return ReceivedFax(
        str(row[0]),
        str(row[1]),
        "" if row[2] is None else str(row[2]),
        None if row[3] is None else int(str(row[3])),
        None if row[4] is None else str(row[4]),
        str(row[5]),
        int(str(row[6])),
    )


class FaxRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def lease(
        self,
        *,
        inbox_id: str,
        payment_id: str,
        candidates: Sequence[str],
        forward_email: str | None,
        now: int,
        period_s: int,
        reuse_gap_s: int,
    ) -> FaxLease | None:
        """Lease the first of ``candidates`` no lease holds now or held within
        ``reuse_gap_s``; the payment's existing lease when it has one (a handler run
        again); None when every candidate is taken."""

        def go(conn: sqlite3.Connection) -> FaxLease | None:
            row = conn.execute(
                f"SELECT {_LEASE} FROM fax_leases WHERE payment_id = ?", (payment_id,)
            ).fetchone()
            if row is not None:
                return _lease(row)
            for number in candidates:
                busy = conn.execute(
                    "SELECT 1 FROM fax_leases WHERE number = ? AND expires_at > ?",
                    (number, now - reuse_gap_s),
                ).fetchone()
                if busy is None:
                    lease = FaxLease(
                        inbox_id, payment_id, number, forward_email, now, now + period_s
                    )
                    conn.execute(
                        f"INSERT INTO fax_leases ({_LEASE}) VALUES (?, ?, ?, ?, ?, ?)",
                        (inbox_id, payment_id, number, forward_email, now, now + period_s),
                    )
                    return lease
            return None

        return await self._db.run_in_transaction(go)

    async def get_lease(self, inbox_id: str) -> FaxLease | None:
        def go(conn: sqlite3.Connection) -> FaxLease | None:
            row = conn.execute(
                f"SELECT {_LEASE} FROM fax_leases WHERE inbox_id = ?", (inbox_id,)
            ).fetchone()
            return None if row is None else _lease(row)

        return await self._db.run_sync(go)

    async def lease_at(self, number: str, at: int) -> FaxLease | None:
        """The lease that held ``number`` at time ``at``."""

        def go(conn: sqlite3.Connection) -> FaxLease | None:
            row = conn.execute(
                f"SELECT {_LEASE} FROM fax_leases WHERE number = ? AND created_at <= ? "
                "AND expires_at > ? ORDER BY created_at DESC LIMIT 1",
                (number, at, at),
            ).fetchone()
            return None if row is None else _lease(row)

        return await self._db.run_sync(go)

    async def add_received(self, fax: ReceivedFax, upstream_id: str) -> bool:
        """Record a received fax; False when this upstream fax is already recorded."""

        def go(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                f"INSERT OR IGNORE INTO fax_received ({_FAX}, upstream_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fax.fax_id,
                    fax.inbox_id,
                    fax.sender,
                    fax.pages,
                    fax.file_name,
                    fax.status,
                    fax.received_at,
                    upstream_id,
                ),
            )
            return cur.rowcount == 1

        return await self._db.run_in_transaction(go)

    async def knows(self, upstream_id: str) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT 1 FROM fax_received WHERE upstream_id = ?", (upstream_id,)
            ).fetchone()
            return row is not None

        return await self._db.run_sync(go)

    async def received(self, inbox_id: str) -> list[ReceivedFax]:
        def go(conn: sqlite3.Connection) -> list[ReceivedFax]:
            rows = conn.execute(
                f"SELECT {_FAX} FROM fax_received WHERE inbox_id = ? ORDER BY received_at, fax_id",
                (inbox_id,),
            ).fetchall()
            return [_fax(r) for r in rows]

        return await self._db.run_sync(go)

    async def expire_documents(self, received_before: int) -> list[str]:
        """Forget the documents and senders of faxes received before ``received_before``
        (and the forwarding address of leases ended by then); the file names to delete."""

        def go(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT file_name FROM fax_received WHERE received_at < ? "
                "AND (file_name IS NOT NULL OR sender IS NOT NULL)",
                (received_before,),
            ).fetchall()
            conn.execute(
                "UPDATE fax_received SET file_name = NULL, sender = NULL WHERE received_at < ?",
                (received_before,),
            )
            conn.execute(
                "UPDATE fax_leases SET forward_email = NULL WHERE expires_at < ?",
                (received_before,),
            )
            return [str(r[0]) for r in rows if r[0] is not None]

        return await self._db.run_in_transaction(go)

    async def prune(self, ended_before: int) -> int:
        """Delete leases that ended before ``ended_before``, with their faxes' rows."""

        def go(conn: sqlite3.Connection) -> int:
            conn.execute(
                "DELETE FROM fax_received WHERE inbox_id IN "
                "(SELECT inbox_id FROM fax_leases WHERE expires_at < ?)",
                (ended_before,),
            )
            cur = conn.execute("DELETE FROM fax_leases WHERE expires_at < ?", (ended_before,))
            return int(cur.rowcount)

        return await self._db.run_in_transaction(go)
