"""Hold invoices: the preimage satsgate keeps for each, and the decision taken on it.

A decision is recorded before the node is told (``settling``/``canceling``), by one
conditional UPDATE from undecided, so a settle and a cancel of one hold invoice can
never both be chosen; a restart finds the recorded decision and finishes it. Canceling
also moves the payment to ``canceled`` (from paid, serving or spent) in the same
transaction: the ledger never counts a canceled hold as received.
"""

from __future__ import annotations

from typing import NamedTuple

from satsgate.store.engine import Engine
from satsgate.store.payments import _PAYMENT_COLUMNS, _payment_of
from satsgate.store.rows import Payment
from satsgate.store.sql import Connection

_OPEN = "h.decision IS NULL OR h.decision IN ('settling', 'canceling')"


class OpenHold(NamedTuple):
    """A hold payment whose decision is not finished."""

    payment: Payment
    decision: str | None  # None, or 'settling' / 'canceling' recorded and not yet told
    served_by: str | None  # the instance whose call spent it (None: not spent)


class HoldRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def insert(self, payment: Payment, preimage: str) -> None:
        """Record a hold invoice's payment and its preimage together."""
        values = [getattr(payment, c) for c in _PAYMENT_COLUMNS]
        values[_PAYMENT_COLUMNS.index("status")] = str(payment.status)

        def go(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO holds (payment_hash, preimage) VALUES (?, ?)",
                (payment.payment_hash, preimage),
            )
            conn.execute(
                f"INSERT INTO payments ({', '.join(_PAYMENT_COLUMNS)})"
                f" VALUES ({', '.join('?' * len(_PAYMENT_COLUMNS))})",
                values,
            )

        await self._db.run_in_transaction(go)

    async def preimage(self, payment_hash: str) -> str | None:
        row = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT preimage FROM holds WHERE payment_hash = ?", (payment_hash,)
            ).fetchone()
        )
        return None if row is None else str(row[0])

    async def decision(self, payment_hash: str) -> str | None:
        row = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT decision FROM holds WHERE payment_hash = ?", (payment_hash,)
            ).fetchone()
        )
        return None if row is None or row[0] is None else str(row[0])

    async def choose_settle(self, payment_hash: str, now: int) -> bool:
        """undecided -> settling (only a spent payment, or one whose call is being
        answered: its call succeeded)."""

        def go(conn: Connection) -> bool:
            cur = conn.execute(
                "UPDATE holds SET decision = 'settling', decided_at = ?"
                " WHERE payment_hash = ? AND decision IS NULL AND EXISTS (SELECT 1 FROM"
                " payments p WHERE p.payment_hash = holds.payment_hash"
                " AND p.status IN ('serving', 'spent'))",
                (now, payment_hash),
            )
            return cur.rowcount == 1

        return await self._db.run_in_transaction(go)

    async def choose_cancel(
        self, payment_hash: str, now: int, final: str = "canceling", *, unused: bool = False
    ) -> bool:
        """undecided -> canceling, and the payment paid/spent -> canceled, in one
        transaction. ``expired`` (never paid) leaves the unpaid payment as it is: it
        expires and is pruned like any other. ``unused``: only while the payment is still
        paid, never spent (a call that spent it meanwhile runs on, and its outcome decides)."""

        def go(conn: Connection) -> bool:
            unspent = (
                " AND EXISTS (SELECT 1 FROM payments WHERE payment_hash = ? AND status = 'paid')"
                if unused
                else ""
            )
            cur = conn.execute(
                "UPDATE holds SET decision = ?, decided_at = ?"
                " WHERE payment_hash = ? AND decision IS NULL" + unspent,
                (final, now, payment_hash, *((payment_hash,) if unused else ())),
            )
            if cur.rowcount != 1:
                return False
            if final != "expired":
                conn.execute(
                    "UPDATE payments SET status = 'canceled' WHERE payment_hash = ?"
                    " AND status IN ('paid', 'serving', 'spent')",
                    (payment_hash,),
                )
            return True

        return await self._db.run_in_transaction(go)

    async def done(self, payment_hash: str, decision: str, now: int) -> None:
        """settling -> settled, canceling -> canceled: the node did it."""
        await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE holds SET decision = ?, decided_at = ? WHERE payment_hash = ?"
                " AND decision = ?",
                (decision, now, payment_hash, "settling" if decision == "settled" else "canceling"),
            )
        )

    async def open(self) -> list[OpenHold]:
        """Every hold payment whose decision is not finished."""

        def go(conn: Connection) -> list[OpenHold]:
            columns = ", ".join(f"p.{c}" for c in _PAYMENT_COLUMNS)
            rows = conn.execute(
                f"SELECT {columns}, h.decision, p.served_by FROM holds h JOIN payments p"
                f" ON p.payment_hash = h.payment_hash WHERE {_OPEN}"
            ).fetchall()
            return [OpenHold(_payment_of(row[:-2]), row[-2], row[-1]) for row in rows]

        return await self._db.run_sync(go)
