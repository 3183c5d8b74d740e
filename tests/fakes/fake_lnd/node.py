"""The state of a fake LND node: invoices (plain and hold) and outgoing payments.

Invoices are real BOLT11, signed with the node's secp256k1 key. Semantics copied from
lnd: ``add_index`` and ``settle_index`` grow monotonically (settle indexes may skip,
see :attr:`FakeLndNode.settle_index_gap`); an expired open invoice is CANCELED; a hold
invoice goes OPEN -> ACCEPTED (HTLCs held) -> SETTLED or CANCELED; an outgoing payment is
IN_FLIGHT, then SUCCEEDED or FAILED, and paying a hash again while in flight or after
success is refused with ALREADY_EXISTS.

Thread-safe: the test thread pays invoices while the gRPC server's loop streams; every
change wakes the waiters registered with :meth:`FakeLndNode.watch`.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import coincurve

from satsgate.lightning.invoices import InvalidInvoice, decode_invoice, sign_invoice

# lnd's names for networks (GetInfo chains[].network) -> BOLT11 network names.
_BOLT11_NETWORK = {
    "mainnet": "bitcoin",
    "testnet": "testnet",
    "signet": "signet",
    "regtest": "regtest",
}

# lnd cancels a held HTLC back this many blocks before it expires (HoldInvoiceExpiryDelta).
HOLD_EXPIRY_DELTA = 12

InvoiceStateName = Literal["OPEN", "ACCEPTED", "SETTLED", "CANCELED"]
PaymentStatusName = Literal["IN_FLIGHT", "SUCCEEDED", "FAILED"]


class LndError(Exception):
    """An error lnd answers with: a gRPC status code name and lnd's message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class FakeInvoice:
    r_hash: bytes
    r_preimage: bytes  # empty for a hold invoice until it is settled
    memo: str
    value_msat: int
    payment_request: str
    creation_date: int
    expiry: int
    add_index: int
    cltv_expiry: int
    hold: bool = False
    state: InvoiceStateName = "OPEN"
    settle_index: int = 0
    settle_date: int = 0
    amt_paid_msat: int = 0
    htlc_expiry_height: int = 0  # of the held HTLC, once accepted
    accept_time: int = 0


@dataclass
class FakePayment:
    payment_hash: str
    payment_request: str
    value_msat: int
    status: PaymentStatusName = "IN_FLIGHT"
    fee_msat: int = 0
    preimage: str = ""
    failure_reason: int = 0  # lnrpc.PaymentFailureReason
    index: int = 0
    attempts: int = 1


@dataclass
class _Event:
    kind: Literal["add", "settle", "update"]
    r_hash: bytes


