"""Ecash (Cashu, NUT-24): receipts of tokens taken as payment, the proofs the node holds,
change and refund tokens, and melts into the node's Lightning balance.

The exactly-once rule: :meth:`EcashRepository.claim` inserts the receipt and one row per
presented proof's ``Y`` (primary key) in one transaction, with the blinded outputs the
swap will send (secret and blinding factor kept, NUT-09), BEFORE the mint is asked. A
token presented again, at the same moment or later, finds its Ys taken and is never
swapped by two requests at once. The mint's own double-spend answer is the second guard
(a token also spent elsewhere).

A swap whose answer was lost leaves the receipt 'unknown'. The mint's proof states
settle it: unspent -> 'released' (the next presentation claims it again,
:meth:`reclaim`, and swaps the SAME saved outputs); spent -> NUT-09 restore of the saved
outputs: signed, the value is satsgate's and the receipt is redeemed; not signed ->
'rejected' (spent elsewhere). Outputs are kept while a swap of them could be signed
(only a token the mint refused as invalid, its proofs unspent, is forgotten:
:meth:`forget`), and every settlement is conditional on the attempt's ``op_id``: a slow
request never undoes a newer retry's claim.

A redeemed receipt becomes a payment row (``mode = 'cashu'``, already paid) in the same
transaction that stores its proofs, so the spend rule, refunds after the spend and the
start-up sweep treat it like any payment. A refund of such a payment is a ``refunds`` row
(status ``paid``: the token is handed over in the answer) plus its token here, written
with the proofs it gives away and the move from serving to spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.payments import _INSERT_PAYMENT, _PAYMENT_COLUMNS, _payment_of
from satsgate.store.refunds import _insert_refund, _refunds_where
from satsgate.store.rows import Payment, Refund
from satsgate.store.sql import Connection, is_integrity_error, snapshot


@dataclass(frozen=True)
class Output:
    """A blinded output saved before the mint signs it (NUT-00 B_, with its secret and r)."""

    b_: str
    keyset_id: str
    amount: int
    secret: str
    r: str
    role: str  # 'keep', 'change', 'refund', 'melt_change'
    position: int


@dataclass(frozen=True)
class HeldProof:
    """A proof satsgate owns (or gave away): NUT-00 fields and its Y."""

    y: str
    mint: str
    keyset_id: str
    amount: int
    secret: str
    c: str


@dataclass(frozen=True)
class Receipt:
    receipt_id: str
    service: str
    request_digest: str
    mint: str
    unit: str
    amount: int
    fee: int
    price: int
    change: int
    status: str
    payment_id: str | None
    change_token: str | None
    error: str | None
    op_id: str  # the current swap attempt: only it may settle the receipt
    updated_at: int = 0  # read from the row (unset when a receipt is first made)
    # Read from the row: the instance that sent its swap is gone (no request waits on it).
    sender_gone: bool = False


@dataclass(frozen=True)
class Melt:
    melt_id: str
    mint: str
    quote: str
    bolt11: str
    payment_hash: str
    amount: int
    fee_reserve: int
    inputs: int
    input_fee: int
    change: int | None
    state: str
    node_settled: bool


_RECEIPT_COLUMNS = (
    "receipt_id, service, request_digest, mint, unit, amount, fee, price, change, status,"
    " payment_id, change_token, error, op_id"
)
_SENDER_GONE = "swapping_by IN (SELECT instance_id FROM instances WHERE gone_at IS NOT NULL)"
_RECEIPT_READ = f"{_RECEIPT_COLUMNS}, updated_at, {_SENDER_GONE}"
_MELT_COLUMNS = (
    "melt_id, mint, quote, bolt11, payment_hash, amount, fee_reserve, inputs, input_fee,"
    " change, state, node_settled"
)
_PROOF_COLUMNS = "y, mint, keyset_id, amount, secret, c"


def _receipt(row: Sequence[Any] | None) -> Receipt | None:
    if row is None:
        return None
    *columns, sender_gone = row  # the columns of _RECEIPT_READ, then _SENDER_GONE
    return replace(Receipt(*columns), sender_gone=bool(sender_gone))


def _melt(row: Sequence[Any]) -> Melt:
    values = list(row)
    values[-1] = bool(values[-1])
    return Melt(*values)


def _insert_outputs(conn: Connection, op_id: str, outputs: Sequence[Output]) -> None:
    conn.executemany(
        "INSERT INTO ecash_outputs (b_, op_id, keyset_id, amount, secret, r, role, position)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(o.b_, op_id, o.keyset_id, o.amount, o.secret, o.r, o.role, o.position) for o in outputs],
    )


def _insert_proofs(
    conn: Connection,
    proofs: Sequence[HeldProof],
    payment_id: str | None,
    state: str,
    op_id: str | None,
    now: int,
    *,
    ignore: bool = False,
) -> None:
    """``ignore``: a proof already stored (by its Y) stays as it is."""
    conn.executemany(
        "INSERT INTO ecash_proofs (y, mint, keyset_id, amount, secret, c, payment_id, state,"
        " op_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        + (" ON CONFLICT DO NOTHING" if ignore else ""),
        [
            (p.y, p.mint, p.keyset_id, p.amount, p.secret, p.c, payment_id, state, op_id, now)
            for p in proofs
        ],
    )


class EcashRepository:
    """Every statement runs on the store thread: an ecash payment waits on its mint
    anyway, so none of this is a hot path of the loop's connection."""

    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        self._instance_id = instance_id  # this instance: the swaps it sends are its own

    # -- receipts ---------------------------------------------------------------------------

    async def claim(
        self, receipt: Receipt, ys: Sequence[str], outputs: Sequence[Output], now: int
    ) -> bool:
        """Record a presented token before its swap: the receipt, one row per proof's Y and
        the swap's outputs, in one transaction. False (nothing written) when one of the Ys
        was presented before: the token is spent (or being spent) already."""

        def go(conn: Connection) -> bool:
            try:
                conn.execute(
                    f"INSERT INTO ecash_receipts ({_RECEIPT_COLUMNS}, created_at, updated_at,"
                    " swapping_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*_receipt_values(receipt), now, now, self._instance_id),
                )
                conn.executemany(
                    "INSERT INTO ecash_inputs (y, receipt_id) VALUES (?, ?)",
                    [(y, receipt.receipt_id) for y in ys],
                )
            except Exception as exc:
                if is_integrity_error(exc):
                    raise _Taken from None
                raise
            _insert_outputs(conn, receipt.receipt_id, outputs)
            return True

        try:
            return await self._db.run_in_transaction(go)
        except _Taken:
            return False

    async def receipt_of_inputs(self, ys: Sequence[str]) -> Receipt | None:
        """The receipt that first took any of these Ys (the earlier presentation)."""
        marks = ", ".join("?" * len(ys))
        return await self._db.run_sync(
            lambda conn: _receipt(
                conn.execute(
                    f"SELECT {_RECEIPT_READ} FROM ecash_receipts WHERE receipt_id ="
                    f" (SELECT receipt_id FROM ecash_inputs WHERE y IN ({marks}) LIMIT 1)",
                    tuple(ys),
                ).fetchone()
            )
        )

    async def get_receipt(self, receipt_id: str) -> Receipt | None:
        return await self._db.run_sync(
            lambda conn: _receipt(
                conn.execute(
                    f"SELECT {_RECEIPT_READ} FROM ecash_receipts WHERE receipt_id = ?",
                    (receipt_id,),
                ).fetchone()
            )
        )

    async def unresolved(self, updated_before: int) -> list[Receipt]:
        """Receipts whose swap's outcome is not known ('swapping' or 'unknown') and that
        no request is still waiting on: their instance is gone (a crash left them), or
        they were not touched since ``updated_before`` (their request gave up)."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                f"SELECT {_RECEIPT_READ} FROM ecash_receipts"
                f" WHERE status IN ('swapping', 'unknown') AND (updated_at < ? OR {_SENDER_GONE})",
                (updated_before,),
            ).fetchall()
        )
        return [receipt for row in rows if (receipt := _receipt(row)) is not None]

    async def inputs_of(self, receipt_id: str) -> list[str]:
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT y FROM ecash_inputs WHERE receipt_id = ?", (receipt_id,)
            ).fetchall()
        )
        return [str(row[0]) for row in rows]

    async def outputs(self, op_id: str) -> list[Output]:
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT b_, keyset_id, amount, secret, r, role, position FROM ecash_outputs"
                " WHERE op_id = ? ORDER BY position",
                (op_id,),
            ).fetchall()
        )
        return [Output(*row) for row in rows]

    async def reclaim(
        self, receipt_id: str, op_id: str, service: str, request_digest: str, now: int
    ) -> Receipt | None:
        """A released token presented again: its receipt back to 'swapping' under a new
        attempt ``op_id``, for this request's call (``service``, ``request_digest``), in one
        conditional statement. The saved outputs are swapped again (never new ones: every
        attempt's signatures are restorable from the same outputs). None when the receipt
        is not released (another retry claimed it first, or it was settled)."""

        def go(conn: Connection) -> Receipt | None:
            changed = conn.execute(
                "UPDATE ecash_receipts SET status = 'swapping', op_id = ?, service = ?,"
                " request_digest = ?, error = NULL, updated_at = ?, swapping_by = ?"
                " WHERE receipt_id = ? AND status = 'released'",
                (op_id, service, request_digest, now, self._instance_id, receipt_id),
            ).rowcount
            if changed != 1:
                return None
            return _receipt(
                conn.execute(
                    f"SELECT {_RECEIPT_READ} FROM ecash_receipts WHERE receipt_id = ?",
                    (receipt_id,),
                ).fetchone()
            )

        return await self._db.run_in_transaction(go)

    async def settle_attempt(
        self, receipt: Receipt, status: str, error: str | None, now: int
    ) -> bool:
        """End the swap attempt ``receipt.op_id`` without a payment: 'unknown' (its answer
        was lost, or the mint holds the proofs pending), 'released' (the mint proved every
        proof unspent: the token may be presented again; Ys and outputs stay) or
        'rejected' (spent, and none of the saved outputs signed: not by this node). One
        conditional statement: False when another attempt took the receipt over or it was
        settled meanwhile (then nothing changes)."""
        changed = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE ecash_receipts SET status = ?, error = ?, updated_at = ?"
                " WHERE receipt_id = ? AND op_id = ? AND status IN ('swapping', 'unknown')",
                (status, None if error is None else error[:500], now, receipt.receipt_id,
                 receipt.op_id),
            ).rowcount
        )  # fmt: skip
        return bool(changed == 1)

    async def forget(self, receipt: Receipt) -> bool:
        """A token the mint refused as invalid, its proofs unspent (released by this
        attempt): the receipt, its Ys and its outputs deleted, in one transaction, so
        invalid tokens leave nothing behind. Only while the receipt is still released by
        this attempt (False otherwise: another request claimed it again)."""

        def go(conn: Connection) -> bool:
            if (
                conn.execute(
                    "SELECT 1 FROM ecash_receipts WHERE receipt_id = ? AND op_id = ?"
                    " AND status = 'released'",
                    (receipt.receipt_id, receipt.op_id),
                ).fetchone()
                is None
            ):
                return False
            conn.execute("DELETE FROM ecash_inputs WHERE receipt_id = ?", (receipt.receipt_id,))
            conn.execute("DELETE FROM ecash_outputs WHERE op_id = ?", (receipt.receipt_id,))
            conn.execute("DELETE FROM ecash_receipts WHERE receipt_id = ?", (receipt.receipt_id,))
            return True

        return await self._db.run_in_transaction(go)

    async def redeemed(
        self,
        receipt_id: str,
        kept: Sequence[HeldProof],
        change: Sequence[HeldProof],
        change_token: str | None,
        payment: Payment,
        now: int,
    ) -> bool:
        """The mint signed the receipt's outputs (a swap's answer, or NUT-09 restore): the
        receipt redeemed, the kept proofs (held), the change proofs (given to the payer)
        and the call's payment (paid, mode 'cashu'), in one transaction. The signatures
        are the truth whatever state a lost answer left the receipt in ('swapping',
        'unknown', 'released', 'rejected'): only 'redeemed' is final. False when it was
        redeemed already (two settlements of one swap at once); then the proofs are still
        kept, never dropped: the same outputs give the same proofs, stored once (any other
        would be held under the receipt's payment)."""
        values = [getattr(payment, c) for c in _PAYMENT_COLUMNS]
        values[_PAYMENT_COLUMNS.index("status")] = str(payment.status)

        def go(conn: Connection) -> bool:
            if (
                conn.execute(
                    "UPDATE ecash_receipts SET status = 'redeemed', payment_id = ?,"
                    " change_token = ?, error = NULL, updated_at = ? WHERE receipt_id = ?"
                    " AND status != 'redeemed'",
                    (payment.payment_id, change_token, now, receipt_id),
                ).rowcount
                == 1
            ):
                conn.execute(_INSERT_PAYMENT, values)
                _insert_proofs(conn, kept, payment.payment_id, "held", receipt_id, now)
                _insert_proofs(conn, change, payment.payment_id, "change", receipt_id, now)
                return True
            row = conn.execute(
                "SELECT payment_id FROM ecash_receipts WHERE receipt_id = ?", (receipt_id,)
            ).fetchone()
            owner = None if row is None else row[0]
            _insert_proofs(conn, kept, owner, "held", receipt_id, now, ignore=True)
            _insert_proofs(conn, change, owner, "change", receipt_id, now, ignore=True)
            return False

        return await self._db.run_in_transaction(go)

    # -- refunds ----------------------------------------------------------------------------

    async def payment_proofs(self, payment_id: str, state: str = "held") -> list[HeldProof]:
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                f"SELECT {_PROOF_COLUMNS} FROM ecash_proofs WHERE payment_id = ? AND state = ?"
                " ORDER BY amount DESC",
                (payment_id, state),
            ).fetchall()
        )
        return [HeldProof(*row) for row in rows]

    async def swap_for_refund(
        self, op_id: str, inputs: Sequence[str], outputs: Sequence[Output]
    ) -> bool:
        """Before a refund's swap: its inputs held -> swapped (by this op) and its outputs
        saved, in one transaction; False when one input is no longer held."""

        def go(conn: Connection) -> bool:
            marks = ", ".join("?" * len(inputs))
            changed = conn.execute(
                f"UPDATE ecash_proofs SET state = 'swapped', op_id = ? WHERE state = 'held'"
                f" AND y IN ({marks})",
                (op_id, *inputs),
            ).rowcount
            if changed != len(inputs):
                raise _Taken
            _insert_outputs(conn, op_id, outputs)
            return True

        try:
            return await self._db.run_in_transaction(go)
        except _Taken:
            return False

    async def stale_swaps(self, created_before: int) -> list[tuple[str, str | None]]:
        """Refund swaps whose outcome was never recorded (a lost answer, a crash): (op id,
        payment id) of inputs left 'swapped' with no proof of that op made since, whose
        outputs were saved before ``created_before``."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT DISTINCT e.op_id, e.payment_id FROM ecash_proofs e"
                " WHERE e.state = 'swapped' AND NOT EXISTS (SELECT 1 FROM ecash_proofs n"
                " WHERE n.op_id = e.op_id AND n.state != 'swapped')"
                " AND (SELECT MIN(o.created_at) FROM ecash_outputs o WHERE o.op_id = e.op_id) < ?",
                (created_before,),
            ).fetchall()
        )
        return [(str(r[0]), r[1]) for r in rows]

    async def swap_restored(
        self, op_id: str, payment_id: str | None, proofs: Sequence[HeldProof], now: int
    ) -> None:
        """An interrupted refund swap's outputs, restored from the mint, held again."""

        def go(conn: Connection) -> None:
            if not conn.execute(
                "UPDATE ecash_proofs SET state = 'swap_restored' WHERE state = 'swapped'"
                " AND op_id = ?",
                (op_id,),
            ).rowcount:
                return  # restored already (by another run)
            _insert_proofs(conn, proofs, payment_id, "held", op_id, now)

        await self._db.run_in_transaction(go)

    async def swapped_inputs(self, op_id: str) -> list[str]:
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT y FROM ecash_proofs WHERE state = 'swapped' AND op_id = ?", (op_id,)
            ).fetchall()
        )
        return [str(r[0]) for r in rows]

    async def unswap(self, op_id: str) -> None:
        """A refund's swap the mint refused: its inputs are held again."""

        def go(conn: Connection) -> None:
            conn.execute(
                "UPDATE ecash_proofs SET state = 'held', op_id = NULL"
                " WHERE state = 'swapped' AND op_id = ?",
                (op_id,),
            )
            conn.execute("DELETE FROM ecash_outputs WHERE op_id = ?", (op_id,))

        await self._db.run_in_transaction(go)

    async def add_refund(
        self,
        refund: Refund,
        mint: str,
        token: str,
        fee: int,
        given: Sequence[HeldProof],
        new_held: Sequence[HeldProof],
        now: int,
    ) -> bool:
        """A refund paid in ecash, never more in total than was paid: the refund row
        (status paid), its token, the given proofs (held ones become refunded; new ones,
        from a refund's swap, are inserted so), the proofs kept from that swap (held) and
        serving -> spent, in one transaction. False when it would exceed the payment or a
        given held proof is no longer the node's: then nothing is refunded, and proofs new
        from a swap are kept as held (never lost)."""

        def go(conn: Connection) -> bool:
            row = conn.execute(
                "SELECT p.amount_msat - COALESCE(SUM(r.amount_msat), 0) FROM payments p"
                " LEFT JOIN refunds r ON r.payment_id = p.payment_id AND r.status != 'expired'"
                " WHERE p.payment_id = ? AND p.status IN ('serving', 'spent', 'refunded')"
                " GROUP BY p.payment_id, p.amount_msat",
                (refund.payment_id,),
            ).fetchone()
            marks = ", ".join("?" * len(given))
            states = dict(
                conn.execute(
                    f"SELECT y, state FROM ecash_proofs WHERE y IN ({marks})",
                    tuple(p.y for p in given),
                ).fetchall()
            )
            old = [p for p in given if states.get(p.y) == "held"]
            new = [p for p in given if p.y not in states]
            fits = row is not None and row[0] is not None and row[0] >= refund.amount_msat
            if not fits or len(old) + len(new) != len(given):
                _insert_proofs(
                    conn, [*new, *new_held], refund.payment_id, "held", refund.refund_id, now
                )
                return False
            for proof in old:
                conn.execute(
                    "UPDATE ecash_proofs SET state = 'refunded', op_id = ? WHERE y = ?",
                    (refund.refund_id, proof.y),
                )
            _insert_proofs(conn, new, refund.payment_id, "refunded", refund.refund_id, now)
            _insert_proofs(conn, new_held, refund.payment_id, "held", refund.refund_id, now)
            _insert_refund(conn, refund)
            conn.execute(
                "INSERT INTO ecash_refunds (refund_id, payment_id, mint, amount, fee, token)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (refund.refund_id, refund.payment_id, mint, refund.amount_msat // 1000, fee, token),
            )
            conn.execute(
                "UPDATE payments SET status = 'spent' WHERE payment_id = ? AND status = 'serving'",
                (refund.payment_id,),
            )
            return True

        return await self._db.run_in_transaction(go)

    async def refund_of_payment(self, payment_id: str) -> tuple[Refund, str, str] | None:
        """The latest ecash refund of a payment: (refund, token, mint)."""

        def go(conn: Connection) -> tuple[Refund, str, str] | None:
            row = conn.execute(
                "SELECT e.refund_id, e.token, e.mint FROM ecash_refunds e"
                " JOIN refunds r ON r.refund_id = e.refund_id"
                " WHERE e.payment_id = ? ORDER BY r.created_at DESC, e.refund_id DESC LIMIT 1",
                (payment_id,),
            ).fetchone()
            if row is None:
                return None
            refunds = _refunds_where(conn, "refund_id = ?", (row[0],))
            return (refunds[0], str(row[1]), str(row[2])) if refunds else None

        return await self._db.run_sync(go)

    async def payment(self, payment_id: str) -> Payment | None:
        row = await self._db.run_sync(
            lambda conn: conn.execute(
                f"SELECT {', '.join(_PAYMENT_COLUMNS)} FROM payments WHERE payment_id = ?",
                (payment_id,),
            ).fetchone()
        )
        return None if row is None else _payment_of(row)

    # -- melts ------------------------------------------------------------------------------

    async def meltable(self, mint: str) -> list[HeldProof]:
        """Held proofs of ``mint`` no call may still need: their payment's call is answered
        (spent) or they came back from a melt (no payment)."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                f"SELECT {', '.join('e.' + c.strip() for c in _PROOF_COLUMNS.split(','))}"
                " FROM ecash_proofs e LEFT JOIN payments p ON p.payment_id = e.payment_id"
                " WHERE e.state = 'held' AND e.mint = ?"
                " AND (e.payment_id IS NULL OR p.status IN ('spent', 'refunded'))"
                " ORDER BY e.amount DESC",
                (mint,),
            ).fetchall()
        )
        return [HeldProof(*row) for row in rows]

    async def begin_melt(
        self, melt: Melt, inputs: Sequence[str], outputs: Sequence[Output], now: int
    ) -> bool:
        """The melt's row (pending), its inputs held -> melting and its blank outputs, in one
        transaction; False when an input is no longer held."""

        def go(conn: Connection) -> bool:
            marks = ", ".join("?" * len(inputs))
            changed = conn.execute(
                f"UPDATE ecash_proofs SET state = 'melting', op_id = ? WHERE state = 'held'"
                f" AND y IN ({marks})",
                (melt.melt_id, *inputs),
            ).rowcount
            if changed != len(inputs):
                raise _Taken
            conn.execute(
                f"INSERT INTO ecash_melts ({_MELT_COLUMNS}, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    melt.melt_id,
                    melt.mint,
                    melt.quote,
                    melt.bolt11,
                    melt.payment_hash,
                    melt.amount,
                    melt.fee_reserve,
                    melt.inputs,
                    melt.input_fee,
                    melt.change,
                    melt.state,
                    int(melt.node_settled),
                    now,
                    now,
                ),
            )
            _insert_outputs(conn, melt.melt_id, outputs)
            return True

        try:
            return await self._db.run_in_transaction(go)
        except _Taken:
            return False

    async def melt_paid(
        self, melt_id: str, mint: str, change: Sequence[HeldProof], now: int
    ) -> None:
        """The mint paid the node's invoice: inputs melted, the returned fee reserve held."""

        def go(conn: Connection) -> None:
            if not conn.execute(
                "UPDATE ecash_melts SET state = 'paid', change = ?, updated_at = ?"
                " WHERE melt_id = ? AND state IN ('pending', 'unknown')",
                (sum(p.amount for p in change), now, melt_id),
            ).rowcount:
                return  # recorded already (by another run)
            conn.execute(
                "UPDATE ecash_proofs SET state = 'melted' WHERE state = 'melting' AND op_id = ?",
                (melt_id,),
            )
            _insert_proofs(conn, change, None, "held", melt_id, now)

        await self._db.run_in_transaction(go)

    async def melt_failed(self, melt_id: str, error: str, now: int) -> None:
        """The mint did not pay: the inputs are held again."""

        def go(conn: Connection) -> None:
            if not conn.execute(
                "UPDATE ecash_melts SET state = 'failed', error = ?, updated_at = ?"
                " WHERE melt_id = ? AND state IN ('pending', 'unknown')",
                (error[:500], now, melt_id),
            ).rowcount:
                return
            conn.execute(
                "UPDATE ecash_proofs SET state = 'held', op_id = NULL"
                " WHERE state = 'melting' AND op_id = ?",
                (melt_id,),
            )

        await self._db.run_in_transaction(go)

    async def set_melt(
        self, melt_id: str, now: int, *, state: str | None = None, node_settled: bool = False
    ) -> None:
        await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE ecash_melts SET state = COALESCE(?, state),"
                " node_settled = CASE WHEN node_settled > ? THEN node_settled ELSE ? END,"
                " updated_at = ? WHERE melt_id = ?",
                (state, int(node_settled), int(node_settled), now, melt_id),
            )
        )

    async def melts(self, *states: str) -> list[Melt]:
        marks = ", ".join("?" * len(states))
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                f"SELECT {_MELT_COLUMNS} FROM ecash_melts WHERE state IN ({marks})"
                " ORDER BY created_at",
                states,
            ).fetchall()
        )
        return [_melt(row) for row in rows]

    # -- the operator's figures -------------------------------------------------------------

    async def figures(self) -> dict[str, int]:
        """The ecash ledger (see :func:`ecash_figures`), read in one snapshot."""

        def go(conn: Connection) -> dict[str, int]:
            with snapshot(conn):
                return ecash_figures(conn)

        return await self._db.run_sync(go)


