"""POST /api/decline-retry (MCP decline_retry): the refund instead of a free retry.

A paid call the upstream model refused on content keeps its payment for free retries
(CONTENT_FILTERED_RETRY, see :mod:`satsgate.payments.rework`). Its payer may take the
refund at once instead: paymentId and the rework_token of the latest refusal (which only
the payer was shown, so it proves the payment). Exactly once: the window's one
conditional UPDATE from open decides between a decline, a retry and the expiry.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from satsgate.errors import ApiError, ErrorCode
from satsgate.operations.answers import Body, Refund
from satsgate.operations.base import Call, HttpRoute, OperationEnv, OperationSpec


class DeclineRetryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="decline_retry arguments")

    paymentId: str = Field(
        min_length=1, max_length=200, description="The payment in its free-retry window."
    )
    rework_token: str = Field(
        min_length=1,
        max_length=200,
        validation_alias=AliasChoices("rework_token", "reworkToken"),
        description="The rework_token of the latest CONTENT_FILTERED_RETRY answer "
        "(reworkToken accepted too).",
    )


class RetryDeclined(Body):
    """decline_retry: the payment refunded in full (claim the LNURL-withdraw link in
    refund, or at /recover)."""

    model_config = ConfigDict(title="RetryDeclined")

    success: bool
    paymentId: str
    amountSats: int
    message: str
    refund: Refund | None = None


async def decline_retry(env: OperationEnv, args: DeclineRetryArgs, call: Call) -> RetryDeclined:
    desk = env.gate.spender.rework
    if desk is None:
        raise ApiError(ErrorCode.PAYMENT_NOT_FOUND, "No free-retry window for this paymentId.")
    return RetryDeclined.model_validate(await desk.decline(args.paymentId, args.rework_token))


DECLINE_RETRY: OperationSpec[DeclineRetryArgs, RetryDeclined] = OperationSpec(
    name="decline_retry",
    title="Decline a free retry",
    description="After CONTENT_FILTERED_RETRY: take the refund of the payment in full "
    "instead of retrying, with paymentId and rework_token. Once per payment. Free.",
    params=DeclineRetryArgs,
    result=RetryDeclined,
    handler=decline_retry,
    http=HttpRoute(
        "POST",
        "/api/decline-retry",
        example='{"paymentId": "pay_...", "rework_token": "..."}',
        llms='`POST {url}` with `{{"paymentId": "...", "rework_token": "..."}}`',
    ),
    tool="decline_retry",
    read_only=False,
    rate_rule="refund",
    error_codes=(
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.PAYMENT_NOT_FOUND,
        ErrorCode.REWORK_TOKEN_INVALID,
        ErrorCode.REFUND_NOT_AVAILABLE,
        ErrorCode.RATE_LIMITED,
        ErrorCode.INTERNAL_ERROR,
    ),
)