@dataclass
class FakeLndNode:
    network: str = "regtest"  # lnd's name: mainnet, testnet, signet, regtest
    alias: str = "fake-lnd"
    # Knobs for tests.
    settle_index_gap: int = 0  # extra indexes skipped before each settle_index
    route_fee_msat: int = 1_000
    # How outgoing payments end: "succeed", "fail", or "hold" (IN_FLIGHT until release()).
    outgoing: Literal["succeed", "fail", "hold"] = "succeed"
    block_height: int = 800
    _key: coincurve.PrivateKey = field(default_factory=coincurve.PrivateKey)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    invoices: dict[bytes, FakeInvoice] = field(default_factory=dict)
    payments: dict[str, FakePayment] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)
    peers: dict[str, FakeLndNode] = field(default_factory=dict)
    _add_index: int = 0
    _settle_index: int = 0
    _payment_index: int = 0
    _watchers: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)

    @property
    def pubkey(self) -> str:
        return str(self._key.public_key.format().hex())

    # -- test-side controls -------------------------------------------------------------

    def connect(self, other: FakeLndNode) -> None:
        """A channel both ways: each node can pay the other's invoices."""
        self.peers[other.pubkey] = other
        other.peers[self.pubkey] = self

    def pay_from_outside(self, bolt11: str) -> str:
        """Another node pays our invoice. Returns the preimage hex; for a hold invoice
        the HTLC is held (ACCEPTED) and the preimage is empty until the node settles."""
        decoded = decode_invoice(bolt11)
        if decoded.payee != self.pubkey:
            raise LndError("INVALID_ARGUMENT", "invoice is not from this node")
        return self.receive(bytes.fromhex(decoded.payment_hash), decoded.amount_msat or 0)

    def release(self, succeed: bool = True) -> int:
        """Resolve every in-flight outgoing payment; returns how many."""
        with self._lock:
            held = [p for p in self.payments.values() if p.status == "IN_FLIGHT"]
        for pay in held:
            self._finish_payment(pay, succeed)
        return len(held)

    def mine(self, blocks: int) -> None:
        """The chain moves on: a held HTLC whose expiry height is reached would go on chain;
        lnd cancels the hold invoice back first (as it does a few blocks before)."""
        with self._lock:
            self.block_height += blocks
        self._wake()

    # -- watching -------------------------------------------------------------------------

    def watch(self) -> asyncio.Event:
        """An event set (from any thread) on every change; call :meth:`unwatch` after."""
        event = asyncio.Event()
        with self._lock:
            self._watchers.append((asyncio.get_running_loop(), event))
        return event

    def unwatch(self, event: asyncio.Event) -> None:
        with self._lock:
            self._watchers = [(lp, ev) for lp, ev in self._watchers if ev is not event]

    def _wake(self) -> None:
        with self._lock:
            watchers = list(self._watchers)
        for loop, event in watchers:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    # -- invoices -------------------------------------------------------------------------

    def _expire(self) -> None:
        """lnd's expiry watcher: open invoices past their expiry are canceled, and so is a
        hold invoice whose held HTLC comes within 12 blocks of its expiry height."""
        now = time.time()
        for inv in self.invoices.values():
            open_expired = inv.state == "OPEN" and inv.creation_date + inv.expiry <= now
            near_cltv = (
                inv.state == "ACCEPTED"
                and self.block_height >= inv.htlc_expiry_height - HOLD_EXPIRY_DELTA
            )
            if open_expired or near_cltv:
                inv.state = "CANCELED"
                self.events.append(_Event("update", inv.r_hash))

    def add_invoice(
        self,
        memo: str,
        value_msat: int,
        expiry: int,
        preimage: bytes = b"",
        r_hash: bytes = b"",
        cltv_expiry: int = 0,
        hold: bool = False,
    ) -> FakeInvoice:
        if value_msat < 0:
            raise LndError("UNKNOWN", "amount must not be negative")
        # value 0: an amountless invoice (the payer names the amount), as lnd makes.
        if not hold:
            preimage = preimage or secrets.token_bytes(32)
            r_hash = hashlib.sha256(preimage).digest()
        if len(r_hash) != 32:
            raise LndError("UNKNOWN", "invalid hash length")
        expiry = expiry or 86_400  # lnd's default: one day
        now = int(time.time())
        bolt11 = sign_invoice(
            network=_BOLT11_NETWORK[self.network],
            amount_msat=value_msat,
            payment_hash=r_hash.hex(),
            payment_secret=secrets.token_hex(32),
            description=memo,
            expiry_s=expiry,
            private_key_hex=self._key.secret.hex(),
            created_at=now,
        )
        with self._lock:
            if r_hash in self.invoices:
                # lnd v0.21.2 answers a duplicate hash with a plain error (UNKNOWN).
                raise LndError("UNKNOWN", "invoice with payment hash already exists")
            self._add_index += 1
            inv = FakeInvoice(
                r_hash=r_hash,
                r_preimage=preimage,
                memo=memo,
                value_msat=value_msat,
                payment_request=bolt11,
                creation_date=now,
                expiry=expiry,
                add_index=self._add_index,
                cltv_expiry=cltv_expiry or 80,
                hold=hold,
            )
            self.invoices[r_hash] = inv
            self.events.append(_Event("add", r_hash))
        self._wake()
        return inv

    def lookup(self, r_hash: bytes) -> FakeInvoice:
        with self._lock:
            self._expire()
            inv = self.invoices.get(r_hash)
            if inv is None:
                raise LndError("NOT_FOUND", "unable to locate invoice")
            return inv

    def receive(self, r_hash: bytes, amount_msat: int) -> str:
        """An incoming HTLC set: settles a plain invoice, holds a hold invoice."""
        with self._lock:
            self._expire()
            inv = self.invoices.get(r_hash)
            if inv is None or inv.state != "OPEN" or amount_msat < inv.value_msat:
                raise LndError("UNKNOWN", "incorrect_or_unknown_payment_details")
            inv.amt_paid_msat = amount_msat
            if inv.hold:
                inv.state = "ACCEPTED"
                inv.accept_time = int(time.time())
                inv.htlc_expiry_height = self.block_height + inv.cltv_expiry
                self.events.append(_Event("update", r_hash))
            else:
                self._settle(inv)
        self._wake()
        return inv.r_preimage.hex()

    def _settle(self, inv: FakeInvoice) -> None:
        self._settle_index += 1 + self.settle_index_gap
        inv.state = "SETTLED"
        inv.settle_index = self._settle_index
        inv.settle_date = int(time.time())
        self.events.append(_Event("settle", inv.r_hash))

    def settle_hold(self, preimage: bytes) -> None:
        r_hash = hashlib.sha256(preimage).digest()
        with self._lock:
            inv = self.invoices.get(r_hash)
            if inv is None:
                raise LndError("UNKNOWN", "unable to locate invoice")
            if inv.state == "SETTLED":
                return  # lnd: settling a settled invoice again is not an error
            if inv.state == "OPEN":
                raise LndError("UNKNOWN", "invoice still open")
            if inv.state == "CANCELED":
                raise LndError("UNKNOWN", "invoice already canceled")
            inv.r_preimage = preimage
            self._settle(inv)
        self._wake()

    def cancel(self, r_hash: bytes) -> None:
        with self._lock:
            inv = self.invoices.get(r_hash)
            if inv is None:
                raise LndError("UNKNOWN", "unable to locate invoice")
            if inv.state == "SETTLED":
                raise LndError("UNKNOWN", "invoice already settled")
            if inv.state != "CANCELED":
                inv.state = "CANCELED"
                self.events.append(_Event("update", r_hash))
        self._wake()

    def settled_after(self, settle_index: int) -> list[FakeInvoice]:
        with self._lock:
            return sorted(
                (
                    i
                    for i in self.invoices.values()
                    if i.state == "SETTLED" and i.settle_index > settle_index
                ),
                key=lambda i: i.settle_index,
            )

    def added_after(self, add_index: int) -> list[FakeInvoice]:
        with self._lock:
            return sorted(
                (i for i in self.invoices.values() if i.add_index > add_index),
                key=lambda i: i.add_index,
            )

    def events_from(self, position: int) -> tuple[list[_Event], int]:
        with self._lock:
            return self.events[position:], len(self.events)

    # -- outgoing payments ------------------------------------------------------------------

    def send_payment(self, bolt11: str, fee_limit_msat: int, amt_msat: int = 0) -> FakePayment:
        try:
            decoded = decode_invoice(bolt11)
        except InvalidInvoice as exc:
            raise LndError("UNKNOWN", f"invalid payment request: {exc}") from None
        # lnd's rules: an amountless invoice needs amt/amt_msat; one with an amount
        # refuses a second one. lnd v0.21.2 refuses these, a bad, expired or own invoice,
        # with plain errors (status UNKNOWN) before any payment record exists.
        if decoded.amount_msat is None and amt_msat <= 0:
            raise LndError("UNKNOWN", "amount must be specified when paying a zero amount invoice")
        if decoded.amount_msat is not None and amt_msat:
            raise LndError(
                "UNKNOWN",
                "amount must not be specified when paying a non-zero amount invoice",
            )
        if decoded.expired():
            valid_until = time.strftime(
                "%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(decoded.expires_at)
            )
            raise LndError("UNKNOWN", f"invoice expired. Valid until {valid_until}")
        if decoded.payee == self.pubkey:
            raise LndError("UNKNOWN", "self-payments not allowed")
        with self._lock:
            known = self.payments.get(decoded.payment_hash)
            if known is not None and known.status == "SUCCEEDED":
                raise LndError("ALREADY_EXISTS", "invoice is already paid")
            if known is not None and known.status == "IN_FLIGHT":
                raise LndError("ALREADY_EXISTS", "payment is in transition")
            self._payment_index += 1
            pay = FakePayment(
                payment_hash=decoded.payment_hash,
                payment_request=bolt11,
                value_msat=decoded.amount_msat or amt_msat,
                index=self._payment_index,
                attempts=(known.attempts + 1) if known else 1,
            )
            self.payments[decoded.payment_hash] = pay
        peer = self.peers.get(decoded.payee)
        if peer is None or self.route_fee_msat > fee_limit_msat:
            self._finish_payment(pay, False, reason=2)  # FAILURE_REASON_NO_ROUTE
        elif self.outgoing != "hold":
            self._finish_payment(pay, self.outgoing == "succeed")
        return pay

    def _finish_payment(self, pay: FakePayment, succeed: bool, reason: int = 3) -> None:
        preimage = ""
        if succeed:
            peer = self.peers.get(decode_invoice(pay.payment_request).payee)
            try:
                assert peer is not None
                preimage = peer.receive(bytes.fromhex(pay.payment_hash), pay.value_msat)
            except (AssertionError, LndError):
                succeed, reason = False, 4  # INCORRECT_PAYMENT_DETAILS
        with self._lock:
            if succeed:
                pay.status, pay.preimage, pay.fee_msat = "SUCCEEDED", preimage, self.route_fee_msat
            else:
                pay.status, pay.failure_reason = "FAILED", reason
        self._wake()

    def payment(self, payment_hash: str) -> FakePayment:
        with self._lock:
            pay = self.payments.get(payment_hash)
        if pay is None:
            raise LndError("NOT_FOUND", "payment isn't initiated")
        return pay
