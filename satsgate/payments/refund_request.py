"""request_refund: a paid, never-used payment refunded in full on the payer's request.

Shared by POST /api/l402/refund and the MCP tool. Eligible: any payment that is
paid and unspent, whatever its age; once refunded it can never be used, because
spending and refunding are the same conditional UPDATE from ``paid``. Anything
else is REFUND_NOT_AVAILABLE.

Only the payer may ask (see :mod:`satsgate.payments.proof`): a payment created by an
HTTP 402 challenge (a call's, a session deposit's, a top-up's) needs the credential it
was paid with, since its paymentId is no secret and its preimage is known to every
node on its route; one created by MCP ``create_payment`` needs its paymentId, the MCP
caller's handle (the spec: "A refund request needs the original paymentId").

operator_refund: the node operator's refund of any payment (``satsgate-refund``), which
needs no proof but must not give money back a second way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from satsgate.errors import ApiError, ErrorCode
from satsgate.lightning.invoices import RefusedPayoutInvoice, payout_invoice
from satsgate.payments.gate import Gate
from satsgate.payments.holds import Holds
from satsgate.payments.proof import proves
from satsgate.payouts.refunds import RefundService
from satsgate.store import Payment, PaymentStatus
from satsgate.store.sessions import SessionRepository

OPERATOR_REASON = "refunded by the node operator"


def public_status(payment: Payment, now: float | None = None) -> str:
    """unpaid, paid, spent, refunded, or expired (unpaid past its invoice expiry). A call
    in flight (serving) is spent to the payer: the spec's three states."""
    if payment.status is PaymentStatus.SERVING:
        return "spent"
    moment = time.time() if now is None else now
    if payment.status is PaymentStatus.UNPAID and payment.expires_at <= moment:
        return "expired"
    return str(payment.status)


async def request_refund(
    gate: Gate,
    refunds: RefundService,
    network: str,
    payment_id: str,
    invoice: str,
    feedback: str | None = None,
    authorization: Sequence[str] = (),
    send_credential: str = "",
) -> dict[str, Any]:
    """Refund in full; pay ``invoice`` at once unless it is the payment's own invoice
    (which must be for ``network``). ``authorization``: the credential the payment was
    paid with, required for a payment created by an HTTP challenge; ``send_credential``
    says where this face takes it (the refusal's message)."""
    payment = await _payers_paid_payment(gate, payment_id, authorization, send_credential)
    if payment.mode == "hold" and gate.holds is not None:
        return await _cancel_hold(gate.holds, payment)
    payout_invoice = None if _same_invoice(invoice, payment.bolt11) else invoice
    if payout_invoice is not None:
        _check_payout_invoice(payout_invoice, payment.amount_msat, network)
    reason = "refund requested before use"
    if feedback:
        reason += f": {feedback[:300]}"
    refund = await refunds.refund_unspent(payment, reason)
    if refund is None:  # lost a race with a use (or another refund) of the same payment
        raise ApiError(
            ErrorCode.REFUND_NOT_AVAILABLE,
            "The payment was used or refunded a moment ago.",
            extra={"paymentId": payment.payment_id},
        )
    payout, message = "link", "Refund issued: claim it with the LNURL-withdraw link in refund."
    if payout_invoice is not None:
        payout, message = await _pay_out(refunds, refund["refund_secret"], payout_invoice)
    return {
        "success": True,
        "message": message,
        "chargeId": refund["charge_id"],
        "amountSats": refund["amount_sats"],
        "payout": payout,
        "refund": refund,
    }


class NotRefundable(Exception):
    """An operator refund refused; the message says why, for the operator."""


