"""Voice-bridge sessions and their events (services/comms/bridge_calls.py).

A session ends once: :meth:`VoiceBridgeRepository.end` is one conditional UPDATE from a
live state to ``ended`` that records what is billed, and only the caller whose UPDATE
changed the row settles the deposit (``mark_settled`` once it is). Events are numbered
per session (``seq`` from 1) and bounded: the oldest beyond ``keep`` are deleted as new
ones arrive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection, transaction

LIVE_STATES = ("dialing", "ringing", "open")
_LIVE = "state IN ('dialing', 'ringing', 'open')"

_COLUMNS = (
    "session_id",
    "payment_id",
    "token_hash",
    "call_id",
    "language",
    "stt_enabled",
    "tts_enabled",
    "refund_address",
    "deposit_msat",
    "per_minute_msat",
    "max_duration_s",
    "state",
    "created_at_ms",
    "answered_at_ms",
    "alive_at_ms",
    "ended_at_ms",
    "end_reason",
    "elapsed_s",
    "used_msat",
    "settled",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM voice_bridge_sessions"


@dataclass(frozen=True)
class BridgeSessionRow:
    session_id: str
    payment_id: str
    token_hash: str
    call_id: str | None
    language: str
    stt_enabled: bool
    tts_enabled: bool
    refund_address: str | None
    deposit_msat: int
    per_minute_msat: int
    max_duration_s: int
    state: str  # dialing, ringing, open, ended
    created_at_ms: int
    answered_at_ms: int | None = None
    alive_at_ms: int | None = None
    ended_at_ms: int | None = None
    end_reason: str | None = None
    elapsed_s: int | None = None
    used_msat: int | None = None
    settled: bool = False

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True)
class EventRow:
    seq: int
    type: str
    text: str
    ts_ms: int


def _row(values: tuple[object, ...]) -> BridgeSessionRow:
    fields = dict(zip(_COLUMNS, values, strict=True))
    for flag in ("stt_enabled", "tts_enabled", "settled"):
        fields[flag] = bool(fields[flag])
    return BridgeSessionRow(**fields)  # type: ignore[arg-type]


class VoiceBridgeRepository:
    """Every method runs on the store thread: a session writes a few rows a second."""

    def __init__(self, db: Engine) -> None:
        self._db = db

    async def insert(self, row: BridgeSessionRow) -> None:
        values = [getattr(row, c) for c in _COLUMNS]
        await self._db.run_in_transaction(
            lambda conn: conn.execute(
                f"INSERT INTO voice_bridge_sessions ({', '.join(_COLUMNS)})"
                f" VALUES ({', '.join('?' * len(_COLUMNS))})",
                values,
            )
        )

    async def get(self, session_id: str) -> BridgeSessionRow | None:
        found = await self._db.run_sync(
            lambda conn: conn.execute(f"{_SELECT} WHERE session_id = ?", (session_id,)).fetchone()
        )
        return None if found is None else _row(found)

    async def by_token_hash(self, token_hash: str) -> BridgeSessionRow | None:
        found = await self._db.run_sync(
            lambda conn: conn.execute(f"{_SELECT} WHERE token_hash = ?", (token_hash,)).fetchone()
        )
        return None if found is None else _row(found)

    async def set_call(self, session_id: str, call_id: str) -> None:
        await self._db.run_in_transaction(
            lambda conn: conn.execute(
                "UPDATE voice_bridge_sessions SET call_id = ? WHERE session_id = ?",
                (call_id, session_id),
            )
        )

    async def ringing(self, session_id: str) -> bool:
        """dialing -> ringing."""
        return await self._update(
            "UPDATE voice_bridge_sessions SET state = 'ringing'"
            " WHERE session_id = ? AND state = 'dialing'",
            (session_id,),
        )

    async def answered(self, session_id: str, now_ms: int) -> bool:
        """dialing or ringing -> open, from now: the billed time starts here, once."""
        return await self._update(
            "UPDATE voice_bridge_sessions SET state = 'open', answered_at_ms = ?,"
            " alive_at_ms = ? WHERE session_id = ? AND state IN ('dialing', 'ringing')",
            (now_ms, now_ms, session_id),
        )

    async def alive(self, session_id: str, now_ms: int) -> None:
        """The call was still up at ``now_ms`` (what a restart bills up to)."""
        await self._update(
            f"UPDATE voice_bridge_sessions SET alive_at_ms = ? WHERE session_id = ? AND {_LIVE}",
            (now_ms, session_id),
        )

    async def end(
        self, session_id: str, ended_at_ms: int, reason: str, elapsed_s: int, used_msat: int
    ) -> bool:
        """A live session -> ended with what it bills; False if it had ended already."""
        return await self._update(
            "UPDATE voice_bridge_sessions SET state = 'ended', ended_at_ms = ?,"
            f" end_reason = ?, elapsed_s = ?, used_msat = ? WHERE session_id = ? AND {_LIVE}",
            (ended_at_ms, reason, elapsed_s, used_msat, session_id),
        )

    async def mark_settled(self, session_id: str) -> None:
        await self._update(
            "UPDATE voice_bridge_sessions SET settled = 1 WHERE session_id = ?", (session_id,)
        )

    async def unfinished(self, served_by: str) -> list[BridgeSessionRow]:
        """Sessions of the instance ``served_by`` (the one that opened them) still live,
        or ended without their settlement recorded (a restart)."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                f"{_SELECT} WHERE (state != 'ended' OR settled = 0) AND payment_id IN"
                " (SELECT payment_id FROM payments WHERE served_by = ?) ORDER BY created_at_ms",
                (served_by,),
            ).fetchall()
        )
        return [_row(r) for r in rows]

    async def hand_over(self, session_id: str, audio: bytes, label: str, now: int) -> None:
        """A say for a call whose audio is on another instance: kept for that instance."""
        await self._db.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO voice_bridge_says (session_id, audio, label, created_at)"
                " VALUES (?, ?, ?, ?)",
                (session_id, audio, label, now),
            )
        )

    async def says_waiting(self, session_id: str) -> int:
        row = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT COUNT(*) FROM voice_bridge_says WHERE session_id = ?", (session_id,)
            ).fetchone()
        )
        return int(row[0])

    async def take_says(self, session_ids: Sequence[str]) -> list[tuple[str, bytes, str]]:
        """The says handed over for these sessions, taken (each by one taker: a DELETE
        ... RETURNING), in the order they were said: (session id, audio, label)."""
        if not session_ids:
            return []
        marks = ", ".join("?" * len(session_ids))

        def run(conn: Connection) -> list[tuple[str, bytes, str]]:
            rows = conn.execute(
                f"DELETE FROM voice_bridge_says WHERE session_id IN ({marks})"
                " RETURNING say_id, session_id, audio, label",
                tuple(session_ids),
            ).fetchall()
            return [(str(r[1]), bytes(r[2]), str(r[3])) for r in sorted(rows, key=lambda r: r[0])]

        return await self._db.run_sync(run)

    async def add_event(self, session_id: str, type_: str, text: str, ts_ms: int, keep: int) -> int:
        """Append an event; its seq. Events older than the last ``keep`` are deleted."""

        def go(conn: Connection) -> int:
            with transaction(conn):
                (last,) = conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM voice_bridge_events WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
                seq = int(last) + 1
                conn.execute(
                    "INSERT INTO voice_bridge_events (session_id, seq, type, text, ts_ms, at_s)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (session_id, seq, type_, text, ts_ms, ts_ms // 1000),
                )
                conn.execute(
                    "DELETE FROM voice_bridge_events WHERE session_id = ? AND seq <= ?",
                    (session_id, seq - keep),
                )
                return seq

        return await self._db.run_sync(go)

    async def events(self, session_id: str, after: int, limit: int) -> list[EventRow]:
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT seq, type, text, ts_ms FROM voice_bridge_events"
                " WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (session_id, after, limit),
            ).fetchall()
        )
        return [EventRow(int(s), str(t), str(x), int(ts)) for s, t, x, ts in rows]

    async def transcript(self, session_id: str, type_: str) -> list[str]:
        """The texts of the session's kept events of ``type_``, in order."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT text FROM voice_bridge_events WHERE session_id = ? AND type = ?"
                " ORDER BY seq",
                (session_id, type_),
            ).fetchall()
        )
        return [str(r[0]) for r in rows]

    async def _update(self, sql: str, args: tuple[object, ...]) -> bool:
        def go(conn: Connection) -> bool:
            with transaction(conn):
                return conn.execute(sql, args).rowcount == 1

        return await self._db.run_sync(go)
