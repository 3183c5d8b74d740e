"""Payment sessions: a prepaid balance drawn on by bearer calls, paid back on close.

Every change of money is one conditional statement whose rowcount (or RETURNING row)
is checked:

- a deposit is consumed once: ``payments`` paid -> spent for its hash (mode
  'deposit'), in the transaction that opens the session or adds the top-up;
- a debit is ``spent_msat + price`` only while ``deposit_msat - spent_msat >= price``
  and the session is open (one UPDATE ... RETURNING the balance left): concurrent
  calls on one balance serve exactly as many as it covers, and the table's CHECK keeps
  the balance from ever going below zero even against a wrong statement;
- a credit (a call that failed after its debit, or a metered call that used less than
  its reservation) gives back at most what was spent, never after the close's refund
  was decided;
- close is open -> closed (one winner); the refund is then decided once (``refund_msat``
  from NULL to the balance left); each payout attempt is claimed (pending/failed ->
  paying) before the node is asked to pay, so a return invoice is never paid twice;
- a return invoice serves one session: its payment hash is stored under a unique index
  (``return_hash``), so of two opens racing with one invoice exactly one inserts, and
  the other's transaction (its deposit's consumption included) is rolled back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection, is_unique_violation, transaction


class ReturnInvoiceTaken(Exception):
    """The open's return invoice (by payment hash) is another session's already."""


@dataclass(frozen=True)
class Session:
    session_id: str  # the payment hash of the opening deposit
    deposit_msat: int  # everything deposited (open and top-ups)
    spent_msat: int  # debits less credits
    return_invoice: str  # amountless BOLT11 the balance is paid to on close
    status: str  # open | closed
    created_at: int
    last_used_at: int
    closed_at: int | None
    close_reason: str | None  # client | idle
    refund_msat: int | None  # the balance at close, once decided
    payout_status: str | None  # skipped | pending | paying | failed | succeeded
    payout_fee_msat: int | None
    payout_error: str | None
    payout_attempts: int
    # sha256 (hex) of the session token issued at open; None for a session opened before
    # sessions were bound (migration 0022): no credential spends or closes it.
    token_sha256: str | None

    @property
    def balance_msat(self) -> int:
        return self.deposit_msat - self.spent_msat


_COLUMNS = (
    "session_id",
    "deposit_msat",
    "spent_msat",
    "return_invoice",
    "status",
    "created_at",
    "last_used_at",
    "closed_at",
    "close_reason",
    "refund_msat",
    "payout_status",
    "payout_fee_msat",
    "payout_error",
    "payout_attempts",
    "token_sha256",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM sessions WHERE "
_RETURNING = f" RETURNING {', '.join(_COLUMNS)}"

_CONSUME_DEPOSIT = (
    "UPDATE payments SET status = 'spent', spent_at = ?"
    " WHERE payment_hash = ? AND mode = 'deposit' AND status = 'paid' RETURNING amount_msat"
)
_DEBIT = (
    "UPDATE sessions SET spent_msat = spent_msat + ?1, held_msat = held_msat + ?1,"
    " last_used_at = ?2, updated_at = ?2"
    " WHERE session_id = ?3 AND status = 'open' AND deposit_msat - spent_msat >= ?1"
    " RETURNING deposit_msat - spent_msat"
)
_CREDIT = (
    "UPDATE sessions SET spent_msat = spent_msat - ?1, held_msat = held_msat - ?4,"
    " updated_at = ?2 WHERE session_id = ?3 AND refund_msat IS NULL AND spent_msat >= ?1"
    " AND held_msat >= ?4 RETURNING deposit_msat - spent_msat"
)
_ANSWERED = (
    "UPDATE sessions SET held_msat = held_msat - ?1 WHERE session_id = ?2 AND held_msat >= ?1"
)

# What a call in flight holds is also counted per instance (session_holds), so that a gone
# instance's part alone goes back (give_back_held). SQLite runs the debit and the hold's
# statement in one group commit; PostgreSQL, where each write is its own transaction,
# runs them as one statement (a data-modifying WITH).
_HOLD = (
    "INSERT INTO session_holds (session_id, instance_id, held_msat) VALUES (?, ?, ?)"
    " ON CONFLICT (session_id, instance_id)"
    " DO UPDATE SET held_msat = session_holds.held_msat + excluded.held_msat"
)
# A release never takes a hold below zero (a call held before holds were per instance).
_RELEASE = (
    "UPDATE session_holds SET held_msat = CASE WHEN held_msat >= ?1 THEN held_msat - ?1"
    " ELSE 0 END WHERE session_id = ?2 AND instance_id = ?3"
)
_DEBIT_AND_HOLD = (
    "WITH debit AS (UPDATE sessions SET spent_msat = spent_msat + ?1,"
    " held_msat = held_msat + ?1, last_used_at = ?2, updated_at = ?2"
    " WHERE session_id = ?3 AND status = 'open' AND deposit_msat - spent_msat >= ?1"
    " RETURNING session_id, deposit_msat - spent_msat AS left_msat),"
    " hold AS (INSERT INTO session_holds (session_id, instance_id, held_msat)"
    " SELECT session_id, ?4, ?1 FROM debit ON CONFLICT (session_id, instance_id)"
    " DO UPDATE SET held_msat = session_holds.held_msat + excluded.held_msat)"
    " SELECT left_msat FROM debit"
)
_CREDIT_AND_RELEASE = (
    "WITH credit AS (UPDATE sessions SET spent_msat = spent_msat - ?1,"
    " held_msat = held_msat - ?4, updated_at = ?2 WHERE session_id = ?3"
    " AND refund_msat IS NULL AND spent_msat >= ?1 AND held_msat >= ?4"
    " RETURNING session_id, deposit_msat - spent_msat AS left_msat),"
    " released AS (UPDATE session_holds SET held_msat = CASE WHEN held_msat >= ?4"
    " THEN held_msat - ?4 ELSE 0 END WHERE instance_id = ?5"
    " AND session_id IN (SELECT session_id FROM credit))"
    " SELECT left_msat FROM credit"
)
_ANSWERED_AND_RELEASE = (
    "WITH answered AS (UPDATE sessions SET held_msat = held_msat - ?1"
    " WHERE session_id = ?2 AND held_msat >= ?1 RETURNING session_id)"
    " UPDATE session_holds SET held_msat = CASE WHEN held_msat >= ?1 THEN held_msat - ?1"
    " ELSE 0 END WHERE instance_id = ?3 AND session_id IN (SELECT session_id FROM answered)"
)


def _session_of(row: Sequence[Any]) -> Session:
    return Session(*row)


def _get(conn: Connection, session_id: str) -> Session | None:
    row = conn.execute(_SELECT + "session_id = ?", (session_id,)).fetchone()
    return None if row is None else _session_of(row)


def _consume(conn: Connection, payment_hash: str, now: int) -> int | None:
    rows = conn.execute(_CONSUME_DEPOSIT, (now, payment_hash)).fetchall()
    return int(rows[0][0]) if rows else None


class SessionRepository:
    """The debit, the credit and the point read run on the loop's connection (one
    statement each, in the group commit); opening, top-ups, closing and payouts on the
    store thread."""

    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        self._instance_id = instance_id  # whose holds this process's calls add to

    async def get(self, session_id: str) -> Session | None:
        return await self._db.read(lambda conn: _get(conn, session_id))

    async def return_invoice_taken(
        self, return_invoice: str, return_hash: str, session_id: str
    ) -> bool:
        """Whether another session than ``session_id`` names this return invoice, by its
        payment hash or (sessions opened before the hash was stored) its text: a node
        pays an invoice once, so the second session's payout would move nothing. The
        unique index on ``return_hash`` decides a race this read cannot see."""
        return await self._db.read(
            lambda conn: (
                conn.execute(
                    "SELECT 1 FROM sessions WHERE (return_hash = ?"
                    " OR lower(return_invoice) = lower(?)) AND session_id != ? LIMIT 1",
                    (return_hash.lower(), return_invoice, session_id),
                ).fetchone()
                is not None
            )
        )

    async def deposit_use(self, payment_hash: str) -> tuple[str, str, str] | None:
        """(session id, kind 'open' or 'topup', challenge id) of a consumed deposit."""

        def run(conn: Connection) -> tuple[str, str, str] | None:
            row = conn.execute(
                "SELECT session_id, kind, challenge_id FROM session_deposits"
                " WHERE payment_hash = ?",
                (payment_hash,),
            ).fetchone()
            return None if row is None else (str(row[0]), str(row[1]), str(row[2]))

        return await self._db.read(run)

    async def open(
        self,
        deposit_hash: str,
        challenge_id: str,
        return_invoice: str,
        return_hash: str,
        token_sha256: str,
        now: int,
    ) -> Session | None:
        """Consume the paid deposit and open its session bound to ``token_sha256`` (the
        hash of the token the payer alone is given), in one transaction; None when the
        deposit is not paid and unused (nothing changed). ReturnInvoiceTaken when
        another session has this return invoice (nothing changed: the deposit stays
        paid and unused)."""

        def go(conn: Connection) -> Session | None:
            with transaction(conn):
                amount = _consume(conn, deposit_hash, now)
                if amount is None:
                    return None
                try:
                    conn.execute(
                        "INSERT INTO sessions (session_id, deposit_msat, spent_msat,"
                        " return_invoice, return_hash, token_sha256, status, created_at,"
                        " last_used_at, updated_at) VALUES (?, ?, 0, ?, ?, ?, 'open', ?, ?, ?)",
                        (
                            deposit_hash,
                            amount,
                            return_invoice,
                            return_hash.lower(),
                            token_sha256,
                            now,
                            now,
                            now,
                        ),
                    )
                except Exception as exc:
                    # The one UNIQUE index of sessions besides its primary key (a
                    # consumed deposit never opens twice): the return invoice's hash.
                    if is_unique_violation(exc):
                        raise ReturnInvoiceTaken(return_hash) from None
                    raise
                conn.execute(
                    "INSERT INTO session_deposits (payment_hash, session_id, amount_msat, kind,"
                    " challenge_id, created_at) VALUES (?, ?, ?, 'open', ?, ?)",
                    (deposit_hash, deposit_hash, amount, challenge_id, now),
                )
                return _get(conn, deposit_hash)

        return await self._db.run_sync(go)

    async def top_up(
        self, session_id: str, deposit_hash: str, challenge_id: str, now: int
    ) -> tuple[str, Session | None]:
        """Consume the paid deposit into the open session's balance, in one transaction.
        ("ok", session); ("closed" | "unknown", None) with nothing consumed; ("unpaid",
        session) when the deposit is not paid and unused."""

        def go(conn: Connection) -> tuple[str, Session | None]:
            with transaction(conn):
                session = _get(conn, session_id)
                if session is None:
                    return "unknown", None
                if session.status != "open":
                    return "closed", session
                amount = _consume(conn, deposit_hash, now)
                if amount is None:
                    return "unpaid", session
                conn.execute(
                    "UPDATE sessions SET deposit_msat = deposit_msat + ?, last_used_at = ?,"
                    " updated_at = ? WHERE session_id = ?",
                    (amount, now, now, session_id),
                )
                conn.execute(
                    "INSERT INTO session_deposits (payment_hash, session_id, amount_msat, kind,"
                    " challenge_id, created_at) VALUES (?, ?, ?, 'topup', ?, ?)",
                    (deposit_hash, session_id, amount, challenge_id, now),
                )
                return "ok", _get(conn, session_id)

        return await self._db.run_sync(go)

    async def debit(self, session_id: str, amount_msat: int, now: int) -> int | None:
        """Take ``amount_msat`` from an open session that covers it; the balance left, or
        None (nothing taken: unknown, closed, or too little left)."""

        instance = self._instance_id
        if self._db.postgres:
            args = (amount_msat, now, session_id, instance)
            found = await self._db.write_rows(_DEBIT_AND_HOLD, args)
            return int(found[0][0]) if found else None

        def run(conn: Connection) -> int | None:
            rows = conn.execute(_DEBIT, (amount_msat, now, session_id)).fetchall()
            if not rows:
                return None
            conn.execute(_HOLD, (session_id, instance, amount_msat))
            return int(rows[0][0])

        return await self._db.write(run)

    async def credit(
        self, session_id: str, amount_msat: int, now: int, held_msat: int = 0
    ) -> int | None:
        """Give back ``amount_msat`` of what the session spent (before its refund is
        decided), and release ``held_msat`` of a call that ended; the balance after, or
        None when nothing changed."""

        instance = self._instance_id
        if self._db.postgres:
            args = (amount_msat, now, session_id, held_msat, instance)
            found = await self._db.write_rows(_CREDIT_AND_RELEASE, args)
            return int(found[0][0]) if found else None

        def run(conn: Connection) -> int | None:
            rows = conn.execute(_CREDIT, (amount_msat, now, session_id, held_msat)).fetchall()
            if not rows:
                return None
            if held_msat:
                conn.execute(_RELEASE, (held_msat, session_id, instance))
            return int(rows[0][0])

        return await self._db.write(run)

    def answered(self, session_id: str, held_msat: int) -> None:
        """A call that earned its whole debit ended: its debit is no longer held. Joins
        the group commit unwaited (``Database.write_soon``; SQLite's two statements in
        one transaction): a crash before that commit leaves it held, and the
        instance's recovery gives it back (the payer's side of the doubt)."""
        instance = self._instance_id
        if self._db.postgres:
            self._db.write_soon(_ANSWERED_AND_RELEASE, (held_msat, session_id, instance))
            return
        release = (_RELEASE, (held_msat, session_id, instance))
        self._db.write_soon(_ANSWERED, (held_msat, session_id), release)

    async def give_back_held(self, instance_id: str, now: int) -> int:
        """Once the instance ``instance_id`` is gone: what its calls in flight had
        debited goes back to their sessions' balances (a call's result is never stored),
        in one transaction; how many sessions. A session whose refund is decided keeps
        it (its payout was computed without it)."""

        def go(conn: Connection) -> int:
            with transaction(conn):
                holds = conn.execute(
                    "SELECT session_id, held_msat FROM session_holds"
                    " WHERE instance_id = ? AND held_msat > 0",
                    (instance_id,),
                ).fetchall()
                count = 0
                for session_id, held in holds:
                    count += conn.execute(
                        "UPDATE sessions SET spent_msat = spent_msat - ?1,"
                        " held_msat = held_msat - ?1, updated_at = ?2 WHERE session_id = ?3"
                        " AND refund_msat IS NULL AND held_msat >= ?1 AND spent_msat >= ?1",
                        (int(held), now, session_id),
                    ).rowcount
                conn.execute("DELETE FROM session_holds WHERE instance_id = ?", (instance_id,))
                return count

        return await self._db.run_sync(go)

    async def close(self, session_id: str, reason: str, now: int) -> bool:
        """open -> closed: no debit or top-up is taken after it. True for one caller."""
        count = await self._db.write_one(
            "UPDATE sessions SET status = 'closed', closed_at = ?1, close_reason = ?2,"
            " updated_at = ?1 WHERE session_id = ?3 AND status = 'open'",
            (now, reason, session_id),
        )
        return count == 1

    async def decide_refund(self, session_id: str, now: int, held_since: int) -> Session | None:
        """Once per closed session: the refund is the balance left (pending a payout, or
        skipped when nothing is left). Only once no call of any instance holds a debit
        (a call under way may still fail and be credited, and a credit after the decision
        is refused), or once the session closed before ``held_since``: what is held that
        long is an answered call whose release was lost, counted spent. The session, or
        None (decided already, or a call still holds a debit)."""

        def go(conn: Connection) -> Session | None:
            rows = conn.execute(
                "UPDATE sessions SET refund_msat = deposit_msat - spent_msat,"
                " payout_status = CASE WHEN deposit_msat > spent_msat THEN 'pending'"
                " ELSE 'skipped' END, updated_at = ?"
                " WHERE session_id = ? AND status = 'closed' AND refund_msat IS NULL"
                " AND (held_msat = 0 OR closed_at < ?)" + _RETURNING,
                (now, session_id, held_since),
            ).fetchall()
            return _session_of(rows[0]) if rows else None

        return await self._db.run_sync(go)

    async def claim_payout(self, session_id: str, payout_hash: str, now: int) -> Session | None:
        """pending/failed -> paying before the node is asked to pay: one claimer per
        attempt, and never while an earlier attempt's outcome is unknown."""

        def go(conn: Connection) -> Session | None:
            rows = conn.execute(
                "UPDATE sessions SET payout_status = 'paying', payout_hash = ?,"
                " payout_attempts = payout_attempts + 1, updated_at = ?"
                " WHERE session_id = ? AND payout_status IN ('pending', 'failed')" + _RETURNING,
                (payout_hash, now, session_id),
            ).fetchall()
            return _session_of(rows[0]) if rows else None

        return await self._db.run_sync(go)

    async def payout_outcome(
        self,
        session_id: str,
        status: str,
        now: int,
        *,
        fee_msat: int | None = None,
        error: str | None = None,
        retry_at: int | None = None,
    ) -> bool:
        """paying -> succeeded, or -> failed (retried from ``retry_at``)."""
        if status not in ("succeeded", "failed"):
            raise ValueError("a payout attempt ends succeeded or failed")
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE sessions SET payout_status = ?, payout_fee_msat = COALESCE(?,"
                " payout_fee_msat), payout_error = ?, payout_next_at = ?, updated_at = ?"
                " WHERE session_id = ? AND payout_status = 'paying'",
                (status, fee_msat, error, retry_at, now, session_id),
            )
        )
        return int(cur.rowcount) == 1

    async def note_payout_error(self, session_id: str, error: str) -> None:
        await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE sessions SET payout_error = ? WHERE session_id = ?", (error, session_id)
            )
        )

    async def idle(self, before: int) -> list[str]:
        """Open sessions with no debit or top-up since ``before``."""
        return await self._db.run_sync(
            lambda conn: [
                str(r[0])
                for r in conn.execute(
                    "SELECT session_id FROM sessions WHERE status = 'open' AND last_used_at < ?",
                    (before,),
                )
            ]
        )

    async def undecided(self) -> list[str]:
        """Closed sessions whose refund is not decided yet (a close a crash cut short)."""
        return await self._db.run_sync(
            lambda conn: [
                str(r[0])
                for r in conn.execute(
                    "SELECT session_id FROM sessions WHERE status = 'closed'"
                    " AND refund_msat IS NULL"
                )
            ]
        )

    async def payouts_due(self, now: int) -> list[str]:
        """Payouts to attempt now: decided and never tried, or failed and due again."""
        return await self._db.run_sync(
            lambda conn: [
                str(r[0])
                for r in conn.execute(
                    "SELECT session_id FROM sessions WHERE payout_status IN ('pending', 'failed')"
                    " AND (payout_next_at IS NULL OR payout_next_at <= ?)",
                    (now,),
                )
            ]
        )

    async def payouts_paying(self) -> list[tuple[str, str, int]]:
        """(session id, payout hash, updated_at) of attempts whose outcome is unknown."""
        return await self._db.run_sync(
            lambda conn: [
                (str(r[0]), str(r[1] or ""), int(r[2]))
                for r in conn.execute(
                    "SELECT session_id, payout_hash, updated_at FROM sessions"
                    " WHERE payout_status = 'paying'"
                )
            ]
        )

    async def payout_problems(self) -> list[dict[str, Any]]:
        """Session payouts the operator should look at: failed (retried) or unknown."""

        def go(conn: Connection) -> list[dict[str, Any]]:
            keys = (
                "session_id",
                "refund_msat",
                "payout_status",
                "payout_error",
                "payout_attempts",
                "closed_at",
                "close_reason",
                "updated_at",
            )
            rows = conn.execute(
                f"SELECT {', '.join(keys)} FROM sessions"
                " WHERE payout_status IN ('failed', 'paying')"
                " ORDER BY updated_at DESC LIMIT 200"
            ).fetchall()
            return [dict(zip(keys, row, strict=True)) for row in rows]

        return await self._db.run_sync(go)
