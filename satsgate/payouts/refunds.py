"""Refunds as one-time LNURL-withdraw links, paid by the node itself.

Rules (each one a known way deployed withdraw links lost money):

- k1 is 32 random bytes, single use; the claim is one conditional UPDATE
  (open -> claiming) that binds the payout invoice *before* paying, so two
  concurrent callbacks cannot both pay.
- The payout invoice must carry an amount equal to the refund (min = max), be
  unexpired, on our network, and not be our own node's invoice.
- A claim is un-consumed (claiming -> open) only when the payout definitely
  failed. A timeout or in-flight payment stays ``claiming`` until
  :meth:`RefundService.reconcile` learns the outcome from the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

from lnurl.helpers import url_encode

from satsgate.config.settings import Settings
from satsgate.lightning.backend import BackendError, LightningBackend, PaymentResult, PaymentState
from satsgate.lightning.invoices import DecodedInvoice, RefusedPayoutInvoice, payout_invoice
from satsgate.payouts.fees import PayoutFees
from satsgate.store import Payment, PaymentStatus, Refund, RefundRepository, RefundStatus
from satsgate.store.refunds import PayoutInvoiceTaken

log = logging.getLogger("satsgate.payouts.refunds")

NO_LIQUIDITY_HINT = (
    "the node could not route the payout: refunds need outbound liquidity above the channel reserve"
)


def refund_object(refund: Refund, base_url: str) -> dict[str, Any]:
    """The spec's refund object (amount in sats at this edge)."""
    amount_sats = refund.amount_msat // 1000
    return {
        "lnurl_withdraw": url_encode(f"{base_url}/api/lnurlw/{refund.k1}"),
        "amount_sats": amount_sats,
        "refund_amount": amount_sats,  # deprecated alias of amount_sats
        "refund_secret": refund.k1,
        "status": str(refund.status),
        "charge_id": refund.refund_id,
        # The page only: a secret in a URL lands in logs and history; the page takes
        # refund_secret (above) in its form, by POST.
        "recover_url": f"{base_url}/recover",
        "expires_at": refund.expires_at,
    }


