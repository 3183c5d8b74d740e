"""The routing-fee budget of payouts, per UTC day: one row a day.

A grant is one statement: it gives a payout ``min(limit, what the day has left)`` (never
below zero, even after the operator lowers the budget) and commits it in the same
upsert, so concurrent payouts are never granted more than the day's budget between
them. A payout's outcome hands back what it did not spend (:meth:`release`): the unused
part of a paid payout's grant, all of a failed one's. A payout whose outcome is unknown
keeps its grant committed: the budget errs on the operator's side.
"""

from __future__ import annotations

from satsgate.store.engine import Engine

_T = "payout_fee_days"
# What a day that has committed `c` grants a payout asking `limit` out of `budget`; every
# SET expression reads the row as it was, so the grant and the new sum agree.
_SHARE = (
    f"CASE WHEN {_T}.committed_msat >= ? THEN 0"
    f" WHEN ? < ? - {_T}.committed_msat THEN ? ELSE ? - {_T}.committed_msat END"
)
_GRANT = (
    f"INSERT INTO {_T} (day, committed_msat, last_grant_msat) VALUES (?, ?, ?)"
    f" ON CONFLICT (day) DO UPDATE SET last_grant_msat = {_SHARE},"
    f" committed_msat = {_T}.committed_msat + {_SHARE}"
    " RETURNING last_grant_msat"
)
_RELEASE = (
    f"UPDATE {_T} SET committed_msat = CASE WHEN committed_msat > ? THEN committed_msat - ?"
    " ELSE 0 END WHERE day = ?"
)
_COMMITTED = f"SELECT committed_msat FROM {_T} WHERE day = ?"


class PayoutFeeRepository:
    """Off the hot paths (a payout is rare): every statement runs on the store thread."""

    def __init__(self, db: Engine) -> None:
        self._db = db

    async def grant(self, day: int, limit_msat: int, budget_msat: int) -> int:
        """Grant a payout of ``day`` at most ``limit_msat`` of routing fees out of the
        day's ``budget_msat``; the grant (0 once the day's budget is spent) is committed
        to the day before this returns."""
        limit, budget = max(0, limit_msat), max(0, budget_msat)
        first = min(limit, budget)  # the day's first payout: nothing committed yet
        share = (budget, limit, budget, limit, budget)
        row = await self._db.run_sync(
            lambda c: c.execute(_GRANT, (day, first, first, *share, *share)).fetchone()
        )
        return int(row[0])

    async def release(self, day: int, unspent_msat: int) -> None:
        """Hand back to ``day`` the part of a grant its payout did not spend."""
        if unspent_msat > 0:
            await self._db.run_sync(
                lambda c: c.execute(_RELEASE, (unspent_msat, unspent_msat, day))
            )

    async def committed(self, day: int) -> int:
        """What ``day`` has granted to payouts, less what came back."""
        row = await self._db.run_sync(lambda c: c.execute(_COMMITTED, (day,)).fetchone())
        return 0 if row is None else int(row[0])
