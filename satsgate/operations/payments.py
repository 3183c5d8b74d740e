"""Free operations on payments: the payment status and the refund of an unused payment."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from satsgate.aio import unless_closing
from satsgate.errors import ApiError, ErrorCode
from satsgate.operations.answers import PaymentDocument, RefundIssued
from satsgate.operations.base import AnySpec, Call, HttpRoute, OperationEnv, OperationSpec
from satsgate.payments import refund_request
from satsgate.payments.gate import Gate
from satsgate.payments.mpp import rfc3339
from satsgate.payments.proof import SEND_AUTHORIZATION, SEND_CREDENTIAL, refuse_bare_preimage
from satsgate.store import Payment, PaymentStatus

public_status = refund_request.public_status

# Payment ids are minted by the gate as pay_<32 hex>; anything else is not looked up.
PAYMENT_ID = re.compile(r"^pay_[0-9a-f]{32}$")
STATUS_PATH = "/api/payments/{ref}"
MAX_WAIT_S = 25.0


def payment_document(
    payment: Payment, spec: AnySpec | None, checkout_url: str, *, with_id: bool = True
) -> dict[str, Any]:
    """The Payment resource as check_payment_status and the checkout page report it;
    ``with_id`` False for the checkout page's poll, whose token must not lead to the
    paymentId (which spends an MCP payment)."""
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
        doc["hostedCheckoutUrl"] = checkout_url
    if not with_id:
        del doc["paymentId"]
    return doc


async def load_payment(gate: Gate, ref: str, *, by_id: bool = False) -> Payment | None:
    """The payment of a checkout token (or, ``by_id``, of a paymentId too), refreshed
    from the node when its settlement was not seen yet."""
    payment: Payment | None = None
    if by_id and PAYMENT_ID.match(ref):
        payment = await gate.get_payment(ref)
    else:
        payment_hash = gate.checkout_payment_hash(ref)
        if payment_hash is not None:
            payment = await gate.get_payment_by_hash(payment_hash)
    return None if payment is None else await gate.refresh_paid(payment)


# -- payment status -------------------------------------------------------------------------


class PaymentIdArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="check_payment_status arguments")

    paymentId: str = Field(min_length=1, max_length=200, description="From create_payment.")


class PaymentStatusParams(BaseModel):
    """GET /api/payments/<ref>: a checkout token (the page's poll: the answer leaves out
    the paymentId) or the paymentId itself; ``wait`` long-polls."""

    model_config = ConfigDict(extra="forbid", title="payment status parameters")

    ref: str = Field(
        min_length=1,
        max_length=200,
        description="The token of a hostedCheckoutUrl, or the paymentId.",
    )
    wait: str | None = Field(
        None,
        description="Long poll: wait up to this many seconds (at most 25) for the invoice "
        "to settle.",
    )


async def payment_status(
    env: OperationEnv, params: PaymentStatusParams | PaymentIdArgs, call: Call
) -> PaymentDocument:
    gate = env.gate
    if isinstance(params, PaymentStatusParams):  # HTTP: a checkout token or the paymentId
        ref, wait = params.ref, params.wait
        payment = await load_payment(gate, ref, by_id=True)
        if payment is None:
            raise ApiError(ErrorCode.PAYMENT_NOT_FOUND, "No such payment.")
    else:  # MCP: the paymentId
        ref, wait = params.paymentId, None
        found = await gate.get_payment(ref)
        if found is None:
            raise ApiError(ErrorCode.PAYMENT_NOT_FOUND, f"No payment {ref!r}.")
        payment = await gate.refresh_paid(found)
    if wait is not None:
        try:
            wait_s = min(max(float(wait), 0.0), MAX_WAIT_S)
        except ValueError:
            raise ApiError(
                ErrorCode.INVALID_INPUT, "wait must be a number of seconds (0 to 25)."
            ) from None
        if wait_s > 0 and public_status(payment) == "unpaid":
            # Never wait past the invoice expiry: the page should show "expired" then.
            wait_s = min(wait_s, max(payment.expires_at - time.time(), 0.0))
            payment = await _wait_paid(gate, payment, wait_s, env.closing)
    spec = env.by_slug.get(payment.service)
    doc = payment_document(
        payment, spec, gate.checkout_url(payment), with_id=ref == payment.payment_id
    )
    rework = gate.spender.rework
    if rework is not None and ref == payment.payment_id:  # a free-retry window, its refund
        doc.update(await rework.status_fields(payment))
    if isinstance(params, PaymentStatusParams) and await _handed_off(gate, payment, call):
        doc["preimage"] = await gate.preimage_of(payment)
    return PaymentDocument.model_validate(doc)


async def _handed_off(gate: Gate, payment: Payment, call: Call) -> bool:
    """Someone paid an HTTP 402's invoice (its checkout page, another wallet) and the
    agent that got the 402 asks with that 402's credential: the macaroon or the echoed
    challenge, which only it received over HTTPS (the route learns the hash and the
    preimage, never these). Only an unused payment's preimage is handed over."""
    return (
        payment.via == "http"
        and payment.status is PaymentStatus.PAID
        and bool(call.authorization)
        and gate.verifier.issued_for(call.authorization, payment)
    )


