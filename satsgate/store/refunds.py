"""Refunds: LNURL-withdraw links, each for part or all of one payment.

A refund link moves open -> claiming (one claimer wins, binding its payout invoice)
-> paid, or back to open after a payout that definitely failed; an unclaimed one
expires. What a payment's refunds add up to never exceeds what was paid for it.
"""

from __future__ import annotations

from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.rows import Refund, RefundStatus
from satsgate.store.sql import Connection, is_unique_violation, transaction

_REFUND_COLUMNS = (
    "refund_id",
    "payment_id",
    "amount_msat",
    "k1",
    "status",
    "reason",
    "created_at",
    "expires_at",
    "payout_bolt11",
    "payout_hash",
    "updated_at",
)
_STATUS_INDEX = _REFUND_COLUMNS.index("status")
_INSERT_REFUND = (
    f"INSERT INTO refunds ({', '.join(_REFUND_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(_REFUND_COLUMNS))})"
)


class PayoutInvoiceTaken(Exception):
    """A claim's payout invoice (by payment hash) pays another refund link already."""


def _insert_refund(conn: Connection, refund: Refund) -> None:
    values = [getattr(refund, c) for c in _REFUND_COLUMNS]
    values[_STATUS_INDEX] = str(refund.status)
    conn.execute(_INSERT_REFUND, values)


def _refunds_where(conn: Connection, clause: str, args: tuple[Any, ...]) -> list[Refund]:
    rows = conn.execute(
        f"SELECT {', '.join(_REFUND_COLUMNS)} FROM refunds WHERE {clause}", args
    ).fetchall()
    out = []
    for row in rows:
        data = dict(zip(_REFUND_COLUMNS, row, strict=True))
        data["status"] = RefundStatus(data["status"])
        out.append(Refund(**data))
    return out