def ecash_figures(conn: Connection) -> dict[str, int]:
    """The ecash ledger, in sat. For the tokens taken: received = swap fees + change +
    kept. For what was kept: kept + melt change = refunded + refund fees + melt inputs +
    held + melting, where a paid melt's inputs = melted (paid to the node's invoice) + melt
    fees + melt change (the unused fee reserve, held again)."""
    r = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(amount), 0), COALESCE(SUM(fee), 0),"
        " COALESCE(SUM(change), 0), COALESCE(SUM(price), 0)"
        " FROM ecash_receipts WHERE status = 'redeemed'"
    ).fetchone()
    f = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(amount), 0), COALESCE(SUM(fee), 0) FROM ecash_refunds"
    ).fetchone()
    m = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(amount), 0), COALESCE(SUM(inputs), 0),"
        " COALESCE(SUM(inputs - amount - COALESCE(change, 0)), 0),"
        " COALESCE(SUM(COALESCE(change, 0)), 0),"
        " COALESCE(SUM(CASE WHEN node_settled = 1 THEN amount END), 0)"
        " FROM ecash_melts WHERE state = 'paid'"
    ).fetchone()
    states = dict(
        conn.execute("SELECT state, COALESCE(SUM(amount), 0) FROM ecash_proofs GROUP BY state")
    )
    return {
        "tokens_received": int(r[0]),
        "received_sat": int(r[1]),
        "swap_fees_sat": int(r[2]),
        "change_sat": int(r[3]),
        "kept_sat": int(r[4]),
        "refunds": int(f[0]),
        "refunded_sat": int(f[1]),
        "refund_fees_sat": int(f[2]),
        "melts": int(m[0]),
        "melted_sat": int(m[1]),
        "melt_inputs_sat": int(m[2]),
        "melt_fees_sat": int(m[3]),
        "melt_change_sat": int(m[4]),
        "melted_settled_sat": int(m[5]),
        "held_sat": int(states.get("held", 0)),
        "melting_sat": int(states.get("melting", 0)),
    }


class _Taken(Exception):
    """A lost race inside a transaction: roll it back."""


def _receipt_values(receipt: Receipt) -> tuple[Any, ...]:
    return (
        receipt.receipt_id,
        receipt.service,
        receipt.request_digest,
        receipt.mint,
        receipt.unit,
        receipt.amount,
        receipt.fee,
        receipt.price,
        receipt.change,
        receipt.status,
        receipt.payment_id,
        receipt.change_token,
        receipt.error,
        receipt.op_id,
    )