async def _wait_paid(
    gate: Gate, payment: Payment, wait_s: float, closing: asyncio.Event
) -> Payment:
    """Gate.wait_paid, cut short when the service shuts down."""
    paid = await unless_closing(gate.wait_paid(payment, wait_s), closing)
    if paid is None:
        return await gate.get_payment(payment.payment_id) or payment
    return paid


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
        example="GET /api/payments/<token or paymentId>?wait=25",
        headers={"Cache-Control": "no-store"},
        summary="A payment's status, by the token of its hostedCheckoutUrl (the answer "
        "then leaves out the paymentId) or by its paymentId; ?wait=N long-polls until it "
        "settles (at most 25 s). With the Authorization of the 402 that created it (its "
        "macaroon alone, or its Payment challenge echoed), a paid, unused payment's answer "
        "carries its preimage: someone else paid, the agent finishes its call.",
        llms="`GET {url}` (`?wait=25` long-polls until paid)",
    ),
    tool="check_payment_status",
    error_codes=(
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.INVALID_INPUT,
        ErrorCode.PAYMENT_NOT_FOUND,
        ErrorCode.INTERNAL_ERROR,
    ),
)


# -- refund ---------------------------------------------------------------------------------


class RequestRefundArgs(BaseModel):
    """POST /api/l402/refund's body; an HTTP 402 payment's proof is its credential, in
    the Authorization header (the same header the call would be paid with)."""

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

    @model_validator(mode="before")
    @classmethod
    def _preimage_refused(cls, data: Any) -> Any:
        return refuse_bare_preimage(data, SEND_AUTHORIZATION)


class RequestRefundToolArgs(RequestRefundArgs):
    """MCP request_refund: the credential of an HTTP 402 payment as an argument."""

    model_config = ConfigDict(title="request_refund arguments")

    credential: str | None = Field(
        None,
        min_length=1,
        max_length=8000,
        description="Only for a payment made through an HTTP 402 challenge (a call's, a "
        "session deposit's or top-up's): the credential it was paid with, the Authorization "
        "value 'L402 <macaroon>:<preimage>' or 'Payment <base64url JSON>'. A payment from "
        "create_payment needs none.",
    )

    @model_validator(mode="before")
    @classmethod
    def _preimage_refused(cls, data: Any) -> Any:
        return refuse_bare_preimage(data, SEND_CREDENTIAL)


async def request_refund(env: OperationEnv, args: RequestRefundArgs, call: Call) -> RefundIssued:
    """See :mod:`satsgate.payments.refund_request`."""
    if isinstance(args, RequestRefundToolArgs):
        authorization: Sequence[str] = () if args.credential is None else (args.credential,)
        send = SEND_CREDENTIAL
    else:
        authorization, send = call.authorization, SEND_AUTHORIZATION
    return RefundIssued.model_validate(
        await refund_request.request_refund(
            env.gate,
            env.refunds,
            env.settings.network,
            args.paymentId,
            args.invoice,
            args.feedback,
            authorization,
            send,
        )
    )


REQUEST_REFUND: OperationSpec[RequestRefundArgs, RefundIssued] = OperationSpec(
    name="request_refund",
    title="Refund an unused payment",
    description="Refund a paid payment that was never used for its call, in full. Pass an "
    "invoice of yours for exactly the amount paid to be paid at once; an LNURL-withdraw link "
    "is returned either way. A payment made through an HTTP 402 challenge (a call's, a "
    "session deposit's or top-up's) is refunded only with the credential it was paid with "
    "(HTTP: the Authorization header; MCP: credential); one from create_payment by its "
    "paymentId. Used, unpaid or refunded payments: REFUND_NOT_AVAILABLE. Free.",
    params=RequestRefundArgs,
    tool_params=RequestRefundToolArgs,
    result=RefundIssued,
    handler=request_refund,
    http=HttpRoute(
        "POST",
        "/api/l402/refund",
        example='{"paymentId": "pay_...", "invoice": "lnbcrt..."}',
        payer_credential=True,
        llms='`POST {url}` with `{{"paymentId": "...", "invoice": "<bolt11 for the amount>"}}` '
        "and, for a 402 payment, the `Authorization` it was paid with",
    ),
    tool="request_refund",
    read_only=False,
    rate_rule="refund",
    error_codes=(
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.INVALID_INPUT,
        ErrorCode.PAYMENT_INVALID,
        ErrorCode.PAYMENT_NOT_FOUND,
        ErrorCode.REFUND_NOT_AVAILABLE,
        ErrorCode.RATE_LIMITED,
        ErrorCode.INTERNAL_ERROR,
    ),
)