class RefundRepository:
    """Every method runs on the store thread: refunds are off the hot paths."""

    def __init__(self, db: Engine) -> None:
        self._db = db

    async def refund_unspent(self, payment_id: str, refund: Refund) -> bool:
        """paid -> refunded and the refund row, in one transaction; False if not paid.

        The race guard between a refund and a use of the same payment: this UPDATE and
        the spend (``PaymentRepository.spend``) are both conditional on ``status =
        'paid'`` and SQLite serializes writers, so exactly one of them changes the row;
        the loser sees rowcount 0 and neither serves nor refunds.
        """

        def go(conn: Connection) -> bool:
            with transaction(conn):
                cur = conn.execute(
                    "UPDATE payments SET status = 'refunded'"
                    " WHERE payment_id = ? AND status = 'paid'",
                    (payment_id,),
                )
                if cur.rowcount != 1:
                    return False
                _insert_refund(conn, refund)
                return True

        return await self._db.run_sync(go)

    async def add_for_spent(self, refund: Refund) -> bool:
        """Insert a refund for a spent, serving (or refunded) payment, never more in total
        than was paid. An expired link can never pay out, so it no longer counts against
        that. A serving payment becomes spent in the same transaction: its refund is its
        call's recorded outcome.

        The check and the INSERT share one transaction (BEGIN IMMEDIATE holds the write
        lock), so two refunds of one payment at once cannot both fit under its amount.
        """

        def go(conn: Connection) -> bool:
            with transaction(conn):
                row = conn.execute(
                    "SELECT p.amount_msat - COALESCE(SUM(r.amount_msat), 0) FROM payments p"
                    " LEFT JOIN refunds r ON r.payment_id = p.payment_id"
                    " AND r.status != 'expired'"
                    " WHERE p.payment_id = ? AND p.status IN ('serving', 'spent', 'refunded')"
                    " GROUP BY p.payment_id, p.amount_msat",
                    (refund.payment_id,),
                ).fetchone()
                if row is None or row[0] is None or row[0] < refund.amount_msat:
                    return False
                _insert_refund(conn, refund)
                conn.execute(
                    "UPDATE payments SET status = 'spent'"
                    " WHERE payment_id = ? AND status = 'serving'",
                    (refund.payment_id,),
                )
                return True

        return await self._db.run_sync(go)

    async def get_by_k1(self, k1: str) -> Refund | None:
        rows = await self._db.run_sync(lambda conn: _refunds_where(conn, "k1 = ?", (k1,)))
        return rows[0] if rows else None

    async def for_payment(self, payment_id: str) -> list[Refund]:
        return await self._db.run_sync(
            lambda conn: _refunds_where(conn, "payment_id = ? ORDER BY created_at", (payment_id,))
        )

    async def in_status(self, status: RefundStatus) -> list[Refund]:
        return await self._db.run_sync(
            lambda conn: _refunds_where(conn, "status = ?", (str(status),))
        )

    async def claim(self, k1: str, bolt11: str, payout_hash: str, now: int) -> bool:
        """open -> claiming, binding the payout invoice. Exactly one claimer wins (False
        for the others). PayoutInvoiceTaken, nothing changed, when another link is being
        paid or was paid with this invoice: the node pays an invoice once, and both links
        would read as paid."""

        def go(conn: Connection) -> bool:
            try:
                cur = conn.execute(
                    "UPDATE refunds SET status = 'claiming', payout_bolt11 = ?, payout_hash = ?,"
                    " updated_at = ? WHERE k1 = ? AND status = 'open' AND expires_at > ?"
                    " AND NOT EXISTS (SELECT 1 FROM refunds AS paid"
                    " WHERE paid.payout_hash = ? AND paid.status = 'paid')",
                    (bolt11, payout_hash, now, k1, now, payout_hash),
                )
            except Exception as exc:
                if is_unique_violation(exc):  # idx_refunds_claiming_payout_hash
                    raise PayoutInvoiceTaken(payout_hash) from None
                raise
            if cur.rowcount == 1:
                return True
            taken = conn.execute(
                "SELECT 1 FROM refunds WHERE payout_hash = ? AND status = 'paid' AND k1 <> ?",
                (payout_hash, k1),
            ).fetchone()
            if taken is not None:
                raise PayoutInvoiceTaken(payout_hash)
            return False

        return await self._db.run_sync(go)

    async def settle_claim(
        self, k1: str, payout_hash: str, outcome: RefundStatus, now: int
    ) -> bool:
        """claiming -> paid, or claiming -> open after a payout that definitely failed: the
        claim that bound ``payout_hash`` only."""
        if outcome not in (RefundStatus.PAID, RefundStatus.OPEN):
            raise ValueError("a claim ends paid, or open again after a definite failure")
        reset = ", payout_bolt11 = NULL, payout_hash = NULL" if outcome is RefundStatus.OPEN else ""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                f"UPDATE refunds SET status = ?, updated_at = ?{reset}"
                " WHERE k1 = ? AND status = 'claiming' AND payout_hash = ?",
                (str(outcome), now, k1, payout_hash),
            )
        )
        return cur.rowcount == 1

    async def expire(self, now: int) -> int:
        """open -> expired for every link past its expiry; how many."""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE refunds SET status = 'expired', updated_at = ?"
                " WHERE status = 'open' AND expires_at <= ?",
                (now, now),
            )
        )
        return int(cur.rowcount)

    async def note_payout(self, k1: str, fee_msat: int | None, error: str | None) -> None:
        """Record what a payout attempt ended with: the routing fee the node paid (on
        success) or the node's reason (on a failure; kept for the operator after the link
        went back to open)."""
        await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE refunds SET payout_fee_msat = COALESCE(?, payout_fee_msat),"
                " payout_error = ? WHERE k1 = ?",
                (fee_msat, error, k1),
            )
        )

    async def payout_problems(self) -> list[dict[str, Any]]:
        """Refunds the operator should look at: claims still under way or unknown, and
        links whose last payout failed (with the node's reason), newest first."""

        def go(conn: Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                "SELECT refund_id, payment_id, amount_msat, status, reason, payout_error,"
                " created_at, expires_at, updated_at FROM refunds"
                " WHERE status = 'claiming' OR (status = 'open' AND payout_error IS NOT NULL)"
                " ORDER BY updated_at DESC LIMIT 200"
            ).fetchall()
            keys = (
                "refund_id",
                "payment_id",
                "amount_msat",
                "status",
                "reason",
                "payout_error",
                "created_at",
                "expires_at",
                "updated_at",
            )
            return [dict(zip(keys, row, strict=True)) for row in rows]

        return await self._db.run_sync(go)

    async def payout_error(self, k1: str) -> str | None:
        row = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT payout_error FROM refunds WHERE k1 = ?", (k1,)
            ).fetchone()
        )
        return None if row is None or row[0] is None else str(row[0])
