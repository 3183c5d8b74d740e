"""Held communications: paid requests the screen held for review (issue 19).

Every move is one conditional UPDATE from the states it leaves, checked by its rowcount,
so of a release, an operator's refund and the 24-hour expiry exactly one wins:

    held -> review_requested            the payer paid the 1-sat appeal
    held | review_requested -> releasing -> released | failed
    held | review_requested -> refunding -> refunded

The hold's row and the job row the payer polls are written in one transaction; the
payment stays ``serving`` (the ledger's held) until the release's result or the refund
is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.jobs import insert_job
from satsgate.store.payments import SERVED_HERE
from satsgate.store.rows import Job
from satsgate.store.sql import Connection

OPEN_STATES = ("held", "review_requested")


class _NotTaken(Exception):
    """Inside a transaction: a conditional move found nothing to move (rolled back)."""


_COLUMNS = (
    "hold_id, payment_id, job_id, service, channel, reasons, amount_msat, status,"
    " params_json, outreach_text, appeal_note, appeal_payment_id, appeal_paid_at,"
    " created_at, eligible_at, resolved_at, resolution, resolved_by, updated_at"
)


@dataclass(frozen=True)
class HeldRequest:
    hold_id: str
    payment_id: str
    job_id: str
    service: str
    channel: str
    reasons: tuple[str, ...]
    amount_msat: int
    status: str
    params: dict[str, Any] | None  # None once the retention sweep cleared it
    outreach_text: str | None
    appeal_note: str | None
    appeal_payment_id: str | None
    appeal_paid_at: int | None
    created_at: int
    eligible_at: int
    resolved_at: int | None
    resolution: str | None
    resolved_by: str | None
    updated_at: int

    @property
    def open(self) -> bool:
        return self.status in OPEN_STATES


def _hold_of(row: Sequence[Any]) -> HeldRequest:
    return HeldRequest(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        tuple(json.loads(row[5])),
        int(row[6]),
        row[7],
        json.loads(row[8]) if row[8] else None,
        row[9],
        row[10],
        row[11],
        row[12],
        int(row[13]),
        int(row[14]),
        row[15],
        row[16],
        row[17],
        int(row[18]),
    )


class HeldRequestRepository:
    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        self._instance_id = instance_id  # stamped on a claim: its crash is what refunds it

    async def insert(self, hold: HeldRequest, job: Job) -> None:
        """The hold and its job row (IN_PROGRESS, type 'held'), in one transaction."""

        def go(conn: Connection) -> None:
            insert_job(conn, job)
            conn.execute(
                f"INSERT INTO held_requests ({_COLUMNS}) VALUES ({', '.join('?' * 19)})",
                (
                    hold.hold_id,
                    hold.payment_id,
                    hold.job_id,
                    hold.service,
                    hold.channel,
                    json.dumps(list(hold.reasons)),
                    hold.amount_msat,
                    hold.status,
                    json.dumps(hold.params) if hold.params is not None else None,
                    hold.outreach_text,
                    hold.appeal_note,
                    hold.appeal_payment_id,
                    hold.appeal_paid_at,
                    hold.created_at,
                    hold.eligible_at,
                    hold.resolved_at,
                    hold.resolution,
                    hold.resolved_by,
                    hold.updated_at,
                ),
            )

        await self._db.run_in_transaction(go)

    async def get(self, hold_id: str) -> HeldRequest | None:
        return await self._one("hold_id = ?", (hold_id,))

    async def by_payment(self, payment_id: str) -> HeldRequest | None:
        return await self._one("payment_id = ?", (payment_id,))

    async def _one(self, where: str, args: tuple[Any, ...]) -> HeldRequest | None:
        row = await self._db.run_sync(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM held_requests WHERE {where}", args
            ).fetchone()
        )
        return None if row is None else _hold_of(row)

    async def listing(self, *, open_only: bool = False, limit: int = 200) -> list[HeldRequest]:
        """Review requested first, then held, then the resolved ones; oldest first
        within each (the one waiting longest is seen first)."""
        where = f"status IN {OPEN_STATES!r}" if open_only else "1 = 1"

        def go(conn: Connection) -> list[HeldRequest]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM held_requests WHERE {where} ORDER BY"
                " CASE status WHEN 'review_requested' THEN 0 WHEN 'held' THEN 1 ELSE 2 END,"
                " CASE WHEN status IN ('held', 'review_requested') THEN created_at"
                " ELSE -created_at END LIMIT ?",
                (limit,),
            ).fetchall()
            return [_hold_of(r) for r in rows]

        return await self._db.run_sync(go)

    async def set_appeal(self, hold_id: str, payment_id: str, note: str | None, now: int) -> bool:
        """Attach the appeal's current invoice (payment) to a held request still held. An
        invoice it replaces stays the hold's too (:meth:`appeal_payment_ids`)."""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE held_requests SET appeal_payment_id = ?, appeal_note = ?, updated_at = ?"
                " WHERE hold_id = ? AND status = 'held'",
                (payment_id, note, now, hold_id),
            )
        )
        return cur.rowcount == 1

    async def review_requested(self, hold_id: str, appeal_payment_id: str, now: int) -> bool:
        """held -> review_requested with one of its appeal invoices that is paid (the
        current one, or one it replaced), which becomes the hold's appeal and moves
        paid -> spent (the 1 sat is earned), in one transaction: both moves or neither.
        False when the hold is no longer held or the payment is not a paid appeal of it
        (spent or refunded meanwhile): of a review and a refund of one appeal payment,
        and of two paid appeals of one hold, exactly one is taken."""

        def go(conn: Connection) -> bool:
            cur = conn.execute(
                "UPDATE held_requests SET status = 'review_requested', appeal_payment_id = ?,"
                " appeal_paid_at = ?, updated_at = ? WHERE hold_id = ? AND status = 'held'",
                (appeal_payment_id, now, now, hold_id),
            )
            if cur.rowcount != 1:
                return False
            cur = conn.execute(
                "UPDATE payments SET status = 'spent', spent_at = ? WHERE payment_id = ?"
                " AND status = 'paid' AND service = 'appeal' AND request_digest = ?",
                (now, appeal_payment_id, hold_id),
            )
            if cur.rowcount != 1:
                raise _NotTaken  # rolls the hold's move back
            return True

        try:
            return await self._db.run_in_transaction(go)
        except _NotTaken:
            return False

    async def appeal_payment_ids(self, hold_id: str) -> list[str]:
        """Every appeal invoice made for this hold (its payments' ids), oldest first."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT payment_id FROM payments WHERE service = 'appeal'"
                " AND request_digest = ? ORDER BY created_at, payment_id",
                (hold_id,),
            ).fetchall()
        )
        return [str(r[0]) for r in rows]

    async def claim(
        self, hold_id: str, to: str, now: int, *, due_before: int | None = None
    ) -> bool:
        """open -> ``to`` ('releasing' or 'refunding'), and its payment served by this
        instance from then on: True for exactly one caller. ``due_before``: only a hold
        created before then (the 24-hour expiry)."""
        extra, args = "", [to, now, self._instance_id, hold_id]
        if due_before is not None:
            extra, args = " AND eligible_at <= ?", [*args, due_before]

        def go(conn: Connection) -> bool:
            found = conn.execute(
                "UPDATE held_requests SET status = ?, updated_at = ?, claimed_by = ?"
                " WHERE hold_id = ?"
                f" AND status IN ('held', 'review_requested'){extra} RETURNING payment_id",
                args,
            ).fetchall()
            if not found:
                return False
            conn.execute(SERVED_HERE, (self._instance_id, found[0][0]))
            return True

        return await self._db.run_in_transaction(go)

    async def resolve(self, hold_id: str, status: str, resolution: str, by: str, now: int) -> None:
        """releasing -> released | failed, refunding -> refunded: the outcome."""
        await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE held_requests SET status = ?, resolution = ?, resolved_by = ?,"
                " resolved_at = ?, updated_at = ? WHERE hold_id = ?"
                " AND status IN ('releasing', 'refunding')",
                (status, resolution, by, now, now, hold_id),
            )
        )

    async def due(self, now: int) -> list[HeldRequest]:
        """Open holds whose 24 hours are up."""

        def go(conn: Connection) -> list[HeldRequest]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM held_requests WHERE status IN"
                " ('held', 'review_requested') AND eligible_at <= ?",
                (now,),
            ).fetchall()
            return [_hold_of(r) for r in rows]

        return await self._db.run_sync(go)

    async def paid_appeals(self) -> list[tuple[HeldRequest, str]]:
        """Appeal payments paid and neither counted nor refunded yet, with their holds:
        each is to count for its hold (still held) or be refunded (the hold was decided,
        or took another appeal). Through the partial index of appeal payments."""

        def go(conn: Connection) -> list[tuple[HeldRequest, str]]:
            columns = ", ".join(f"h.{c.strip()}" for c in _COLUMNS.split(","))
            rows = conn.execute(
                f"SELECT {columns}, p.payment_id FROM payments p JOIN held_requests h"
                " ON h.hold_id = p.request_digest WHERE p.service = 'appeal'"
                " AND p.status = 'paid'"
            ).fetchall()
            return [(_hold_of(r[:-1]), str(r[-1])) for r in rows]

        return await self._db.run_sync(go)

    async def interrupted(self, claimed_by: str) -> list[HeldRequest]:
        """Holds the gone instance ``claimed_by`` left between their claim and their
        outcome."""

        def go(conn: Connection) -> list[HeldRequest]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM held_requests WHERE status IN ('releasing', 'refunding')"
                " AND claimed_by = ?",
                (claimed_by,),
            ).fetchall()
            return [_hold_of(r) for r in rows]

        return await self._db.run_sync(go)

    async def open_payment_ids(self) -> set[str]:
        """Payments of open holds: serving on purpose (the start-up sweep leaves them)."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT payment_id FROM held_requests WHERE status IN ('held', 'review_requested')"
            ).fetchall()
        )
        return {str(r[0]) for r in rows}

    async def totals(self) -> dict[str, int]:
        """Open held communications (part of the ledger's held: their payments serve),
        and how many wait for review."""

        def go(conn: Connection) -> dict[str, int]:
            row = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(amount_msat), 0),"
                " COUNT(CASE WHEN status = 'review_requested' THEN 1 END)"
                " FROM held_requests WHERE status IN ('held', 'review_requested')"
            ).fetchone()
            return {"held": int(row[0]), "held_msat": int(row[1]), "review_requested": int(row[2])}

        return await self._db.run_sync(go)
