"""The ledger: what was received, earned, refunded, held and is still open, and the
operator's figures. Read-only views over payments, refunds and holds.

The equation, to the msat, in total and for every day (a payment's day is the UTC day it
was paid; its refunds count on that day too, so each day balances on its own):

    received = earned + refunded + held + open

- received: every settled or accepted payment (paid, serving, spent, refunded); a
  canceled hold invoice never counts, its HTLCs went back to the payer (shown apart);
- held: calls in flight (serving: spent, neither answered nor refunded yet) and LND hold
  invoices whose call is done but whose settle is not recorded yet: received, not yet
  the node's;
- open: paid and not yet used (the payer may still call, or ask for a refund; an
  accepted hold invoice not used yet is open too: it is canceled if never used);
- refunded: every refund link not expired (open, claiming or paid out): owed or given
  back; an expired link's money stays earned;
- earned: the rest, what the node keeps.

Payment sessions (store/sessions.py): a deposit is a payment (received on the day its
session opened, which every deposit of the session counts on, so each day balances).
Until a session's refund is decided its balance is held (the payer's money, drawn on by
calls), and so are its calls in flight (debited, not answered yet); a closed session's
refund is refunded (owed or paid back); what its calls spent is earned.

Refunds are also broken down by state (open, claiming, paid, expired) with the routing
fees the node paid on the payouts it made (outside the equation: fees are the node's
cost, not the payer's money). ``payout_fees_msat`` sums every payout's fee (refund
links, deposits' Lightning-address refunds, session balances), each as the node reported
it when the payout succeeded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from satsgate.store.ecash import ecash_figures
from satsgate.store.engine import Engine
from satsgate.store.sql import Connection, snapshot

# Held: paid, no longer the payer's to use, not yet the node's: a call in flight
# (serving: spent, neither answered nor refunded yet), or an LND hold invoice whose call
# is done but whose settle is not recorded as done.
_HELD = (
    "(p.status = 'serving' OR (p.mode = 'hold' AND p.status IN ('spent', 'refunded')"
    " AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.payment_hash = p.payment_hash"
    " AND h.decision = 'settled')))"
)
T = TypeVar("T")
_REFUND_STATES = ("open", "claiming", "paid", "expired")
_DAY = 86400


def _payment_figures(c: Connection, group: str) -> dict[Any, dict[str, int]]:
    rows = c.execute(
        f"SELECT {group},"
        " COALESCE(SUM(CASE WHEN p.status IN ('paid', 'serving', 'spent', 'refunded')"
        "   THEN p.amount_msat END), 0),"
        f" COALESCE(SUM(CASE WHEN {_HELD} THEN p.amount_msat END), 0),"
        " COALESCE(SUM(CASE WHEN p.status = 'paid' THEN p.amount_msat END), 0),"
        " COUNT(CASE WHEN p.status IN ('paid', 'serving', 'spent', 'refunded') THEN 1 END),"
        " COALESCE(SUM(CASE WHEN p.status = 'canceled' THEN p.amount_msat END), 0),"
        " COUNT(CASE WHEN p.status = 'canceled' THEN 1 END)"
        f" FROM payments p WHERE p.status != 'unpaid' GROUP BY {group}"
    ).fetchall()
    return {
        row[0]: {
            "received_msat": int(row[1]),
            "held_msat": int(row[2]),
            "open_msat": int(row[3]),
            "payments": int(row[4]),
            "canceled_holds_msat": int(row[5]),
            "canceled_holds": int(row[6]),
        }
        for row in rows
    }


# A payment's day: the day it was paid, except a session's deposits, which all count on
# the day the session opened (its balance and refund are that day's too).
_PAYMENT_DAY = (
    "COALESCE((SELECT s.created_at FROM session_deposits d JOIN sessions s"
    " ON s.session_id = d.session_id WHERE d.payment_hash = p.payment_hash),"
    " p.paid_at, p.created_at)"
)


def _session_figures(c: Connection, group: str) -> dict[Any, dict[str, int]]:
    rows = c.execute(
        f"SELECT {group},"
        " COALESCE(SUM(CASE WHEN s.refund_msat IS NULL"
        "   THEN s.deposit_msat - s.spent_msat + s.held_msat END), 0),"
        " COALESCE(SUM(CASE WHEN s.payout_status != 'skipped' THEN s.refund_msat END), 0),"
        " COALESCE(SUM(CASE WHEN s.payout_status = 'succeeded' THEN s.refund_msat END), 0),"
        " COALESCE(SUM(s.payout_fee_msat), 0),"
        " COUNT(CASE WHEN s.status = 'open' THEN 1 END), COUNT(*)"
        f" FROM sessions s GROUP BY {group}"
    ).fetchall()
    return {
        row[0]: {
            "session_balances_msat": int(row[1]),
            "session_refunds_msat": int(row[2]),
            "session_refunds_paid_msat": int(row[3]),
            "session_payout_fees_msat": int(row[4]),
            "sessions_open": int(row[5]),
            "sessions": int(row[6]),
        }
        for row in rows
    }


_NO_SESSIONS = {
    "session_balances_msat": 0,
    "session_refunds_msat": 0,
    "session_refunds_paid_msat": 0,
    "session_payout_fees_msat": 0,
    "sessions_open": 0,
    "sessions": 0,
}


def _refund_figures(c: Connection, group: str) -> dict[Any, dict[str, int]]:
    states = "".join(
        f", COALESCE(SUM(CASE WHEN r.status = '{s}' THEN r.amount_msat END), 0),"
        f" COUNT(CASE WHEN r.status = '{s}' THEN 1 END)"
        for s in _REFUND_STATES
    )
    rows = c.execute(
        f"SELECT {group}{states}, COALESCE(SUM(r.payout_fee_msat), 0)"
        " FROM refunds r JOIN payments p ON p.payment_id = r.payment_id"
        f" GROUP BY {group}"
    ).fetchall()
    out: dict[Any, dict[str, int]] = {}
    for row in rows:
        figures: dict[str, int] = {}
        for i, state in enumerate(_REFUND_STATES):
            figures[f"refunds_{state}_msat"] = int(row[1 + 2 * i])
            figures[f"refunds_{state}"] = int(row[2 + 2 * i])
        figures["refund_fees_msat"] = int(row[-1])
        out[row[0]] = figures
    return out


def _combine(
    payments: dict[str, int], refunds: dict[str, int], sessions: dict[str, int] | None = None
) -> dict[str, int]:
    sessions = sessions or _NO_SESSIONS
    refunds = refunds or {
        **{f"refunds_{s}_msat": 0 for s in _REFUND_STATES},
        **{f"refunds_{s}": 0 for s in _REFUND_STATES},
        "refund_fees_msat": 0,
    }
    refunded = sum(refunds[f"refunds_{s}_msat"] for s in ("open", "claiming", "paid"))
    refunded += sessions["session_refunds_msat"]
    received = payments.get("received_msat", 0)
    held, open_ = payments.get("held_msat", 0), payments.get("open_msat", 0)
    held += sessions["session_balances_msat"]
    return {
        "received_msat": received,
        "earned_msat": received - refunded - held - open_,
        # The routing fees of every payout the node made (refund links, deposits' refunds
        # to a Lightning address, session balances): the operator's cost, outside the
        # equation (what the payer got is the refund; the fee went to the route).
        "payout_fees_msat": refunds["refund_fees_msat"] + sessions["session_payout_fees_msat"],
        "refunded_msat": refunded,
        "held_msat": held,
        "open_msat": open_,
        "refunds_paid_out_msat": refunds["refunds_paid_msat"],
        "payments": payments.get("payments", 0),
        "canceled_holds": payments.get("canceled_holds", 0),
        "canceled_holds_msat": payments.get("canceled_holds_msat", 0),
        **refunds,
        **sessions,
    }


def _totals(c: Connection) -> dict[str, int]:
    payments = _payment_figures(c, "1").get(1, {})
    refunds = _refund_figures(c, "1").get(1, {})
    return _combine(payments, refunds, _session_figures(c, "1").get(1))


def _per_day(c: Connection) -> list[dict[str, Any]]:
    day = f"({_PAYMENT_DAY} / {_DAY}) * {_DAY}"
    payments = _payment_figures(c, day)
    refunds = _refund_figures(c, day)
    sessions = _session_figures(c, f"(s.created_at / {_DAY}) * {_DAY}")
    days = sorted(set(payments) | set(refunds) | set(sessions))
    return [
        {
            "day": time.strftime("%Y-%m-%d", time.gmtime(int(d))),
            **_combine(payments.get(d, {}), refunds.get(d, {}), sessions.get(d)),
        }
        for d in days
    ]


def _calls_per_service(c: Connection) -> list[dict[str, Any]]:
    rows = c.execute(
        "SELECT p.service, COUNT(*), COALESCE(SUM(p.amount_msat), 0),"
        " (SELECT COUNT(*) FROM refunds r JOIN payments q ON q.payment_id = r.payment_id"
        "  WHERE q.service = p.service)"
        " FROM payments p WHERE p.status IN ('serving', 'spent', 'refunded', 'canceled')"
        " AND p.mode != 'deposit' GROUP BY p.service ORDER BY COUNT(*) DESC, p.service"
    ).fetchall()
    return [
        {"service": str(r[0]), "calls": int(r[1]), "paid_msat": int(r[2]), "refunds": int(r[3])}
        for r in rows
    ]


def _refunds_by_cause(c: Connection) -> list[dict[str, Any]]:
    rows = c.execute(
        "SELECT COALESCE(NULLIF(substr(reason, 1, 120), ''), '(no reason)') AS cause,"
        " COUNT(*), COALESCE(SUM(amount_msat), 0) FROM refunds"
        " GROUP BY cause ORDER BY COUNT(*) DESC, cause LIMIT 50"
    ).fetchall()
    return [{"cause": str(r[0]), "refunds": int(r[1]), "amount_msat": int(r[2])} for r in rows]


def _deposits(c: Connection) -> list[dict[str, Any]]:
    """Deposit settlements (satsgate/payouts/deposits.py) by service and payout state: the
    deposits, what was billed and what was refunded (the refunds are counted above)."""
    rows = c.execute(
        "SELECT service, payout_state, COUNT(*), COALESCE(SUM(deposit_msat), 0),"
        " COALESCE(SUM(used_msat), 0), COALESCE(SUM(refund_msat), 0)"
        " FROM deposit_settlements GROUP BY service, payout_state ORDER BY service, payout_state"
    ).fetchall()
    return [
        {
            "service": str(r[0]),
            "payout_state": str(r[1]),
            "settlements": int(r[2]),
            "deposit_msat": int(r[3]),
            "billed_msat": int(r[4]),
            "refunded_msat": int(r[5]),
        }
        for r in rows
    ]


def _snapshot(fn: Callable[[Connection], T]) -> Callable[[Connection], T]:
    """Run ``fn`` in one read transaction: its several SELECTs see one state of the
    database (WAL), so the figures balance even while payments move."""

    def go(c: Connection) -> T:
        with snapshot(c):
            return fn(c)

    return go


class LedgerRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def totals(self) -> dict[str, int]:
        """received = earned + refunded + held + open, always (see the module)."""
        return await self._db.run_sync(_snapshot(_totals))

    async def report(self) -> dict[str, Any]:
        """The operator's ledger: totals, per day, calls per service, refunds by cause."""

        def go(c: Connection) -> dict[str, Any]:
            return {
                "totals": _totals(c),
                "per_day": _per_day(c),
                "calls_per_service": _calls_per_service(c),
                "refunds_by_cause": _refunds_by_cause(c),
                "deposits": _deposits(c),
                "ecash": ecash_figures(c),  # Cashu: tokens taken, change, refunds, melts
            }

        return await self._db.run_sync(_snapshot(go))

    async def stats(self, now: float | None = None) -> dict[str, int]:
        """Figures for `satsgate-status` (operator-only)."""
        t = time.time() if now is None else now
        day_start = int(t - t % 86400)

        def go(c: Connection) -> dict[str, int]:
            paid_today = c.execute(
                "SELECT COUNT(*) FROM payments WHERE paid_at >= ?", (day_start,)
            ).fetchone()[0]
            ledger = _totals(c)
            refunds_open = c.execute(
                "SELECT COUNT(*), COALESCE(SUM(amount_msat), 0) FROM refunds"
                " WHERE status IN ('open', 'claiming')"
            ).fetchone()
            return {
                "payments_today": int(paid_today),
                "earned_sats": ledger["earned_msat"] // 1000,
                "refunds_open": int(refunds_open[0]),
                "refunds_open_sats": int(refunds_open[1]) // 1000,
            }

        return await self._db.run_sync(go)
