"""AI calls: one row per paid call, keyed by its payment as well (a handler run again
after a hold's release finds it). Every move of ``status`` is one conditional UPDATE
checked by its rowcount: the confirmation (``pending_confirm -> placing``) happens once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.payments import SERVED_HERE
from satsgate.store.sql import Connection

_COLUMNS = (
    "call_id",
    "payment_id",
    "session_id",
    "status",
    "request_json",
    "questions_json",
    "answers_json",
    "provider",
    "attempt",
    "provider_call_id",
    "attempts_json",
    "deposit_msat",
    "minutes",
    "per_minute_msat",
    "next_at",
    "outcome",
    "transcript",
    "results_json",
    "refund_address",
    "created_at",
    "updated_at",
)
_JSON = {
    "request_json": "request",
    "questions_json": "questions",
    "answers_json": "answers",
    "attempts_json": "attempts",
    "results_json": "results",
}
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM ai_calls WHERE "


@dataclass(frozen=True)
class AiCallRow:
    call_id: str
    payment_id: str
    status: str
    deposit_msat: int
    minutes: int
    per_minute_msat: int
    created_at: int
    updated_at: int
    session_id: str | None = None
    request: dict[str, Any] | None = None  # the call's params (cleared by retention)
    questions: list[str] | None = None
    answers: dict[str, Any] | None = None
    provider: str | None = None  # the operator's name of the platform that placed it
    attempt: int = 0  # 0 before the first placement, then 1, and 2 on a redial
    provider_call_id: str | None = None  # the platform's id of the current attempt
    attempts: list[dict[str, Any]] = field(default_factory=list)  # finished attempts
    next_at: int | None = None  # the redial's time, or the confirmation's deadline
    outcome: str | None = None
    transcript: str | None = None
    results: dict[str, Any] | None = None
    refund_address: str | None = None


def _encode(column: str, value: Any) -> Any:
    if column in _JSON:
        return None if value is None else json.dumps(value, separators=(",", ":"))
    return value


def _row(values: tuple[Any, ...]) -> AiCallRow:
    data: dict[str, Any] = {}
    for column, value in zip(_COLUMNS, values, strict=True):
        if column in _JSON:
            data[_JSON[column]] = json.loads(value) if value else None
        else:
            data[column] = value
    if data["attempts"] is None:
        data["attempts"] = []
    return AiCallRow(**data)


def _attr(column: str) -> str:
    return _JSON.get(column, column)


def _where(conn: Connection, clause: str, args: tuple[Any, ...]) -> list[AiCallRow]:
    return [_row(r) for r in conn.execute(_SELECT + clause, args).fetchall()]


class AiCallRepository:
    """Every method runs on the store thread: AI calls are off the hot paths."""

    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        self._instance_id = instance_id  # a confirmed call is placed and watched here

    async def create(self, row: AiCallRow) -> tuple[AiCallRow, bool]:
        """Insert the call; (the row, True), or (the payment's earlier row, False)."""

        def go(conn: Connection) -> tuple[AiCallRow, bool]:
            values = tuple(_encode(c, getattr(row, _attr(c))) for c in _COLUMNS)
            cur = conn.execute(
                f"INSERT INTO ai_calls ({', '.join(_COLUMNS)})"
                f" VALUES ({', '.join('?' * len(_COLUMNS))}) ON CONFLICT DO NOTHING",
                values,
            )
            if cur.rowcount == 1:
                return row, True
            return _where(conn, "payment_id = ?", (row.payment_id,))[0], False

        return await self._db.run_sync(go)

    async def get(self, call_id: str) -> AiCallRow | None:
        rows = await self._db.run_sync(lambda c: _where(c, "call_id = ?", (call_id,)))
        return rows[0] if rows else None

    async def by_payment(self, payment_id: str) -> AiCallRow | None:
        rows = await self._db.run_sync(lambda c: _where(c, "payment_id = ?", (payment_id,)))
        return rows[0] if rows else None

    async def in_status(
        self, statuses: tuple[str, ...], served_by: str | None = None
    ) -> list[AiCallRow]:
        """Calls in one of ``statuses``; with ``served_by``, only those of that instance
        (the one that spent their payment, or took them up since)."""
        marks = ", ".join("?" * len(statuses))
        clause, args = f"status IN ({marks})", statuses
        if served_by is not None:
            clause += " AND payment_id IN (SELECT payment_id FROM payments WHERE served_by = ?)"
            args = (*statuses, served_by)
        return await self._db.run_sync(lambda c: _where(c, clause + " ORDER BY created_at", args))

    async def unsettled(self) -> list[AiCallRow]:
        """Ended calls whose deposit has no settlement (a crash came between the end and
        the settlement); those whose results the retention sweep cleared are left out."""
        return await self._db.run_sync(
            lambda c: _where(
                c,
                "status IN ('ended', 'failed', 'expired') AND results_json IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM deposit_settlements d"
                " WHERE d.payment_id = ai_calls.payment_id)",
                (),
            )
        )

    async def confirm(
        self, session_id: str, answers: Mapping[str, Any], to: str, now: int
    ) -> AiCallRow | None:
        """pending_confirm -> ``to`` with the answers, once and before the deadline, and
        the call served by this instance from then on (whichever spent its deposit); the
        row after, or None (no such session, already confirmed, or expired)."""

        def go(conn: Connection) -> AiCallRow | None:
            cur = conn.execute(
                "UPDATE ai_calls SET status = ?, answers_json = ?, updated_at = ?"
                " WHERE session_id = ? AND status = 'pending_confirm' AND next_at > ?"
                " RETURNING call_id, payment_id",
                (to, _encode("answers_json", dict(answers)), now, session_id, now),
            )
            found = cur.fetchall()
            if not found:
                return None
            conn.execute(SERVED_HERE, (self._instance_id, found[0][1]))
            return _where(conn, "call_id = ?", (found[0][0],))[0]

        return await self._db.run_in_transaction(go)

    async def move(
        self, call_id: str, from_statuses: tuple[str, ...], changes: Mapping[str, Any], now: int
    ) -> bool:
        """Apply ``changes`` (field names of AiCallRow: ``status``, ``attempts``, ...) when
        the call is in one of ``from_statuses``; True when it was (one conditional
        UPDATE, so of two racing moves one wins)."""
        by_attr = {_attr(c): c for c in _COLUMNS}
        columns = [by_attr[name] for name in changes]
        sets = ", ".join(f"{c} = ?" for c in columns)
        marks = ", ".join("?" * len(from_statuses))
        args = [_encode(c, changes[_attr(c)]) for c in columns]
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                f"UPDATE ai_calls SET {sets}, updated_at = ? WHERE call_id = ?"
                f" AND status IN ({marks})",
                (*args, now, call_id, *from_statuses),
            )
        )
        return cur.rowcount == 1