async def operator_refund(
    gate: Gate, refunds: RefundService, sessions: SessionRepository, payment: Payment
) -> dict[str, Any]:
    """Give ``payment`` back on the operator's word: a hold invoice not yet decided is
    canceled (the node gives the payment back; no link); otherwise everything not yet
    refunded becomes a refund link. Returns ``payout`` ("canceled" or "link") and
    ``refund``. NotRefundable for a session's deposit or top-up (what the session does
    not spend goes back to its return invoice at close: a link would pay it twice) and
    when nothing is left."""
    use = await sessions.deposit_use(payment.payment_hash)
    if use is not None:
        session_id, kind, _ = use
        what = "deposit" if kind == "open" else "top-up"
        raise NotRefundable(
            f"payment {payment.payment_id} is the {what} of session {session_id}: what the "
            "session does not spend goes back to its return invoice when it closes (by its "
            "payer, or by itself once idle)"
        )
    holds = gate.holds
    undecided = (PaymentStatus.PAID, PaymentStatus.SERVING)
    if payment.mode == "hold" and holds is not None and payment.status in undecided:
        canceled = await holds.cancel(payment, OPERATOR_REASON)
        if canceled is not None:
            return {"payout": "canceled", "refund": canceled}
        payment = await gate.get_payment(payment.payment_id) or payment  # settled meanwhile
    refund = await refunds.refund_remaining(payment, OPERATOR_REASON)
    if refund is None:
        raise NotRefundable(f"payment {payment.payment_id} has nothing left to refund")
    return {"payout": "link", "refund": refund}


async def _payers_paid_payment(
    gate: Gate, payment_id: str, authorization: Sequence[str], send_credential: str
) -> Payment:
    """The payment, once its payer is proven (the credential of an HTTP-challenge
    payment; an MCP payment's id) and it is paid and unused."""
    found = await gate.get_payment(payment_id)
    if found is None:
        raise ApiError(ErrorCode.PAYMENT_NOT_FOUND, f"No payment {payment_id!r}.")
    if not proves(gate.verifier, found, authorization=authorization, payment_id=payment_id):
        raise ApiError(
            ErrorCode.PAYMENT_INVALID,
            "This payment was created by an HTTP 402 challenge: only its payer may have it "
            f"refunded. {send_credential}",
            extra={"paymentId": payment_id},
        )
    payment = await gate.refresh_paid(found)
    if payment.status is not PaymentStatus.PAID:
        raise ApiError(
            ErrorCode.REFUND_NOT_AVAILABLE,
            _not_refundable(payment),
            extra={"paymentId": payment.payment_id, "status": public_status(payment)},
        )
    return payment


async def _cancel_hold(holds: Holds, payment: Payment) -> dict[str, Any]:
    """A held payment, never settled: canceling gives it back, no payout needed."""
    canceled = await holds.cancel(payment, "refund requested before use", unused=True)
    if canceled is None:
        raise ApiError(
            ErrorCode.REFUND_NOT_AVAILABLE,
            "The payment was used a moment ago.",
            extra={"paymentId": payment.payment_id},
        )
    return {
        "success": True,
        "message": "The held payment was canceled: it returns to your wallet by itself.",
        "amountSats": canceled["amount_sats"],
        "payout": "canceled",
        "refund": canceled,
    }


async def _pay_out(refunds: RefundService, refund_secret: str, invoice: str) -> tuple[str, str]:
    """Claim the refund link for the payer's invoice: ("paying", ...) when the node took
    it; ("link", why not) when the link stays open to claim."""
    claim = await refunds.withdraw_callback(refund_secret, invoice)
    if claim.get("status") == "OK":
        return "paying", "Refund issued: your invoice is being paid."
    return "link", (
        f"Refund issued, but your invoice was not paid ({claim.get('reason')}); "
        "claim it with the LNURL-withdraw link in refund."
    )


def _same_invoice(a: str, b: str) -> bool:
    strip = "lightning:"
    a, b = a.strip().lower(), b.strip().lower()
    return a.removeprefix(strip) == b.removeprefix(strip)


def _check_payout_invoice(bolt11: str, amount_msat: int, network: str) -> None:
    """Refuse an unusable payout invoice before the payment changes state."""
    try:
        payout_invoice(bolt11, amount_msat=amount_msat, network=network)
    except RefusedPayoutInvoice as refused:
        raise ApiError(ErrorCode.INVALID_INPUT, f"The invoice {refused}.") from None


def _not_refundable(payment: Payment) -> str:
    status = public_status(payment)
    if status in ("unpaid", "expired"):
        return "The invoice was never paid; there is nothing to refund."
    if status == "spent":
        return "The payment was used for its call; failures after use are refunded automatically."
    if status == "canceled":
        return "The held payment was canceled; it went back to the paying wallet."
    return "The payment was already refunded; claim it with the link you were given."
