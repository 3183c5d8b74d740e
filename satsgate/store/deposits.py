"""Deposit settlements: a deposit payment billed for what was used, the rest refunded once.

The settlement is one transaction (:meth:`DepositRepository.settle`): the row keyed by
the payment (a second settlement finds it and changes nothing), the refund row for the
unused part (never more than the payment's refunds leave) and the payment's move from
``serving`` to ``spent``. The payout of that refund to a Lightning address then moves
``payout_state`` pending -> paying (one conditional UPDATE: one payer wins) -> paid, or
-> fallback (the refund stays an LNURL-withdraw link for the payer to claim).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.refunds import _insert_refund
from satsgate.store.rows import Refund
from satsgate.store.sql import Connection, transaction

# payout_state values
NONE = "none"  # nothing was left to refund
WITHDRAW = "withdraw"  # the refund is an LNURL-withdraw link for the payer to claim
PENDING = "pending"  # to be paid to the refund address
PAYING = "paying"  # a payout to the refund address is under way (or its outcome unknown)
PAID = "paid"  # paid to the refund address
FALLBACK = "fallback"  # the payout to the address failed: the link is the payer's to claim

_COLUMNS = (
    "payment_id",
    "service",
    "deposit_msat",
    "used_msat",
    "refund_msat",
    "refund_id",
    "refund_address",
    "payout_state",
    "payout_error",
    "reason",
    "created_at",
    "updated_at",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM deposit_settlements WHERE "


@dataclass(frozen=True)
class DepositRow:
    payment_id: str
    service: str
    deposit_msat: int
    used_msat: int
    refund_msat: int
    refund_id: str | None
    refund_address: str | None
    payout_state: str
    payout_error: str | None
    reason: str
    created_at: int
    updated_at: int


def _rows(conn: Connection, clause: str, args: tuple[Any, ...]) -> list[DepositRow]:
    return [DepositRow(*row) for row in conn.execute(_SELECT + clause, args).fetchall()]


class DepositRepository:
    """Every method runs on the store thread: settlements are off the hot paths."""

    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        self._instance_id = instance_id  # stamped on a payout it starts (``paying_by``)

    async def settle(
        self,
        payment_id: str,
        used_msat: int,
        refund: Refund,
        refund_address: str | None,
        reason: str,
        now: int,
    ) -> tuple[DepositRow | None, bool]:
        """Settle the deposit once: (the settlement, True) when this call made it,
        (the earlier one, False) when the payment was settled before, (None, False) when
        the payment is unknown or was never spent. The deposit is what the payment still
        holds (its amount less earlier refunds, e.g. the gate's of an overpayment);
        ``used_msat`` is capped to it; ``refund`` is the link for the rest (its amount
        set here); no refund row is written when nothing is left."""

        def go(conn: Connection) -> tuple[DepositRow | None, bool]:
            with transaction(conn):
                earlier = _rows(conn, "payment_id = ?", (payment_id,))
                if earlier:
                    return earlier[0], False
                row = conn.execute(
                    "SELECT p.service, p.amount_msat,"
                    " p.amount_msat - COALESCE(SUM(r.amount_msat), 0) FROM payments p"
                    " LEFT JOIN refunds r ON r.payment_id = p.payment_id"
                    " AND r.status != 'expired'"
                    " WHERE p.payment_id = ? AND p.status IN ('serving', 'spent')"
                    " GROUP BY p.payment_id, p.service, p.amount_msat",
                    (payment_id,),
                ).fetchone()
                if row is None:
                    return None, False
                # The deposit is what the payment still holds: an earlier refund (the
                # gate's refund of an overpayment) is not the call's to bill or refund.
                service, deposit_msat = str(row[0]), max(0, int(row[2]))
                used = min(max(0, used_msat), deposit_msat)
                refund_msat = deposit_msat - used
                refund_id: str | None = None
                state = NONE
                if refund_msat > 0:
                    _insert_refund(conn, dataclasses.replace(refund, amount_msat=refund_msat))
                    refund_id = refund.refund_id
                    state = PENDING if refund_address else WITHDRAW
                settled = DepositRow(
                    payment_id,
                    service,
                    deposit_msat,
                    used,
                    refund_msat,
                    refund_id,
                    refund_address,
                    state,
                    None,
                    reason[:500],
                    now,
                    now,
                )
                conn.execute(
                    f"INSERT INTO deposit_settlements ({', '.join(_COLUMNS)})"
                    f" VALUES ({', '.join('?' * len(_COLUMNS))})",
                    tuple(settled.__dict__[c] for c in _COLUMNS),
                )
                conn.execute(
                    "UPDATE payments SET status = 'spent'"
                    " WHERE payment_id = ? AND status = 'serving'",
                    (payment_id,),
                )
                return settled, True

        return await self._db.run_sync(go)

    async def get(self, payment_id: str) -> DepositRow | None:
        rows = await self._db.run_sync(lambda conn: _rows(conn, "payment_id = ?", (payment_id,)))
        return rows[0] if rows else None

    async def move(
        self, payment_id: str, from_states: tuple[str, ...], to: str, error: str | None, now: int
    ) -> bool:
        """payout_state from one of ``from_states`` to ``to``, once (conditional UPDATE);
        a move to paying records this instance as the one paying."""
        marks = ", ".join("?" * len(from_states))
        paying_by = self._instance_id if to == PAYING else None
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE deposit_settlements SET payout_state = ?, payout_error = ?,"
                " updated_at = ?, paying_by = COALESCE(?, paying_by)"
                f" WHERE payment_id = ? AND payout_state IN ({marks})",
                (to, None if error is None else error[:500], now, paying_by, payment_id,
                 *from_states),
            )
        )  # fmt: skip
        return cur.rowcount == 1

    async def retake(self, payment_id: str, gone: str, now: int) -> bool:
        """paying -> pending for a payout the gone instance ``gone`` had under way and
        whose refund is still unclaimed: True for the one instance that takes it."""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE deposit_settlements SET payout_state = ?, updated_at = ?"
                " WHERE payment_id = ? AND payout_state = ? AND paying_by = ?",
                (PENDING, now, payment_id, PAYING, gone),
            )
        )
        return cur.rowcount == 1

    async def in_states(self, states: tuple[str, ...]) -> list[DepositRow]:
        marks = ", ".join("?" * len(states))
        return await self._db.run_sync(
            lambda conn: _rows(conn, f"payout_state IN ({marks})", states)
        )

    async def to_follow(self) -> list[DepositRow]:
        """Payouts to follow up here: pending ones, and those this instance is paying."""
        return await self._db.run_sync(
            lambda conn: _rows(
                conn,
                "payout_state = ? OR (payout_state = ? AND paying_by = ?)",
                (PENDING, PAYING, self._instance_id),
            )
        )

    async def paying_of(self, instance_id: str) -> list[DepositRow]:
        """Payouts the instance ``instance_id`` had under way."""
        return await self._db.run_sync(
            lambda conn: _rows(conn, "payout_state = ? AND paying_by = ?", (PAYING, instance_id))
        )
