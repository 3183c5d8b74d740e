"""Free-retry windows: a paid call the upstream model refused on content, kept for a
free retry with changed input (CONTENT_FILTERED_RETRY; see satsgate.payments.rework).

Every move is one conditional UPDATE from the state it leaves, checked by its rowcount,
so of two retries, a retry and a decline, or a decline and the expiry, exactly one wins:

    (refusal) -> open                      the first refusal opens the window
    open -> running                        a retry with the token claimed it (a job's
                                           retry writes its new job's row in the same
                                           transaction)
    running -> open                        that retry was refused too, below the cap
    running -> closed                      answered, failed (refunded) or the cap reached
    open -> declined | expired             refunded in full instead of retried

The payment stays ``serving`` (the ledger's held) while a window is open or running; the
refund that ends it moves it to ``spent`` in the refund's own transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from satsgate.store.engine import Engine
from satsgate.store.jobs import insert_job
from satsgate.store.payments import SERVED_HERE
from satsgate.store.rows import Job
from satsgate.store.sql import Connection

OPEN, RUNNING, CLOSED, DECLINED, EXPIRED = "open", "running", "closed", "declined", "expired"
_COLUMNS = "payment_id, service, token_hash, state, attempts, rework_until, created_at, updated_at"


@dataclass(frozen=True)
class ReworkWindow:
    payment_id: str
    service: str
    token_hash: str  # sha256 hex of the current rework_token
    state: str
    attempts: int  # calls made on the payment, the refused ones included
    rework_until: float  # unix s
    created_at: int
    updated_at: int


def _window(row: tuple[object, ...] | None) -> ReworkWindow | None:
    if row is None:
        return None
    payment_id, service, token_hash, state, attempts, until, created, updated = row
    return ReworkWindow(
        str(payment_id),
        str(service),
        str(token_hash),
        str(state),
        int(attempts),  # type: ignore[call-overload]
        float(until),  # type: ignore[arg-type]
        int(created),  # type: ignore[call-overload]
        int(updated),  # type: ignore[call-overload]
    )


class ReworkRepository:
    """Off the hot paths (a refusal is rare): every statement runs on the store thread."""

    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        self._instance_id = instance_id  # a claimed retry is served here

    async def get(self, payment_id: str) -> ReworkWindow | None:
        return await self._db.run_sync(
            lambda c: _window(
                c.execute(
                    f"SELECT {_COLUMNS} FROM rework_windows WHERE payment_id = ?", (payment_id,)
                ).fetchone()
            )
        )

    async def open_first(
        self, payment_id: str, service: str, token_hash: str, until: float, now: int
    ) -> bool:
        """The first refusal of a payment's call: its window, attempt 1. False when the
        payment already has one (it was opened before: never twice)."""

        def go(c: Connection) -> bool:
            cur = c.execute(
                f"INSERT INTO rework_windows ({_COLUMNS}) VALUES (?, ?, ?, 'open', 1, ?, ?, ?)"
                " ON CONFLICT (payment_id) DO NOTHING",
                (payment_id, service, token_hash, until, now, now),
            )
            return cur.rowcount == 1

        return await self._db.run_in_transaction(go)

    async def reopen(self, payment_id: str, token_hash: str, until: float, now: int) -> bool:
        """running -> open: the retry was refused too; a new token and deadline."""
        return await self._move(
            "state = 'open', token_hash = ?, rework_until = ?, updated_at = ?",
            (token_hash, until, now),
            payment_id,
            RUNNING,
        )

    async def claim(
        self, payment_id: str, token_hash: str, now: float, job: Job | None = None
    ) -> bool:
        """open -> running for a retry with the current token before the deadline, its
        payment still serving (not refunded meanwhile, e.g. by the operator), and served
        by this instance from now on; True for exactly one caller. With ``job`` (the
        retry of a job-mode call), that job's row is written in the same transaction: a
        claimed retry always has its job, and no job exists without its claim."""

        def go(c: Connection) -> bool:
            cur = c.execute(
                "UPDATE rework_windows SET state = 'running', attempts = attempts + 1,"
                " updated_at = ? WHERE payment_id = ? AND state = 'open' AND token_hash = ?"
                " AND rework_until >= ? AND EXISTS (SELECT 1 FROM payments"
                " WHERE payment_id = rework_windows.payment_id AND status = 'serving')",
                (int(now), payment_id, token_hash, now),
            )
            if cur.rowcount != 1:
                return False
            c.execute(SERVED_HERE, (self._instance_id, payment_id))
            if job is not None:
                insert_job(c, job)
            return True

        return await self._db.run_in_transaction(go)

    async def close_running(self, payment_id: str, now: int) -> bool:
        """running -> closed: the retry was answered, failed, or reached the cap."""
        return await self._move("state = 'closed', updated_at = ?", (now,), payment_id, RUNNING)

    async def end_open(self, payment_id: str, to: str, now: int, token_hash: str | None) -> bool:
        """open -> declined | expired (the refund follows); with ``token_hash``, only for
        the current token. True for exactly one caller."""
        assert to in (DECLINED, EXPIRED)

        def go(c: Connection) -> bool:
            sql = (
                "UPDATE rework_windows SET state = ?, updated_at = ?"
                " WHERE payment_id = ? AND state = 'open'"
            )
            args: tuple[object, ...] = (to, now, payment_id)
            if token_hash is not None:
                sql += " AND token_hash = ?"
                args += (token_hash,)
            return c.execute(sql, args).rowcount == 1

        return await self._db.run_in_transaction(go)

    async def due(self, now: float, limit: int = 500) -> list[str]:
        """Payments whose open window passed its deadline."""
        return await self._db.run_sync(
            lambda c: [
                str(r[0])
                for r in c.execute(
                    "SELECT payment_id FROM rework_windows WHERE state = 'open'"
                    " AND rework_until < ? LIMIT ?",
                    (now, limit),
                ).fetchall()
            ]
        )

    async def open_payment_ids(self) -> set[str]:
        """Payments whose window is open: serving on purpose (kept across a restart)."""
        return await self._db.run_sync(
            lambda c: {
                str(r[0])
                for r in c.execute(
                    "SELECT payment_id FROM rework_windows WHERE state = 'open'"
                ).fetchall()
            }
        )

    async def _move(
        self, assignments: str, args: tuple[object, ...], payment_id: str, from_state: str
    ) -> bool:
        def go(c: Connection) -> bool:
            cur = c.execute(
                f"UPDATE rework_windows SET {assignments} WHERE payment_id = ? AND state = ?",
                (*args, payment_id, from_state),
            )
            return cur.rowcount == 1

        return await self._db.run_in_transaction(go)