class RefundService:
    def __init__(
        self,
        settings: Settings,
        refunds: RefundRepository,
        backend: LightningBackend,
        fees: PayoutFees,
    ) -> None:
        self._settings = settings
        self._refunds = refunds
        self._backend = backend
        self.fees = fees  # the routing fees payouts may spend (shared with sessions)
        self._payouts: set[asyncio.Task[None]] = set()
        self._in_flight: set[str] = set()  # k1 of payouts this process is still making
        self._node_pubkey: str | None = None

    @property
    def base_url(self) -> str:
        return self._settings.public_base_url

    def _new_refund(self, payment: Payment, amount_msat: int, reason: str) -> Refund:
        now = int(time.time())
        return Refund(
            refund_id=f"rf_{secrets.token_hex(12)}",
            payment_id=payment.payment_id,
            amount_msat=amount_msat,
            k1=secrets.token_hex(32),
            status=RefundStatus.OPEN,
            reason=reason,
            created_at=now,
            expires_at=now + self._settings.refund_ttl_s,
            payout_bolt11=None,
            payout_hash=None,
            updated_at=now,
        )

    async def refund_unspent(self, payment: Payment, reason: str) -> dict[str, Any] | None:
        """Refund a paid, never-served payment in full (paid -> refunded). None if not paid."""
        refund = self._new_refund(payment, payment.amount_msat, reason)
        if not await self._refunds.refund_unspent(payment.payment_id, refund):
            return None
        return refund_object(refund, self.base_url)

    async def refund_spent(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None:
        """Refund part or all of a spent payment; never more in total than was paid."""
        if amount_msat <= 0:
            return None
        refund = self._new_refund(payment, amount_msat, reason)
        if not await self._refunds.add_for_spent(refund):
            return None
        return refund_object(refund, self.base_url)

    async def latest_refund(self, payment_id: str) -> dict[str, Any] | None:
        """The payment's most recent refund, if any."""
        earlier = await self._refunds.for_payment(payment_id)
        return refund_object(earlier[-1], self.base_url) if earlier else None

    async def refund_remaining(self, payment: Payment, reason: str) -> dict[str, Any] | None:
        """Refund everything not yet refunded (operator action): a paid payment in full,
        or the rest of a spent one, or anew what an expired link left unclaimed. None when
        nothing is left."""
        if payment.status is PaymentStatus.PAID:
            return await self.refund_unspent(payment, reason)
        if payment.status in (PaymentStatus.SERVING, PaymentStatus.SPENT, PaymentStatus.REFUNDED):
            refunded = sum(
                r.amount_msat
                for r in await self._refunds.for_payment(payment.payment_id)
                if r.status is not RefundStatus.EXPIRED
            )
            return await self.refund_spent(payment, payment.amount_msat - refunded, reason)
        return None

    # -- LNURL-withdraw (LUD-03) ------------------------------------------------------------

    async def withdraw_request(self, k1: str) -> dict[str, Any]:
        refund = await self._refunds.get_by_k1(k1)
        if refund is None:
            return {"status": "ERROR", "reason": "Unknown refund link."}
        if refund.status is RefundStatus.OPEN and refund.expires_at <= time.time():
            return {"status": "ERROR", "reason": "This refund link expired unclaimed."}
        if refund.status is not RefundStatus.OPEN:
            return {"status": "ERROR", "reason": f"This refund link is {refund.status}."}
        return {
            "tag": "withdrawRequest",
            "callback": f"{self.base_url}/api/lnurlw/{k1}/callback",
            "k1": k1,
            "minWithdrawable": refund.amount_msat,
            "maxWithdrawable": refund.amount_msat,
            "defaultDescription": f"satsgate refund {refund.refund_id}",
        }

    async def withdraw_callback(self, k1: str, bolt11: str) -> dict[str, Any]:
        refund = await self._refunds.get_by_k1(k1)
        if refund is None:
            return {"status": "ERROR", "reason": "Unknown refund link."}
        if refund.status is not RefundStatus.OPEN:
            return {"status": "ERROR", "reason": f"This refund link is {refund.status}."}
        try:
            invoice = await self._payable(bolt11, refund.amount_msat)
            # The claim: exactly one callback wins, and it binds the invoice before any
            # payout.
            claimed = await self._claim(k1, bolt11, invoice)
        except RefusedPayoutInvoice as refused:
            return {"status": "ERROR", "reason": f"The invoice {refused}."}
        if not claimed:
            return {"status": "ERROR", "reason": "This refund link was already used or expired."}
        task = asyncio.create_task(self._pay(k1, invoice, bolt11, refund.amount_msat))
        self._payouts.add(task)
        task.add_done_callback(self._payouts.discard)
        return {"status": "OK"}

    async def _payable(self, bolt11: str, amount_msat: int) -> DecodedInvoice:
        """The invoice a refund of ``amount_msat`` may be paid to; raises
        RefusedPayoutInvoice."""
        invoice = payout_invoice(bolt11, amount_msat=amount_msat, network=self._settings.network)
        if invoice.payee == await self._our_pubkey():
            raise RefusedPayoutInvoice("payee", "is this node's own invoice")
        if await self._paid_before(invoice.payment_hash):
            # A node pays an invoice once: it would answer "already paid" and the refund
            # would read as paid with nothing moved.
            raise RefusedPayoutInvoice("payee", "was paid already: send a fresh one")
        return invoice

    async def _claim(self, k1: str, bolt11: str, invoice: DecodedInvoice) -> bool:
        """The store's claim of link ``k1`` for ``invoice`` (False: another claimer won or
        the link expired); raises RefusedPayoutInvoice when the invoice pays another link."""
        try:
            return await self._refunds.claim(k1, bolt11, invoice.payment_hash, int(time.time()))
        except PayoutInvoiceTaken:
            raise RefusedPayoutInvoice(
                "payee", "pays another refund already: send a fresh one"
            ) from None

    async def _paid_before(self, payment_hash: str) -> bool:
        """Whether the node has paid (or is paying) this hash already; unknown: False."""
        try:
            known = await self._backend.lookup_payment(payment_hash)
        except (BackendError, OSError, TimeoutError):
            return False
        return known.state is not PaymentState.FAILED

    async def pay_out(self, k1: str, bolt11: str) -> tuple[RefundStatus, str | None]:
        """Pay the open refund link ``k1`` to ``bolt11`` now (a payout the node makes on its
        own, e.g. to the payer's Lightning address), under the refunds' fee cap and the same
        claim as a withdraw callback: (PAID, None); (OPEN, reason) when the invoice was
        refused or the payout definitely failed (the link is the payer's to claim again);
        (CLAIMING, reason) when the outcome is unknown (reconcile() learns it later)."""
        refund = await self._refunds.get_by_k1(k1)
        if refund is None or refund.status is not RefundStatus.OPEN:
            status = RefundStatus.EXPIRED if refund is None else refund.status
            return status, "the refund is not open"
        try:
            invoice = await self._payable(bolt11, refund.amount_msat)
            claimed = await self._claim(k1, bolt11, invoice)
        except RefusedPayoutInvoice as refused:
            return RefundStatus.OPEN, f"the payout invoice {refused}"
        if not claimed:
            return (await self._status(k1)), "the refund was claimed meanwhile"
        await self._pay(k1, invoice, bolt11, refund.amount_msat)
        status = await self._status(k1)
        error = None if status is RefundStatus.PAID else await self._refunds.payout_error(k1)
        return status, error

    async def _status(self, k1: str) -> RefundStatus:
        refund = await self._refunds.get_by_k1(k1)
        return RefundStatus.EXPIRED if refund is None else refund.status

    async def _our_pubkey(self) -> str:
        if self._node_pubkey is None:
            self._node_pubkey = (await self._backend.info()).pubkey
        return self._node_pubkey

    async def _pay(self, k1: str, invoice: DecodedInvoice, bolt11: str, amount_msat: int) -> None:
        self._in_flight.add(k1)
        try:
            grant = await self.fees.grant(amount_msat)
            result = await self._backend.pay_invoice(
                bolt11, grant.limit_msat, self._settings.refund_pay_timeout_s
            )
            await self.fees.settle(grant, result)
            await self._apply_outcome(k1, invoice.payment_hash, result)
        except (BackendError, OSError, TimeoutError) as exc:
            # Outcome unknown: stays claiming, reconcile() asks the node later.
            log.warning(
                "refund payout of %d msat: outcome unknown, the link stays claiming"
                " until the node says (%s)",
                amount_msat,
                exc or type(exc).__name__,
            )
            with contextlib.suppress(Exception):
                await self._refunds.note_payout(k1, None, f"outcome unknown: {exc}"[:500])
        finally:
            self._in_flight.discard(k1)

    async def _apply_outcome(self, k1: str, payout_hash: str, result: PaymentResult) -> None:
        """What the node says of the payout to ``payout_hash`` ends that claim of link
        ``k1``, and no later one (a late answer about an earlier attempt changes nothing)."""
        now = int(time.time())
        state = result.state
        if state is PaymentState.SUCCEEDED:
            await self._refunds.settle_claim(k1, payout_hash, RefundStatus.PAID, now)
            await self._refunds.note_payout(k1, result.fee_msat, None)
            log.info(
                "refund paid out: %d msat to %s, routing fee %d msat",
                result.amount_msat,
                result.payment_hash[:16] or "?",
                result.fee_msat,
            )
        elif state is PaymentState.FAILED:
            reason = result.failure_reason or "the node gave no reason"
            await self._refunds.settle_claim(k1, payout_hash, RefundStatus.OPEN, now)
            await self._refunds.note_payout(k1, None, reason[:500])
            log.warning(
                "refund payout failed, the link is open again: %s (%s)", reason, NO_LIQUIDITY_HINT
            )
        # PENDING: leave it claiming; never free the link while money may be moving.

    async def last_payout_error(self, k1: str) -> str | None:
        """The node's reason for the link's last failed payout, if any."""
        return await self._refunds.payout_error(k1)

    async def reconcile(self) -> int:
        """Resolve claims whose payout outcome was unknown; expire unclaimed links."""
        resolved = 0
        # Only claims whose payout call has surely ended: asking the node about a
        # payment it has not registered yet would read as "failed" and free the link.
        settled_before = time.time() - self._settings.refund_pay_timeout_s - 60
        for refund in await self._refunds.in_status(RefundStatus.CLAIMING):
            if (
                refund.payout_hash is None
                or refund.k1 in self._in_flight
                or refund.updated_at > settled_before
            ):
                continue
            with contextlib.suppress(BackendError, OSError, TimeoutError):
                result = await self._backend.lookup_payment(refund.payout_hash)
                if result.state is not PaymentState.PENDING:
                    await self._apply_outcome(refund.k1, refund.payout_hash, result)
                    resolved += 1
        await self._refunds.expire(int(time.time()))
        return resolved

    async def wait_payouts(self) -> None:
        """Let payouts under way finish (shutdown, tests)."""
        if self._payouts:
            await asyncio.gather(*self._payouts, return_exceptions=True)
