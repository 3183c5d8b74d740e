"""E-signature requests: what was sent for signature, how far it got, and the delivery of
its signed copy (satsgate.services.documents.esign_desk follows them).

Every change of state is one conditional UPDATE, so of a webhook, a poll and a status
read arriving together exactly one moves a request on: ``mark_signed`` only from
``pending``; ``claim`` takes a ``signed`` request whose delivery is due (or a
``delivering`` one whose claim ran out: a sender that died) and leases it to one
sender; ``delivered`` and ``delivery_failed`` only from ``delivering``. The customer's
address is cleared in the same UPDATE that ends a request.
"""

from __future__ import annotations

from dataclasses import dataclass

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection

FINAL = ("done", "rejected", "cancelled", "expired", "undeliverable")

_COLUMNS = (
    "request_id, payment_id, provider, envelope_id, status, customer_email, signers_total,"
    " signers_signed, attempts, next_check_at, created_at, updated_at, completed_at,"
    " delivered_at, last_error"
)


@dataclass(frozen=True)
class ESignRecord:
    request_id: str
    payment_id: str
    provider: str  # the operator's provider name that holds the envelope
    envelope_id: str
    status: (
        str  # pending | signed | delivering | done | rejected | cancelled | expired | undeliverable
    )
    customer_email: str | None
    signers_total: int
    signers_signed: int
    attempts: int  # delivery attempts of the signed copy so far
    next_check_at: int
    created_at: int
    updated_at: int
    completed_at: int | None
    delivered_at: int | None
    last_error: str | None

    @property
    def final(self) -> bool:
        return self.status in FINAL


def _record(row: tuple[object, ...] | None) -> ESignRecord | None:
    return None if row is None else ESignRecord(*row)  # type: ignore[arg-type]


class ESignRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def create(
        self,
        *,
        request_id: str,
        payment_id: str,
        provider: str,
        envelope_id: str,
        customer_email: str,
        signers_total: int,
        next_check_at: int,
        now: int,
    ) -> None:
        await self._db.write(
            lambda conn: conn.execute(
                "INSERT INTO esign_requests (request_id, payment_id, provider, envelope_id,"
                " status, customer_email, signers_total, next_check_at, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
                (
                    request_id,
                    payment_id,
                    provider,
                    envelope_id,
                    customer_email,
                    signers_total,
                    next_check_at,
                    now,
                    now,
                ),
            )
        )

    async def get(self, request_id: str) -> ESignRecord | None:
        return await self._db.read(
            lambda conn: _record(
                conn.execute(
                    f"SELECT {_COLUMNS} FROM esign_requests WHERE request_id = ?", (request_id,)
                ).fetchone()
            )
        )

    async def find(self, provider: str, envelope_id: str) -> ESignRecord | None:
        return await self._db.read(
            lambda conn: _record(
                conn.execute(
                    f"SELECT {_COLUMNS} FROM esign_requests WHERE provider = ? AND envelope_id = ?",
                    (provider, envelope_id),
                ).fetchone()
            )
        )

    async def due(self, now: int, limit: int = 50) -> list[ESignRecord]:
        """Requests to look at: pending ones whose check is due, signed ones whose
        delivery is due, and deliveries whose claim ran out."""

        def go(conn: Connection) -> list[ESignRecord]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM esign_requests WHERE status IN"
                " ('pending', 'signed', 'delivering') AND next_check_at <= ?"
                " ORDER BY next_check_at LIMIT ?",
                (now, limit),
            ).fetchall()
            return [r for r in (_record(row) for row in rows) if r is not None]

        return await self._db.run_sync(go)

    async def checked(self, request_id: str, signed: int, next_check_at: int, now: int) -> None:
        """A pending request was looked at: its signers' progress, the next look."""
        await self._db.write(
            lambda conn: conn.execute(
                "UPDATE esign_requests SET signers_signed = ?, next_check_at = ?, updated_at = ?"
                " WHERE request_id = ? AND status = 'pending'",
                (signed, next_check_at, now, request_id),
            )
        )

    async def mark_signed(self, request_id: str, signed: int, now: int) -> bool:
        """pending -> signed (the copy is due now); False when it was not pending."""
        changed = await self._db.write(
            lambda conn: (
                conn.execute(
                    "UPDATE esign_requests SET status = 'signed', completed_at = ?,"
                    " signers_signed = CASE WHEN signers_signed > ? THEN signers_signed"
                    " ELSE ? END, next_check_at = ?, updated_at = ?"
                    " WHERE request_id = ? AND status = 'pending'",
                    (now, signed, signed, now, now, request_id),
                ).rowcount
            )
        )
        return bool(changed)

    async def end(self, request_id: str, status: str, now: int, error: str | None = None) -> bool:
        """pending -> rejected | cancelled | expired, the customer's address cleared."""
        assert status in ("rejected", "cancelled", "expired")
        changed = await self._db.write(
            lambda conn: (
                conn.execute(
                    "UPDATE esign_requests SET status = ?, customer_email = NULL, updated_at = ?,"
                    " last_error = COALESCE(?, last_error)"
                    " WHERE request_id = ? AND status = 'pending'",
                    (status, now, error, request_id),
                ).rowcount
            )
        )
        return bool(changed)

    async def claim(self, request_id: str, lease_s: int, now: int) -> ESignRecord | None:
        """Lease a due delivery to the caller (one sender at a time): signed and due, or
        delivering with its lease run out. None: someone else has it, or it is done."""
        return await self._db.write(
            lambda conn: _record(
                conn.execute(
                    "UPDATE esign_requests SET status = 'delivering', next_check_at = ?,"
                    " attempts = attempts + 1, updated_at = ? WHERE request_id = ? AND"
                    " status IN ('signed', 'delivering') AND next_check_at <= ?"
                    f" RETURNING {_COLUMNS}",
                    (now + lease_s, now, request_id, now),
                ).fetchone()
            )
        )

    async def delivered(self, request_id: str, now: int) -> bool:
        changed = await self._db.write(
            lambda conn: (
                conn.execute(
                    "UPDATE esign_requests SET status = 'done', customer_email = NULL,"
                    " delivered_at = ?, updated_at = ?, last_error = NULL"
                    " WHERE request_id = ? AND status = 'delivering'",
                    (now, now, request_id),
                ).rowcount
            )
        )
        return bool(changed)

    async def delivery_failed(
        self, request_id: str, error: str, retry_at: int | None, now: int
    ) -> None:
        """An attempt failed: retry at ``retry_at``, or give up (undeliverable) when None."""
        await self._db.write(
            lambda conn: conn.execute(
                "UPDATE esign_requests SET"
                " status = CASE WHEN CAST(? AS BIGINT) IS NULL THEN 'undeliverable'"
                " ELSE 'signed' END, customer_email = CASE WHEN CAST(? AS BIGINT) IS NULL"
                " THEN NULL ELSE customer_email END,"
                " next_check_at = COALESCE(?, next_check_at), last_error = ?, updated_at = ?"
                " WHERE request_id = ? AND status = 'delivering'",
                (retry_at, retry_at, retry_at, error[:300], now, request_id),
            )
        )
