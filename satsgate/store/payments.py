"""Payments: one invoice and the one call it pays for.

Every change of a payment's status is one conditional UPDATE whose rowcount (or
RETURNING row) is checked: unpaid -> paid (:meth:`PaymentRepository.mark_paid`),
paid -> serving, the spend (:meth:`PaymentRepository.spend`,
:meth:`PaymentRepository.spend_token`, :meth:`PaymentRepository.spend_for_job`),
paid -> refunded (``RefundRepository.refund_unspent``). Spend and refund both start
from ``status = 'paid'``, so of a spend and a refund of one payment exactly one wins.

``serving`` means spent on its call with neither its answer nor its refund recorded
yet. It becomes ``spent`` when the answer is recorded (:meth:`PaymentRepository.answered`,
for a synchronous call in the group commit after its response; ``JobRepository.finish``
for a job's result) or with its refund in one transaction (``RefundRepository
.add_for_spent``). What a crash leaves ``serving`` (:meth:`PaymentRepository.serving`)
was never answered: the next start refunds it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from satsgate.store.cursors import UPSERT_CURSOR
from satsgate.store.engine import Engine
from satsgate.store.jobs import insert_job
from satsgate.store.rows import Job, Payment, PaymentStatus
from satsgate.store.sql import Connection, StoreUnavailable, transaction

T = TypeVar("T")

# The payments table's columns are Payment's fields, in order: rows map positionally.
_PAYMENT_COLUMNS = Payment._fields
_STATUS_INDEX = _PAYMENT_COLUMNS.index("status")
_INSERT_PAYMENT = (
    f"INSERT INTO payments ({', '.join(_PAYMENT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(_PAYMENT_COLUMNS))})"
)
_SELECT_PAYMENT = f"SELECT {', '.join(_PAYMENT_COLUMNS)} FROM payments WHERE "
_SPEND = (
    "UPDATE payments SET status = 'serving', spent_at = ?, served_by = ?"
    " WHERE payment_id = ? AND status = 'paid'"
)
_ANSWERED = "UPDATE payments SET status = 'spent' WHERE payment_id = ? AND status = 'serving'"
# A spent payment's call taken up by the instance that won its claim (a free retry, a
# held request's release, an AI call's confirmation): in the claim's transaction, so that
# only this instance's death interrupts it (args: instance id, payment id).
SERVED_HERE = "UPDATE payments SET served_by = ? WHERE payment_id = ? AND status = 'serving'"
_SPEND_TOKEN = (
    "UPDATE payments SET status = 'serving', spent_at = ?, served_by = ?"
    " WHERE payment_hash = ? AND token_id = ? AND service = ? AND status = 'paid'"
    f" AND amount_msat >= ? RETURNING {', '.join(_PAYMENT_COLUMNS)}"
)
_MARK_PAID = (
    "UPDATE payments SET status = 'paid', paid_at = ?, received_msat = ?"
    " WHERE payment_hash = ? AND status = 'unpaid' AND amount_msat <= ?"
)

# Unpaid rows deleted per transaction (see PaymentRepository.prune_unpaid); through the
# partial index of unpaid rows by expiry.
PRUNE_BATCH = 1000
_PRUNE_UNPAID = (
    "DELETE FROM payments WHERE payment_id IN (SELECT payment_id FROM payments"
    " WHERE status = 'unpaid' AND expires_at < ? LIMIT ?)"
)

# Invoices still payable, of every kind (a call's, a session deposit's, an appeal's).
_OUTSTANDING_UNPAID = (
    "SELECT COUNT(*), MIN(expires_at) FROM payments WHERE status = 'unpaid' AND expires_at > ?"
)

_PAYMENT_STATUSES = {str(status): status for status in PaymentStatus}


def _payment_of(row: Sequence[Any]) -> Payment:
    values = list(row)  # in Payment's field order (see _PAYMENT_COLUMNS)
    values[_STATUS_INDEX] = _PAYMENT_STATUSES[values[_STATUS_INDEX]]
    return Payment._make(values)


def _payment_where_args(conn: Connection, *, clause: str, args: Sequence[Any]) -> Payment | None:
    row = conn.execute(_SELECT_PAYMENT + clause, args).fetchone()
    return None if row is None else _payment_of(row)


class PaymentRepository:
    """The hot paths' point reads and one-statement writes run on the loop's connection
    (see :class:`satsgate.store.engine.Database`); settlement and pruning on the store
    thread."""

    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        # The instance that spends a payment serves its call (``served_by``): its crash
        # is what refunds the call, never another instance's restart.
        self._instance_id = instance_id
        # Spends whose outcome the store did not tell (the connection cut at the commit:
        # StoreUnavailable), as (column, value): one that did commit is a call spent and
        # never served (see :meth:`unserved_in_doubt`). A credential's retry takes the
        # same path as its first attempt, so it spends by the same key.
        self._in_doubt: set[tuple[str, str]] = set()

    async def insert(self, payment: Payment) -> None:
        values = [getattr(payment, c) for c in _PAYMENT_COLUMNS]
        values[_STATUS_INDEX] = str(payment.status)
        await self._db.write_one(_INSERT_PAYMENT, values)

    async def get(self, payment_id: str) -> Payment | None:
        rows = await self._db.read_rows(_SELECT_PAYMENT + "payment_id = ?", (payment_id,))
        return _payment_of(rows[0]) if rows else None

    async def get_by_hash(self, payment_hash: str) -> Payment | None:
        rows = await self._db.read_rows(_SELECT_PAYMENT + "payment_hash = ?", (payment_hash,))
        return _payment_of(rows[0]) if rows else None

    async def mark_paid(
        self,
        payment_hash: str,
        received_msat: int,
        paid_at: int,
        cursor: tuple[str, int] | None = None,
    ) -> bool:
        """unpaid -> paid, and (atomically with it) persist the settlement cursor.

        Returns False when the payment was already paid (or is not ours): settling
        twice is harmless. A settlement for less than the invoice amount is not
        accepted as payment.
        """

        def go(conn: Connection) -> bool:
            with transaction(conn):
                cur = conn.execute(
                    _MARK_PAID, (paid_at, received_msat, payment_hash, received_msat)
                )
                if cursor is not None:
                    conn.execute(UPSERT_CURSOR, cursor)
                return cur.rowcount == 1

        return await self._db.run_sync(go)

    async def spend(self, payment_id: str, now: int) -> bool:
        """paid -> serving. The one rule of pay-per-call: exactly one caller gets True."""
        args = (now, self._instance_id, payment_id)
        return (
            await self._attempt(("payment_id", payment_id), self._db.write_one(_SPEND, args)) == 1
        )

    async def _attempt(self, key: tuple[str, str], spending: Awaitable[T]) -> T:
        """Run a spend of the payment ``key`` names, whose outcome is truthy when it
        spent, keeping :attr:`_in_doubt` true: a spend whose outcome the store did not
        tell is in doubt. While another attempt runs, an earlier one's doubt is set aside
        (the sweep must not refund the row this attempt may be spending for a call about
        to run); it comes back unless this attempt spent the payment, which proves the
        earlier one never committed."""
        was_in_doubt = key in self._in_doubt
        self._in_doubt.discard(key)
        try:
            outcome = await spending
        except StoreUnavailable:
            self._in_doubt.add(key)
            raise
        except BaseException:
            if was_in_doubt:
                self._in_doubt.add(key)
            raise
        if was_in_doubt and not outcome:
            self._in_doubt.add(key)
        return outcome

    async def spend_for_job(self, job: Job, now: int) -> bool:
        """paid -> serving for the job's payment, and the job's row, in one transaction;
        False (and no row) when the payment is not paid. On the store thread: a job
        submission is rare and slow, never a hot path."""

        def go(conn: Connection) -> bool:
            with transaction(conn):
                spend = (now, self._instance_id, job.payment_id)
                if conn.execute(_SPEND, spend).rowcount != 1:
                    return False
                insert_job(conn, job)
                return True

        return await self._attempt(("payment_id", job.payment_id), self._db.run_sync(go))

    def answered(self, payment_id: str) -> None:
        """serving -> spent: the call's answer went out. Joins the loop iteration's group
        commit without waiting for it (see ``Database.write_soon``): a crash before that
        commit leaves the call serving, so it is refunded at the next start though it
        was answered, the payer's side of the doubt."""
        self._db.write_soon(_ANSWERED, (payment_id,))

    async def serving(self, served_by: str) -> list[Payment]:
        """Every payment spent on a call by instance ``served_by`` whose answer or refund
        is not recorded. A scan of the table, run only when an instance is gone: an index
        of serving rows would cost every paid call two index writes (measured: about as
        much as the answer's UPDATE)."""
        return await self._db.run_sync(
            lambda conn: [
                _payment_of(row)
                for row in conn.execute(
                    _SELECT_PAYMENT + "status = 'serving' AND served_by = ?", (served_by,)
                ).fetchall()
            ]
        )

    async def adopt(self, payment_id: str, gone: str) -> bool:
        """What a gone instance was serving for this payment is served on here (a remote
        job, an AI call's watch): True for the one instance that takes it."""
        count = await self._db.write_one(
            "UPDATE payments SET served_by = ? WHERE payment_id = ? AND served_by = ?",
            (self._instance_id, payment_id, gone),
        )
        return count == 1

    async def spend_token(
        self, payment_hash: str, token_id: str, service: str, price_msat: int, now: int
    ) -> Payment | None:
        """paid -> serving for the payment of this macaroon token, if it covers ``price_msat``;
        the spent row, or None when no such paid payment exists (nothing changed).

        The same one conditional UPDATE as :meth:`spend`, reading the row as it writes.
        """
        args = (now, self._instance_id, payment_hash, token_id, service, price_msat)
        found = await self._attempt(
            ("payment_hash", payment_hash), self._db.write_rows(_SPEND_TOKEN, args)
        )
        return _payment_of(found[0]) if found else None

    async def unserved_in_doubt(self) -> list[Payment]:
        """Of the spends in doubt, those that did commit: serving on this instance, with
        no call running for them (the caller was answered 503, and a retry of the
        credential finds it spent). A spend found not to have happened is forgotten; the
        others stay in doubt until :meth:`resolved` (their refund issued)."""
        found: list[Payment] = []
        for column, value in list(self._in_doubt):
            clause = f"{column} = ? AND status = 'serving' AND served_by = ?"
            args = (value, self._instance_id)
            row = await self._db.read(functools.partial(_payment_where_args, clause=clause,
                                                        args=args))  # fmt: skip
            if row is None:
                self._in_doubt.discard((column, value))
            else:
                found.append(row)
        return found

    def resolved(self, payment: Payment) -> None:
        """A spend in doubt is settled (its refund issued): no longer in doubt."""
        self._in_doubt.discard(("payment_id", payment.payment_id))
        self._in_doubt.discard(("payment_hash", payment.payment_hash))

    async def outstanding_unpaid(self, now: int) -> tuple[int, int | None]:
        """How many invoices are unpaid and still payable at ``now``, and when the
        first of them expires (None: none). On the store thread, through the partial
        index of unpaid rows by expiry."""

        def run(conn: Connection) -> tuple[int, int | None]:
            count, first = conn.execute(_OUTSTANDING_UNPAID, (now,)).fetchone()
            return int(count), None if first is None else int(first)

        return await self._db.run_sync(run)

    async def prune_unpaid(self, expired_before: int, batch: int = PRUNE_BATCH) -> int:
        """Delete payments never paid whose invoice expired before ``expired_before``;
        how many.

        A 402 costs the caller nothing, so unpaid rows would pile up forever. An
        expired invoice can no longer be paid; the caller keeps a margin of days so
        a settlement that raced the expiry (applied late after downtime) still finds
        its row.

        In transactions of at most ``batch`` rows, each its own job on the store
        thread: the loop's group commits and the settlements (queued on the same
        thread) get the write lock between two of them. One DELETE of 2 M rows held it
        7.6 s; a batch of 1,000 holds it for milliseconds.
        """
        total = 0
        while True:
            cur = await self._db.run_sync(
                lambda conn: conn.execute(_PRUNE_UNPAID, (expired_before, batch))
            )
            total += int(cur.rowcount)
            if cur.rowcount < batch:
                return total
