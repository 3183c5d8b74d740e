"""The callback outbox: deliveries of finished jobs to their callers' callback_url.

A row enters with the job's end (:meth:`satsgate.store.jobs.JobRepository.finish`).
The sender claims due rows by moving their ``next_at`` forward by a lease in one
UPDATE, so two senders (the scheduler's sweep and the kick after a job ends) never
deliver the same row at once; a row ends delivered or given up, once.
"""

from __future__ import annotations

from satsgate.store.engine import Engine
from satsgate.store.rows import CallbackDelivery
from satsgate.store.sql import Connection


class CallbackRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def claim_due(self, now: int, lease_s: int, limit: int = 50) -> list[CallbackDelivery]:
        """Due rows, leased to the caller until ``now + lease_s``.

        The due condition stands in the UPDATE's own WHERE as well as in the subquery
        that picks the rows: PostgreSQL re-checks only the former on a row another
        claim changed while this one waited for its lock, so without it two sweeps at
        once would both lease (and send) one delivery."""

        def go(conn: Connection) -> list[CallbackDelivery]:
            rows = conn.execute(
                "UPDATE callback_deliveries SET next_at = ? WHERE job_id IN ("
                " SELECT job_id FROM callback_deliveries WHERE delivered_at IS NULL"
                " AND given_up_at IS NULL AND next_at <= ? ORDER BY next_at LIMIT ?)"
                " AND delivered_at IS NULL AND given_up_at IS NULL AND next_at <= ?"
                " RETURNING job_id, url, secret, body, attempts",
                (now + lease_s, now, limit, now),
            ).fetchall()
            return [CallbackDelivery(*row) for row in rows]

        return await self._db.run_sync(go)

    async def delivered(self, job_id: str, attempts: int, now: int) -> None:
        await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE callback_deliveries SET delivered_at = ?, attempts = ?, last_error = NULL"
                " WHERE job_id = ? AND delivered_at IS NULL AND given_up_at IS NULL",
                (now, attempts, job_id),
            )
        )

    async def failed(
        self, job_id: str, attempts: int, error: str, retry_at: int | None, now: int
    ) -> None:
        """An attempt failed: retry at ``retry_at``, or give up when it is None."""
        await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE callback_deliveries SET attempts = ?, last_error = ?,"
                " next_at = COALESCE(?, next_at), given_up_at = CASE WHEN CAST(? AS BIGINT) IS NULL"
                " THEN ? END WHERE job_id = ? AND delivered_at IS NULL AND given_up_at IS NULL",
                (attempts, error[:300], retry_at, retry_at, now, job_id),
            )
        )

    async def get(self, job_id: str) -> dict[str, object] | None:
        """A delivery's state (for the operator and tests)."""

        def go(conn: Connection) -> dict[str, object] | None:
            row = conn.execute(
                "SELECT attempts, next_at, delivered_at, given_up_at, last_error, body, url"
                " FROM callback_deliveries WHERE job_id = ?",
                (job_id,),
            ).fetchone()
            if row is None:
                return None
            keys = ("attempts", "next_at", "delivered_at", "given_up_at", "last_error", "body")
            return {**dict(zip(keys, row, strict=False)), "url": row[6]}

        return await self._db.run_sync(go)

    async def prune(self, before: int) -> int:
        """Forget deliveries that ended before ``before`` (their bodies hold results)."""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "DELETE FROM callback_deliveries WHERE COALESCE(delivered_at, given_up_at) < ?",
                (before,),
            )
        )
        return cur.rowcount
