"""The built-in dev node: real signed regtest invoices, no bitcoind.

It keeps a node key and its own SQLite file in the data dir, so invoices,
settlements and the settle counter survive restarts exactly as a real node's
would. An invoice settles only when somebody "pays" it through
:meth:`DevBackend.simulate_payment` (``POST /api/dev/pay``), which hands back the
preimage as a wallet would. Outgoing payments (refunds) are recorded, not
routed: tests read them back with :meth:`outgoing_payments`.

``outgoing_mode`` makes outgoing payments succeed (default), fail, or stay
pending, so the refund rules (pending is never failed) can be exercised.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import coincurve

from satsgate.config.secret_file import read_or_create_secret
from satsgate.lightning.backend import (
    BackendError,
    CreatedInvoice,
    InvoiceState,
    InvoiceStatus,
    NodeInfo,
    OutgoingMode,
    PaymentResult,
    PaymentState,
    Settlement,
    UnknownInvoice,
    invalid_invoice_payment,
)
from satsgate.lightning.invoices import InvalidInvoice, decode_invoice, sign_invoice

T = TypeVar("T")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS invoices (
    payment_hash TEXT PRIMARY KEY,
    preimage TEXT NOT NULL,
    bolt11 TEXT NOT NULL,
    amount_msat INTEGER NOT NULL,
    description TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    settle_index INTEGER UNIQUE,
    settled_at INTEGER
);
CREATE TABLE IF NOT EXISTS outgoing (
    payment_hash TEXT PRIMARY KEY,
    bolt11 TEXT NOT NULL,
    amount_msat INTEGER NOT NULL,
    fee_msat INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1
);
"""


DEV_NO_ROUTE = "no route found: not enough outbound liquidity (simulated by the dev node)"
DEV_FEE_TOO_HIGH = "no route within the fee cap"


