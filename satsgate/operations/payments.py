"""Free operations on payments: the payment status and the refund of an unused payment."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from satsgate.errors import ApiError
from satsgate.operations.base import AnySpec, Call, HttpRoute, OperationEnv, OperationSpec
from satsgate.operations.models import PaymentDocument, RefundIssued
from satsgate.payments import refund_request
from satsgate.payments.gate import Gate
from satsgate.payments.mpp import rfc3339
from satsgate.store import Payment, PaymentStatus

public_status = refund_request.public_status

# Payment ids are minted by the gate as pay_<32 hex>; anything else is not looked up.
PAYMENT_ID = re.compile(r"^pay_[0-9a-f]{32}$")
STATUS_PATH = "/api/payments/{paymentId}"
MAX_WAIT_S = 25.0


def payment_document(payment: Payment, spec: AnySpec | None, base_url: str) -> dict[str, Any]:
    """The Payment resource as check_payment_status and the checkout page report it."""
    status = public_status(payment)
    doc: dict[str, Any] = {
        "paymentId": payment.payment_id,
        # A canceled hold invoice went back to the payer: not paid.
        "paid": payment.status not in (PaymentStatus.UNPAID, PaymentStatus.CANCELED),
        "status": status,
        "amountSats": payment.amount_msat // 1000,
        "service": payment.service,
        "toolName": spec.tool_name if spec is not None else None,
        "title": spec.title if spec is not None else payment.service,
        "expiresAt": rfc3339(payment.expires_at),
    }
    if status == "unpaid":
        doc["lightningInvoice"] = payment.bolt11
        doc["hostedCheckoutUrl"] = f"{base_url}/checkout/{payment.payment_id}"
    return doc


async def load_payment(gate: Gate, payment_id: str) -> Payment | None:
    """The payment, refreshed from the node when its settlement was not seen yet."""
    if not PAYMENT_ID.match(payment_id):
        return None
    payment = await gate.get_payment(payment_id)
    return None if payment is None else await gate.refresh_paid(payment)


# -- payment status -------------------------------------------------------------------------


class PaymentIdArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="check_payment_status arguments")

    paymentId: str = Field(min_length=1, max_length=200, description="From create_payment.")


class PaymentStatusParams(PaymentIdArgs):
    model_config = ConfigDict(extra="forbid", title="payment status parameters")

    wait: str | None = Field(
        None,
        description="Long poll: wait up to this many seconds (at most 25) for the invoice "
        "to settle.",
    )


async def payment_status(env: OperationEnv, params: PaymentIdArgs, call: Call) -> PaymentDocument:
    payment = await load_payment(env.gate, params.paymentId)
    if payment is None:
        raise ApiError("PAYMENT_NOT_FOUND", f"No payment {params.paymentId!r}.")
    wait = getattr(params, "wait", None)
    if wait is not None:
        try:
            wait_s = min(max(float(wait), 0.0), MAX_WAIT_S)
        except ValueError:
            raise ApiError("INVALID_INPUT", "wait must be a number of seconds (0 to 25).") from None
        if wait_s > 0 and public_status(payment) == "unpaid":
            # Never wait past the invoice expiry: the page should show "expired" then.
            wait_s = min(wait_s, max(payment.expires_at - time.time(), 0.0))
            payment = await _wait_paid(env.gate, payment, wait_s, env.closing)
    spec = env.by_slug.get(payment.service)
    return PaymentDocument.model_validate(
        payment_document(payment, spec, env.settings.public_base_url)
    )


async def _wait_paid(
    gate: Gate, payment: Payment, wait_s: float, closing: asyncio.Event
) -> Payment:
    """Gate.wait_paid, cut short when the service shuts down."""
    waiter = asyncio.ensure_future(gate.wait_paid(payment, wait_s))
    closer = asyncio.ensure_future(closing.wait())
    try:
        await asyncio.wait({waiter, closer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closer.cancel()
        if not waiter.done():
            waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
    if waiter.cancelled():
        return await gate.get_payment(payment.payment_id) or payment
    return waiter.result()


CHECK_PAYMENT_STATUS: OperationSpec[PaymentStatusParams, PaymentDocument] = OperationSpec(
    name="check_payment_status",
    title="Check a payment",
    description="Step 2: whether the invoice of a paymentId has settled (paid: true), and its "
    "status (unpaid, paid, spent, refunded, expired). Free.",
    params=PaymentStatusParams,
    tool_params=PaymentIdArgs,
    result=PaymentDocument,
    handler=payment_status,
    http=HttpRoute(
        "GET",
        STATUS_PATH,
        example="GET /api/payments/<paymentId>?wait=25",
        headers={"Cache-Control": "no-store"},
        summary="A payment's status; ?wait=N long-polls until it settles (at most 25 s).",
        llms="`GET {url}` (`?wait=25` long-polls until paid)",
    ),
    tool="check_payment_status",
    error_codes=("L402_INVALID_PARAMS", "INVALID_INPUT", "PAYMENT_NOT_FOUND", "INTERNAL_ERROR"),
)


# -- refund ---------------------------------------------------------------------------------


class RequestRefundArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="request_refund arguments")

    paymentId: str = Field(min_length=1, max_length=200, description="The paid, unused payment.")
    invoice: str = Field(
        min_length=1,
        max_length=4000,
        description="A BOLT11 invoice of yours for exactly the amount paid; the refund pays it. "
        "Send the payment's own lightningInvoice instead to get an LNURL-withdraw link only.",
    )
    email: str | None = Field(None, max_length=320, description="Optional; not stored.")
    feedback: str | None = Field(
        None, max_length=2000, description="Optional: why the call was not used."
    )


async def request_refund(env: OperationEnv, args: RequestRefundArgs, call: Call) -> RefundIssued:
    """See :mod:`satsgate.payments.refund_request`."""
    return RefundIssued.model_validate(
        await refund_request.request_refund(
            env.gate,
            env.refunds,
            env.settings.network,
            args.paymentId,
            args.invoice,
            args.feedback,
        )
    )


REQUEST_REFUND: OperationSpec[RequestRefundArgs, RefundIssued] = OperationSpec(
    name="request_refund",
    title="Refund an unused payment",
    description="Refund a paid payment that was never used for its call, in full. Pass an "
    "invoice of yours for exactly the amount paid to be paid at once; an LNURL-withdraw link "
    "is returned either way. Used, unpaid or refunded payments: REFUND_NOT_AVAILABLE. Free.",
    params=RequestRefundArgs,
    result=RefundIssued,
    handler=request_refund,
    http=HttpRoute(
        "POST",
        "/api/l402/refund",
        example='{"paymentId": "pay_...", "invoice": "lnbcrt..."}',
        llms='`POST {url}` with `{{"paymentId": "...", "invoice": "<bolt11 for the amount>"}}`',
    ),
    tool="request_refund",
    read_only=False,
    rate_rule="refund",
    error_codes=(
        "L402_INVALID_PARAMS",
        "INVALID_INPUT",
        "PAYMENT_NOT_FOUND",
        "REFUND_NOT_AVAILABLE",
        "RATE_LIMITED",
        "INTERNAL_ERROR",
    ),
)
