"""Holds: charge only on success, with the node's hold invoices (LND).

A payment of the paymentId flow is a hold invoice for a hash whose preimage satsgate
keeps. The payer's HTLCs are held when they arrive (ACCEPTED): that counts as paid.
After the call succeeded the invoice is settled with the kept preimage; after a failure
it is canceled, and the payer's wallet gets the payment back with no refund step.

Every decision is recorded before the node is told (see :mod:`satsgate.store.holds`),
so a restart finishes it. The watch loop takes the decisions nobody else will, well
before the held HTLCs' CLTV expiry (the node would cancel them itself a few blocks
before, or they would go on chain): a held payment unused for ``max_unused_s``, or
within ``margin_blocks`` of expiry, is canceled; a spent payment whose call this
instance served and is no longer running is canceled. Every instance runs the watch: a
call another instance serves is that instance's to decide, and once that instance is
gone its recovery cancels the holds of the calls it left (``refund_unanswered``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from satsgate.lightning.backend import BackendError, CreatedInvoice, HoldInvoices, HoldInvoiceStatus
from satsgate.store import HoldRepository, Payment, PaymentRepository, PaymentStatus

log = logging.getLogger(__name__)

# lnd cancels a held HTLC 12 blocks before it expires; decide well before that.
DEFAULT_MARGIN_BLOCKS = 36


def canceled_object(payment: Payment, reason: str) -> dict[str, Any]:
    """What an error body carries instead of a refund link when a hold was canceled."""
    return {
        "hold_invoice_canceled": True,
        "amount_sats": payment.amount_msat // 1000,
        "status": "canceled",
        "message": "Nothing was charged: the held payment was canceled and returns to the "
        "paying wallet by itself.",
        "reason": reason[:200],
    }


class Holds:
    def __init__(
        self,
        *,
        node: HoldInvoices,
        payments: PaymentRepository,
        holds: HoldRepository,
        on_paid: Callable[[str], None],
        max_unused_s: int,
        instance_id: str,
        margin_blocks: int = DEFAULT_MARGIN_BLOCKS,
        poll_s: float = 1.0,
    ) -> None:
        self._node = node
        self._instance_id = instance_id  # this instance: its calls' holds are decided here
        self._payments = payments
        self._holds = holds
        self._on_paid = on_paid
        self.max_unused_s = max_unused_s
        self.margin_blocks = margin_blocks
        self.poll_s = poll_s
        # Payments whose call runs in this process now: only their caller decides them.
        self._running: set[str] = set()

    # -- issuing ------------------------------------------------------------------------------

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> tuple[CreatedInvoice, str]:
        """A hold invoice and the preimage to keep (hex)."""
        preimage = secrets.token_bytes(32)
        invoice = await self._node.create_hold_invoice(
            amount_msat, description, expiry_s, hashlib.sha256(preimage).hexdigest()
        )
        return invoice, preimage.hex()

    async def insert(self, payment: Payment, preimage: str) -> None:
        await self._holds.insert(payment, preimage)

    # -- paid: ACCEPTED ----------------------------------------------------------------------

    async def refresh(self, payment: Payment) -> Payment:
        """An unpaid hold payment whose HTLCs the node holds becomes paid."""
        if payment.status is not PaymentStatus.UNPAID:
            return payment
        try:
            status = await self._node.hold_status(payment.payment_hash)
        except (BackendError, OSError):
            return payment
        if await self._apply(payment, status):
            return await self._payments.get(payment.payment_id) or payment
        return payment

    async def _apply(self, payment: Payment, status: HoldInvoiceStatus) -> bool:
        if status.state in ("accepted", "settled") and await self._payments.mark_paid(
            payment.payment_hash, status.amount_received_msat, int(time.time())
        ):
            self._on_paid(payment.payment_hash)
            return True
        return False

    # -- deciding ----------------------------------------------------------------------------

    def running(self, payment: Payment) -> None:
        """The payment's call starts in this process: the watcher leaves it alone."""
        self._running.add(payment.payment_id)

    def stopped(self, payment: Payment) -> None:
        """The call did not start after all (the spend was lost to another use)."""
        self._running.discard(payment.payment_id)

    async def settle(self, payment: Payment) -> bool:
        """The call succeeded: keep the payment. False if it was decided otherwise."""
        self._running.discard(payment.payment_id)
        if not await self._holds.choose_settle(payment.payment_hash, int(time.time())):
            log.warning("hold %s: not settled, it was already decided", payment.payment_hash)
            return False
        await self._tell_settle(payment.payment_hash)
        return True

    async def cancel(
        self, payment: Payment, reason: str, *, unused: bool = False
    ) -> dict[str, Any] | None:
        """Give the payment back; the object to show for it, or None if it was already
        decided (settled: a refund link is then the way back). ``unused``: only if no call
        has spent it (None when one has: that call's outcome decides)."""
        if not unused:  # a running call's outcome no longer decides it
            self._running.discard(payment.payment_id)
        now = int(time.time())
        if not await self._holds.choose_cancel(payment.payment_hash, now, unused=unused):
            return None
        log.info("hold %s canceled: %s", payment.payment_hash, reason)
        await self._tell_cancel(payment.payment_hash)
        return canceled_object(payment, reason)

    async def _tell_settle(self, payment_hash: str) -> None:
        preimage = await self._holds.preimage(payment_hash)
        if preimage is None:
            return
        try:
            await self._node.settle_hold(preimage)
        except (BackendError, OSError) as exc:  # the watcher tries again
            log.warning("hold %s: settle failed (%s); retrying", payment_hash, exc)
            return
        await self._holds.done(payment_hash, "settled", int(time.time()))

    async def _tell_cancel(self, payment_hash: str) -> None:
        try:
            await self._node.cancel_hold(payment_hash)
        except (BackendError, OSError) as exc:
            log.warning("hold %s: cancel failed (%s); retrying", payment_hash, exc)
            return
        await self._holds.done(payment_hash, "canceled", int(time.time()))

    # -- the watcher -------------------------------------------------------------------------

    async def watch(self) -> None:
        """Forever: apply accepted holds, finish recorded decisions, take the overdue ones."""
        while True:
            try:
                await self.check_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("hold invoice check failed: %s", exc)
            await asyncio.sleep(self.poll_s)

    async def check_all(self) -> None:
        for payment, decision, served_by in await self._holds.open():
            if decision == "settling":
                await self._tell_settle(payment.payment_hash)
            elif decision == "canceling":
                await self._tell_cancel(payment.payment_hash)
            else:
                await self._check(payment, served_by)

    async def _check(self, payment: Payment, served_by: str | None) -> None:
        try:
            status = await self._node.hold_status(payment.payment_hash)
        except (BackendError, OSError) as exc:
            log.info("hold %s: status unknown (%s)", payment.payment_hash, exc)
            return
        now = int(time.time())
        if status.state == "canceled":  # the node canceled it (expired, or near the CLTV)
            never_paid = payment.status is PaymentStatus.UNPAID
            final = "expired" if never_paid else "canceled"
            if await self._holds.choose_cancel(payment.payment_hash, now, final=final):
                log.log(
                    logging.INFO if never_paid else logging.WARNING,
                    "hold %s was canceled by the node",
                    payment.payment_hash,
                )
            return
        if payment.status is PaymentStatus.UNPAID:
            if status.state == "open":
                if payment.expires_at + 60 < now:  # never paid
                    await self._holds.choose_cancel(payment.payment_hash, now, final="expired")
                return
            await self._apply(payment, status)
            payment = await self._payments.get(payment.payment_id) or payment
        if status.state != "accepted":
            return
        near_expiry = status.blocks_left is not None and status.blocks_left <= self.margin_blocks
        if payment.status is PaymentStatus.PAID:
            unused_for = now - (payment.paid_at or now)
            if near_expiry or unused_for >= self.max_unused_s:
                # Read before: a call may have spent it since, and then runs to its end.
                await self.cancel(payment, "the held payment was not used in time", unused=True)
        elif payment.status in (PaymentStatus.SERVING, PaymentStatus.SPENT):
            if served_by not in (None, self._instance_id):
                return  # another instance's call: its watcher decides it, or its recovery
            if payment.payment_id not in self._running:
                await self.cancel(payment, "the call's outcome was lost in a restart")
            elif near_expiry:
                await self.cancel(payment, "the call ran too close to the payment's expiry")
