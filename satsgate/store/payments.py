"""Payments: one invoice and the one call it pays for.

Every change of a payment's status is one conditional UPDATE whose rowcount (or
RETURNING row) is checked: unpaid -> paid (:meth:`PaymentRepository.mark_paid`),
paid -> spent (:meth:`PaymentRepository.spend`, :meth:`PaymentRepository.spend_token`),
paid -> refunded (``RefundRepository.refund_unspent``). Spend and refund both start
from ``status = 'paid'``, so of a spend and a refund of one payment exactly one wins.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from satsgate.store.cursors import UPSERT_CURSOR
from satsgate.store.engine import Database
from satsgate.store.models import Payment, PaymentStatus
from satsgate.store.sql import transaction

# The payments table's columns are Payment's fields, in order: rows map positionally.
_PAYMENT_COLUMNS = Payment._fields
_STATUS_INDEX = _PAYMENT_COLUMNS.index("status")
_INSERT_PAYMENT = (
    f"INSERT INTO payments ({', '.join(_PAYMENT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(_PAYMENT_COLUMNS))})"
)
_SELECT_PAYMENT = f"SELECT {', '.join(_PAYMENT_COLUMNS)} FROM payments WHERE "
_SPEND = (
    "UPDATE payments SET status = 'spent', spent_at = ?"
    " WHERE payment_id = ? AND status = 'paid'"
)
_SPEND_TOKEN = (
    "UPDATE payments SET status = 'spent', spent_at = ?"
    " WHERE payment_hash = ? AND token_id = ? AND service = ? AND status = 'paid'"
    f" AND amount_msat >= ? RETURNING {', '.join(_PAYMENT_COLUMNS)}"
)
_MARK_PAID = (
    "UPDATE payments SET status = 'paid', paid_at = ?, received_msat = ?"
    " WHERE payment_hash = ? AND status = 'unpaid' AND amount_msat <= ?"
)

_PAYMENT_STATUSES = {str(status): status for status in PaymentStatus}


def _payment_of(row: Sequence[Any]) -> Payment:
    values = list(row)  # in Payment's field order (see _PAYMENT_COLUMNS)
    values[_STATUS_INDEX] = _PAYMENT_STATUSES[values[_STATUS_INDEX]]
    return Payment._make(values)


def _payment_where(conn: sqlite3.Connection, clause: str, arg: str) -> Payment | None:
    row = conn.execute(_SELECT_PAYMENT + clause, (arg,)).fetchone()
    return None if row is None else _payment_of(row)


class PaymentRepository:
    """The hot paths' point reads and one-statement writes run on the loop's connection
    (see :class:`satsgate.store.engine.Database`); settlement and pruning on the store
    thread."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def insert(self, payment: Payment) -> None:
        values = [getattr(payment, c) for c in _PAYMENT_COLUMNS]
        values[_STATUS_INDEX] = str(payment.status)
        await self._db.write_one(_INSERT_PAYMENT, values)

    async def get(self, payment_id: str) -> Payment | None:
        return await self._db.read(lambda conn: _payment_where(conn, "payment_id = ?", payment_id))

    async def get_by_hash(self, payment_hash: str) -> Payment | None:
        return await self._db.read(
            lambda conn: _payment_where(conn, "payment_hash = ?", payment_hash)
        )

    async def mark_paid(
        self,
        payment_hash: str,
        received_msat: int,
        paid_at: int,
        cursor: tuple[str, int] | None = None,
    ) -> bool:
        """unpaid -> paid, and (atomically with it) persist the settlement cursor.

        Returns False when the payment was already paid (or is not ours): settling
        twice is harmless. A settlement for less than the invoice amount is not
        accepted as payment.
        """

        def go(conn: sqlite3.Connection) -> bool:
            with transaction(conn):
                cur = conn.execute(
                    _MARK_PAID, (paid_at, received_msat, payment_hash, received_msat)
                )
                if cursor is not None:
                    conn.execute(UPSERT_CURSOR, cursor)
                return cur.rowcount == 1

        return await self._db.run_sync(go)

    async def spend(self, payment_id: str, now: int) -> bool:
        """paid -> spent. The one rule of pay-per-call: exactly one caller gets True."""
        return await self._db.write_one(_SPEND, (now, payment_id)) == 1

    async def spend_token(
        self, payment_hash: str, token_id: str, service: str, price_msat: int, now: int
    ) -> Payment | None:
        """paid -> spent for the payment of this macaroon token, if it covers ``price_msat``;
        the spent row, or None when no such paid payment exists (nothing changed).

        The same one conditional UPDATE as :meth:`spend`, reading the row as it writes.
        """

        def run(conn: sqlite3.Connection) -> Payment | None:
            # fetchall: the statement runs to its end (RETURNING rows are all read), so
            # the transaction it is part of can commit.
            rows = conn.execute(_SPEND_TOKEN, (now, payment_hash, token_id, service, price_msat))
            found = rows.fetchall()
            return _payment_of(found[0]) if found else None

        return await self._db.write(run)

    async def prune_unpaid(self, expired_before: int) -> int:
        """Delete payments never paid whose invoice expired before ``expired_before``.

        A 402 costs the caller nothing, so unpaid rows would pile up forever. An
        expired invoice can no longer be paid; the caller keeps a margin of days so
        a settlement that raced the expiry (applied late after downtime) still finds
        its row.
        """
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "DELETE FROM payments WHERE status = 'unpaid' AND expires_at < ?",
                (expired_before,),
            )
        )
        return int(cur.rowcount)
