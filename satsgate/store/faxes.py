"""Faxes: the faxes sent (send-fax) and followed to their end, inbound fax numbers
leased to payments (receive-fax), and the faxes received on them.

A sent fax is settled once (one conditional UPDATE on ``settled_at``): charged when it
was delivered, refunded when it failed. Its status only moves forward.

A number is leased to one payment at a time: a lease is one INSERT inside the
transaction that checked no other lease holds the number (nor held it within the reuse
gap, so a late fax meant for the previous payer never reaches the next one). A received
fax is keyed by the upstream's fax id: a webhook delivered twice stores it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection


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


@dataclass(frozen=True)
class SentFax:
    fax_id: str
    payment_id: str
    provider: str  # the operator's [providers.NAME] that sent it
    upstream_id: str | None  # the provider's id, once it took the fax
    status: str  # queued | sending | delivered | failed
    pages: int | None
    reason: str | None  # why it failed, in the payer's words
    paid_msat: int
    charged_msat: int | None
    created_at: int
    updated_at: int
    settled_at: int | None

    @property
    def final(self) -> bool:
        return self.status in ("delivered", "failed")


_SEND = (
    "fax_id, payment_id, provider, upstream_id, status, pages, reason, paid_msat, "
    "charged_msat, created_at, updated_at, settled_at"
)
_SEND_RANK = {"queued": 0, "sending": 1, "delivered": 2, "failed": 2}


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _send(row: Sequence[object]) -> SentFax:
    return SentFax(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        None if row[3] is None else str(row[3]),
        str(row[4]),
        _opt_int(row[5]),
        None if row[6] is None else str(row[6]),
        int(str(row[7])),
        _opt_int(row[8]),
        int(str(row[9])),
        int(str(row[10])),
        _opt_int(row[11]),
    )


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
    def __init__(self, db: Engine) -> None:
        self._db = db

    # -- sent faxes ------------------------------------------------------------------------

    async def create_send(self, fax: SentFax) -> SentFax:
        """Record a fax about to be sent; the payment's existing one if it has one (a
        handler run again, e.g. a released hold): a payment sends one fax."""

        def go(conn: Connection) -> SentFax:
            row = conn.execute(
                f"SELECT {_SEND} FROM fax_sends WHERE payment_id = ?", (fax.payment_id,)
            ).fetchone()
            if row is not None:
                return _send(row)
            conn.execute(
                f"INSERT INTO fax_sends ({_SEND}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (fax.fax_id, fax.payment_id, fax.provider, fax.upstream_id, fax.status,
                 fax.pages, fax.reason, fax.paid_msat, fax.charged_msat, fax.created_at,
                 fax.updated_at, fax.settled_at),
            )  # fmt: skip
            return fax

        return await self._db.run_in_transaction(go)

    async def send_for_payment(self, payment_id: str) -> SentFax | None:
        def go(conn: Connection) -> SentFax | None:
            row = conn.execute(f"SELECT {_SEND} FROM fax_sends WHERE payment_id = ?", (payment_id,))
            found = row.fetchone()
            return None if found is None else _send(found)

        return await self._db.run_sync(go)

    async def get_send(self, fax_id: str) -> SentFax | None:
        def go(conn: Connection) -> SentFax | None:
            row = conn.execute(f"SELECT {_SEND} FROM fax_sends WHERE fax_id = ?", (fax_id,))
            found = row.fetchone()
            return None if found is None else _send(found)

        return await self._db.run_sync(go)

    async def update_send(
        self,
        fax_id: str,
        *,
        status: str,
        now: int,
        upstream_id: str | None = None,
        provider: str | None = None,
        pages: int | None = None,
        reason: str | None = None,
    ) -> SentFax | None:
        """Move a fax's status forward (never back, never away from a final one); the
        provider that took it, with its id, once it did."""

        def go(conn: Connection) -> SentFax | None:
            row = conn.execute(f"SELECT {_SEND} FROM fax_sends WHERE fax_id = ?", (fax_id,))
            found = row.fetchone()
            if found is None:
                return None
            fax = _send(found)
            forward = not fax.final and _SEND_RANK[status] >= _SEND_RANK.get(fax.status, 0)
            conn.execute(
                "UPDATE fax_sends SET status = ?, upstream_id = COALESCE(?, upstream_id), "
                "provider = COALESCE(?, provider), pages = COALESCE(?, pages), "
                "reason = COALESCE(?, reason), updated_at = ? WHERE fax_id = ?",
                (status if forward else fax.status, upstream_id, provider, pages,
                 reason if forward else None, now, fax_id),
            )  # fmt: skip
            again = conn.execute(f"SELECT {_SEND} FROM fax_sends WHERE fax_id = ?", (fax_id,))
            return _send(again.fetchone())

        return await self._db.run_in_transaction(go)

    async def settle_send(self, fax_id: str, charged_msat: int, now: int) -> bool:
        """Settle a final fax once; False when it was settled before."""
        changed = await self._db.run_sync(
            lambda conn: (
                conn.execute(
                    "UPDATE fax_sends SET charged_msat = ?, settled_at = ? "
                    "WHERE fax_id = ? AND settled_at IS NULL",
                    (charged_msat, now, fax_id),
                ).rowcount
            )
        )
        return int(changed) == 1

    async def unsettled_sends(self) -> list[SentFax]:
        def go(conn: Connection) -> list[SentFax]:
            rows = conn.execute(f"SELECT {_SEND} FROM fax_sends WHERE settled_at IS NULL")
            return [_send(r) for r in rows.fetchall()]

        return await self._db.run_sync(go)

    # -- inbound numbers -------------------------------------------------------------------

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

        def go(conn: Connection) -> FaxLease | None:
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
        def go(conn: Connection) -> FaxLease | None:
            row = conn.execute(
                f"SELECT {_LEASE} FROM fax_leases WHERE inbox_id = ?", (inbox_id,)
            ).fetchone()
            return None if row is None else _lease(row)

        return await self._db.run_sync(go)

    async def lease_at(self, number: str, at: int) -> FaxLease | None:
        """The lease that held ``number`` at time ``at``."""

        def go(conn: Connection) -> FaxLease | None:
            row = conn.execute(
                f"SELECT {_LEASE} FROM fax_leases WHERE number = ? AND created_at <= ? "
                "AND expires_at > ? ORDER BY created_at DESC LIMIT 1",
                (number, at, at),
            ).fetchone()
            return None if row is None else _lease(row)

        return await self._db.run_sync(go)

    async def add_received(self, fax: ReceivedFax, upstream_id: str) -> bool:
        """Record a received fax; False when this upstream fax is already recorded."""

        def go(conn: Connection) -> bool:
            cur = conn.execute(
                f"INSERT INTO fax_received ({_FAX}, upstream_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
        def go(conn: Connection) -> bool:
            row = conn.execute(
                "SELECT 1 FROM fax_received WHERE upstream_id = ?", (upstream_id,)
            ).fetchone()
            return row is not None

        return await self._db.run_sync(go)

    async def received(self, inbox_id: str) -> list[ReceivedFax]:
        def go(conn: Connection) -> list[ReceivedFax]:
            rows = conn.execute(
                f"SELECT {_FAX} FROM fax_received WHERE inbox_id = ? ORDER BY received_at, fax_id",
                (inbox_id,),
            ).fetchall()
            return [_fax(r) for r in rows]

        return await self._db.run_sync(go)

    async def expire_documents(self, received_before: int) -> list[str]:
        """Forget the documents and senders of faxes received before ``received_before``
        (and the forwarding address of leases ended by then); the file names to delete."""

        def go(conn: Connection) -> list[str]:
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

        def go(conn: Connection) -> int:
            conn.execute(
                "DELETE FROM fax_received WHERE inbox_id IN "
                "(SELECT inbox_id FROM fax_leases WHERE expires_at < ?)",
                (ended_before,),
            )
            cur = conn.execute("DELETE FROM fax_leases WHERE expires_at < ?", (ended_before,))
            return int(cur.rowcount)

        return await self._db.run_in_transaction(go)
