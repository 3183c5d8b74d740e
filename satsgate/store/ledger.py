"""The ledger: what was received, earned, refunded and is still open, and the operator's
figures. Read-only views over payments and refunds."""

from __future__ import annotations

import sqlite3
import time

from satsgate.store.engine import Database


def _totals(c: sqlite3.Connection) -> dict[str, int]:
    received, used, held, open_paid = c.execute(
        "SELECT"
        " COALESCE(SUM(CASE WHEN status NOT IN ('unpaid', 'canceled') THEN amount_msat END), 0),"
        " COALESCE(SUM(CASE WHEN status IN ('spent', 'refunded') THEN amount_msat END), 0),"
        " COALESCE(SUM(CASE WHEN status = 'serving' THEN amount_msat END), 0),"
        " COALESCE(SUM(CASE WHEN status = 'paid' THEN amount_msat END), 0)"
        " FROM payments"
    ).fetchone()
    # Refunds belong to spent or refunded payments (a serving payment's refund moves it
    # to spent in the same transaction); an expired link stays earned.
    refunded, paid_out = c.execute(
        "SELECT COALESCE(SUM(CASE WHEN status != 'expired' THEN amount_msat END), 0),"
        " COALESCE(SUM(CASE WHEN status = 'paid' THEN amount_msat END), 0) FROM refunds"
    ).fetchone()
    return {
        "received_msat": int(received),
        "earned_msat": int(used - refunded),
        "refunded_msat": int(refunded),
        "refunds_paid_out_msat": int(paid_out),
        "held_msat": int(held),
        "open_msat": int(open_paid),
    }


class LedgerRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def totals(self) -> dict[str, int]:
        """received = earned + refunded + held + open, always: held is what calls in
        flight were paid (serving: spent, neither answered nor refunded yet), open what
        paid payments not yet used hold."""
        return await self._db.run_sync(_totals)

    async def stats(self, now: float | None = None) -> dict[str, int]:
        """Figures for `satsgate-status` and /api/health."""
        t = time.time() if now is None else now
        day_start = int(t - t % 86400)

        def go(c: sqlite3.Connection) -> dict[str, int]:
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