def route_fee_msat(amount_msat: int, route_hints: tuple[tuple[tuple[int, int], ...], ...]) -> int:
    """What the dev node pays in fees to deliver ``amount_msat``: 1 ppt (at least 1 msat)
    to reach the payee or the entry of its private route, plus that route's hops' fees
    (each hop's base and ppm on what it forwards, from the last hop back), the cheapest of
    the routes the invoice names."""
    hints = [sum(_hop_fees(amount_msat, hops)) for hops in route_hints if hops]
    private = min(hints, default=0)
    return max(1, (amount_msat + private) // 1000) + private


def _hop_fees(amount_msat: int, hops: tuple[tuple[int, int], ...]) -> list[int]:
    fees: list[int] = []
    forwarded = amount_msat
    for base, ppm in reversed(hops):
        fee = base + forwarded * ppm // 1_000_000
        fees.append(fee)
        forwarded += fee
    return fees


class DevBackend:
    """LightningBackend for development and tests. Network is always regtest."""

    name = "dev"
    network = "regtest"

    def __init__(self, data_dir: Path) -> None:
        self._dir = Path(data_dir)
        self._db_path = self._dir / "dev_node.sqlite3"
        self._key: coincurve.PrivateKey | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dev-node")
        self._conn: sqlite3.Connection | None = None
        self._settled = asyncio.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self.outgoing_mode: OutgoingMode = "succeed"

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._run(self._open)

    def _open(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        key = read_or_create_secret(self._dir / "dev_node_key", lambda: secrets.token_hex(32))
        self._key = coincurve.PrivateKey(bytes.fromhex(key))
        self._conn = sqlite3.connect(self._db_path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # As in the store: durable at checkpoints; WAL keeps it consistent. The default
        # (FULL) syncs the disk on every invoice and costs milliseconds per 402.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)

    async def close(self) -> None:
        if self._conn is not None:
            await self._run(self._conn.close)
            self._conn = None
        self._executor.shutdown(wait=False)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BackendError("dev node is not started")
        return self._conn

    @property
    def pubkey(self) -> str:
        if self._key is None:
            raise BackendError("dev node is not started")
        return str(self._key.public_key.format().hex())

    async def info(self) -> NodeInfo:
        return NodeInfo(pubkey=self.pubkey, network=self.network, alias="satsgate-dev")

    # -- incoming ---------------------------------------------------------------------------

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> CreatedInvoice:
        if self._key is None:
            raise BackendError("dev node is not started")
        preimage = secrets.token_bytes(32)
        payment_hash = hashlib.sha256(preimage).hexdigest()
        now = int(time.time())
        key_hex = self._key.secret.hex()

        def sign_and_store() -> str:
            # Signing and the INSERT in one hop to the node thread.
            bolt11 = sign_invoice(
                network=self.network,
                amount_msat=amount_msat,
                payment_hash=payment_hash,
                payment_secret=secrets.token_hex(32),
                description=description,
                expiry_s=expiry_s,
                private_key_hex=key_hex,
                created_at=now,
            )
            self._db().execute(
                "INSERT INTO invoices (payment_hash, preimage, bolt11, amount_msat, description,"
                " created_at, expires_at) VALUES (?,?,?,?,?,?,?)",
                (
                    payment_hash,
                    preimage.hex(),
                    bolt11,
                    amount_msat,
                    description,
                    now,
                    now + expiry_s,
                ),
            )
            return bolt11

        bolt11 = await self._run(sign_and_store)
        return CreatedInvoice(bolt11, payment_hash, amount_msat, now + expiry_s)

    async def simulate_payment(self, bolt11: str) -> str:
        """Pay one of this node's invoices as an outside wallet would; returns the preimage.

        Paying an already-settled invoice again is refused, like a real node refuses
        an HTLC for a paid invoice.
        """
        try:
            decoded = decode_invoice(bolt11)
        except InvalidInvoice as exc:
            raise BackendError(str(exc)) from exc
        preimage = await self._run(self._settle, decoded.payment_hash)
        async with self._settled:
            self._settled.notify_all()
        return preimage

    def _settle(self, payment_hash: str) -> str:
        db = self._db()
        with self._lock:
            row = db.execute(
                "SELECT preimage, expires_at, settled_at FROM invoices WHERE payment_hash=?",
                (payment_hash,),
            ).fetchone()
            if row is None:
                raise BackendError("unknown invoice: not issued by this node")
            preimage, expires_at, settled_at = row
            if settled_at is not None:
                raise BackendError("invoice already paid")
            if time.time() >= expires_at:
                raise BackendError("invoice expired")
            db.execute("BEGIN IMMEDIATE")
            try:
                (next_index,) = db.execute(
                    "SELECT COALESCE(MAX(settle_index), 0) + 1 FROM invoices"
                ).fetchone()
                db.execute(
                    "UPDATE invoices SET settle_index=?, settled_at=? WHERE payment_hash=?",
                    (next_index, int(time.time()), payment_hash),
                )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # never leave it open: no later settlement could start
                    db.execute("ROLLBACK")
                raise
        return str(preimage)

    async def initial_cursor(self) -> int:
        """The dev node has no history before satsgate: start from zero."""
        return 0

    async def settlements(self, after: int) -> AsyncIterator[Settlement]:
        cursor = after
        while True:
            async with self._settled:
                rows = await self._run(self._settled_after, cursor)
                if not rows:
                    await self._settled.wait()
                    continue
            for row in rows:
                cursor = row.cursor
                yield row

    def _settled_after(self, cursor: int) -> list[Settlement]:
        rows = (
            self._db()
            .execute(
                "SELECT payment_hash, amount_msat, preimage, settled_at, settle_index FROM invoices"
                " WHERE settle_index > ? ORDER BY settle_index LIMIT 100",
                (cursor,),
            )
            .fetchall()
        )
        return [Settlement(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    async def lookup_invoice(self, payment_hash: str) -> InvoiceStatus:
        row = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT amount_msat, expires_at, settled_at, preimage FROM invoices"
                    " WHERE payment_hash=?",
                    (payment_hash,),
                )
                .fetchone()
            )
        )
        if row is None:
            raise UnknownInvoice("unknown invoice")
        amount_msat, expires_at, settled_at, preimage = row
        if settled_at is not None:
            return InvoiceStatus(
                payment_hash, InvoiceState.SETTLED, amount_msat, amount_msat, preimage
            )
        state = InvoiceState.EXPIRED if time.time() >= expires_at else InvoiceState.OPEN
        return InvoiceStatus(payment_hash, state, amount_msat)

    # -- outgoing ---------------------------------------------------------------------------

    async def pay_invoice(
        self, bolt11: str, max_fee_msat: int, timeout_s: int, amount_msat: int | None = None
    ) -> PaymentResult:
        try:
            decoded = decode_invoice(bolt11)
        except InvalidInvoice as exc:
            return invalid_invoice_payment(exc)
        if decoded.network != self.network:
            return PaymentResult(
                decoded.payment_hash,
                PaymentState.FAILED,
                failure_reason="invoice is for another network",
            )
        if decoded.amount_msat is None and amount_msat is None:
            return PaymentResult(
                decoded.payment_hash, PaymentState.FAILED, failure_reason="amountless invoice"
            )
        if decoded.amount_msat is not None and amount_msat not in (None, decoded.amount_msat):
            return PaymentResult(
                decoded.payment_hash,
                PaymentState.FAILED,
                failure_reason="the amount differs from the invoice's",
            )
        paying_msat = decoded.amount_msat or amount_msat or 0
        if decoded.expired():
            return PaymentResult(
                decoded.payment_hash, PaymentState.FAILED, failure_reason="invoice expired"
            )
        if decoded.payee == self.pubkey:
            return PaymentResult(
                decoded.payment_hash,
                PaymentState.FAILED,
                failure_reason="cannot pay our own invoice",
            )
        state = {
            "succeed": PaymentState.SUCCEEDED,
            "fail": PaymentState.FAILED,
            "pending": PaymentState.PENDING,
        }[self.outgoing_mode]
        # Like a real node: a routing fee on what it paid (1 ppt to reach the payee, at
        # least 1 msat, plus the fees of the cheapest private route the invoice names),
        # and no payment at all when that costs more than the cap (CLN maxfee, LND
        # fee_limit_msat): a route is never taken at a fee above it.
        fee = route_fee_msat(paying_msat, decoded.route_hints)
        reason = DEV_NO_ROUTE
        if fee > max_fee_msat and state is PaymentState.SUCCEEDED:
            state = PaymentState.FAILED
            reason = f"{DEV_FEE_TOO_HIGH}: the route costs {fee} msat, the cap is {max_fee_msat}"
        return await self._run(
            self._record_outgoing, decoded.payment_hash, bolt11, paying_msat, state, fee, reason
        )

    def _record_outgoing(
        self,
        payment_hash: str,
        bolt11: str,
        amount_msat: int,
        state: PaymentState,
        fee_msat: int = 0,
        failure_reason: str = DEV_NO_ROUTE,
    ) -> PaymentResult:
        db = self._db()
        with self._lock:
            row = db.execute(
                "SELECT state, amount_msat FROM outgoing WHERE payment_hash=?", (payment_hash,)
            ).fetchone()
            if row is not None and row[0] == PaymentState.SUCCEEDED.value:
                # Like a real node: an invoice is paid at most once.
                return PaymentResult(payment_hash, PaymentState.SUCCEEDED, row[1])
            paid_fee = fee_msat if state is PaymentState.SUCCEEDED else 0
            db.execute(
                "INSERT INTO outgoing (payment_hash, bolt11, amount_msat, fee_msat, state,"
                " created_at) VALUES (?,?,?,?,?,?) ON CONFLICT(payment_hash) DO UPDATE SET"
                " state=excluded.state, fee_msat=excluded.fee_msat, attempts=attempts+1",
                (payment_hash, bolt11, amount_msat, paid_fee, state.value, int(time.time())),
            )
        if state is PaymentState.FAILED:
            return PaymentResult(payment_hash, state, amount_msat, failure_reason=failure_reason)
        return PaymentResult(payment_hash, state, amount_msat, fee_msat=paid_fee)

    async def lookup_payment(self, payment_hash: str) -> PaymentResult:
        row = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT state, amount_msat, fee_msat FROM outgoing WHERE payment_hash=?",
                    (payment_hash,),
                )
                .fetchone()
            )
        )
        if row is None:
            return PaymentResult(
                payment_hash, PaymentState.FAILED, failure_reason="no such payment"
            )
        state = PaymentState(row[0])
        return PaymentResult(
            payment_hash,
            state,
            row[1],
            row[2],
            failure_reason=(DEV_NO_ROUTE if state is PaymentState.FAILED else None),
        )

    async def complete_pending(self, succeed: bool = True) -> int:
        """Resolve every pending outgoing payment (dev and tests); returns how many."""
        new_state = PaymentState.SUCCEEDED if succeed else PaymentState.FAILED

        def resolve() -> int:
            with self._lock:
                cur = self._db().execute(
                    "UPDATE outgoing SET state=? WHERE state='pending'", (new_state.value,)
                )
                return cur.rowcount

        return await self._run(resolve)

    async def outgoing_payments(self) -> list[dict[str, Any]]:
        rows = await self._run(
            lambda: (
                self._db()
                .execute(
                    "SELECT payment_hash, bolt11, amount_msat, fee_msat, state, attempts"
                    " FROM outgoing ORDER BY created_at, payment_hash"
                )
                .fetchall()
            )
        )
        keys = ("payment_hash", "bolt11", "amount_msat", "fee_msat", "state", "attempts")
        return [dict(zip(keys, r, strict=True)) for r in rows]
