"""The paymentId flow: create_payment -> pay -> check_payment_status -> the paid tool.

(check_payment_status and request_refund are free operations: satsgate.operations.payments.)

Every step goes through the Gate, exactly as the HTTP face does: the quote
(``challenge_for``), the spend rule, re-pricing and refunds live there once.
Schema failures before any payment raise L402_INVALID_PARAMS, and anything the gate
decides after looking at the payment is another ApiError: the catalog returns each as a
tool failure (``isError``) carrying the HTTP envelope, before the payment is touched.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from satsgate.edge.ratelimit import admit_challenge
from satsgate.errors import ApiError, ErrorCode
from satsgate.mcp import results
from satsgate.mcp.context import AnySpec, CallContext, ToolEnv
from satsgate.operations import payments
from satsgate.payments import rework
from satsgate.payments.challenger import Challenge
from satsgate.payments.sessions import MCP_PREFIX as SESSION_PREFIX
from satsgate.services.catalog.pricing import estimate
from satsgate.services.catalog.rates import RateBook
from satsgate.services.registry import ESTIMATORS
from satsgate.store import Payment

# Fields of a params model that a bare ``prompt`` (or ``characterCount``) may stand in
# for when an estimate is all that can be made: the spec's "the text to be processed".
TEXT_HINT_FIELDS = ("prompt", "text", "question", "task", "message", "markdown", "html")
MAX_CHARACTER_COUNT = 10_000_000
PAYMENT_ID_DOC = (
    "The paymentId from create_payment, after its lightningInvoice is paid. "
    "One payment covers one call. Or a payment session (opened over HTTP with the "
    "Payment scheme's session intent): sess_<sessionId>.<sessionToken>, the session "
    "token being the one the open answered (Payment-Session-Token; the preimage is not "
    "accepted), which debits this call's price from the session's balance."
)


class CreatePaymentArgs(BaseModel):
    """create_payment: toolName plus what prices the call. Unknown keys are the tool's arguments."""

    model_config = ConfigDict(extra="allow", title="create_payment arguments")

    toolName: str = Field(min_length=1, description="The paid tool to be called, e.g. render_card.")
    arguments: dict[str, Any] | None = Field(
        None,
        description="The tool's own arguments (without paymentId). When they validate, the "
        "quote is exact for them. Top-level keys other than these are taken as arguments too.",
    )
    prompt: str | None = Field(
        None, description="For text-priced tools: the text to be processed (sizes the quote)."
    )
    characterCount: int | None = Field(
        None,
        ge=1,
        le=MAX_CHARACTER_COUNT,
        description="translate_epub: visible characters of the book (sizes the quote).",
    )
    targetLanguage: str | None = Field(
        None, description="translate_epub (and translations): the target language."
    )


# -- the payment resource (satsgate.operations.payments) -------------------------------------

public_status = payments.public_status
payment_document = payments.payment_document


REWORK_TOKEN_DOC = (
    "Only for a free retry after CONTENT_FILTERED_RETRY: its rework_token, sent with the "
    "same paymentId and the changed arguments before rework_until."
)


async def find_payment(env: ToolEnv, payment_id: str) -> Payment:
    payment = await env.gate.get_payment(payment_id)
    if payment is None:
        raise ApiError(ErrorCode.PAYMENT_NOT_FOUND, f"No payment {payment_id!r}.")
    return payment


# -- create_payment -------------------------------------------------------------------------


async def create_payment(env: ToolEnv, args: CreatePaymentArgs, ctx: CallContext) -> dict[str, Any]:
    spec = env.paid.get(args.toolName)
    if spec is None:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"Unknown toolName {args.toolName!r}: name one of the paid tools "
            "(free tools need no payment).",
            extra={"tools": sorted(env.paid)},
        )
    env.gate.ensure_available(spec)
    admit_challenge()  # before the work of pricing it: its answer is an invoice
    candidate: dict[str, Any] = {**(args.model_extra or {}), **(args.arguments or {})}
    candidate.pop("paymentId", None)
    fields = spec.params.model_fields
    for name, value in (("prompt", args.prompt), ("targetLanguage", args.targetLanguage)):
        if value is not None and name in fields and name not in candidate:
            candidate[name] = value

    quote = "exact"
    note: dict[str, Any] = {}
    try:
        params = _validate_with_prompt(env, spec, candidate, args.prompt)
    except ApiError as invalid:
        quote = "estimate"
        amount_sats, digest = _estimate(spec, candidate, args, invalid, env.rates.book)
        challenge = await env.gate.create_payment(
            spec, amount_sats=amount_sats, digest=digest, via="mcp"
        )
        note = {
            "note": "Priced from the sizing hints: the arguments given do not validate yet "
            f"({invalid.message}). The call is re-priced when made; a shortfall is refunded "
            "in full and refused, an excess is refunded.",
        }
    else:
        await env.gate.prevalidate(spec, params)
        challenge = await env.gate.challenge_for(spec, params, via="mcp")
    return results.success({**_payment_fields(challenge, env, spec, quote), **note})


def _validate_with_prompt(
    env: ToolEnv, spec: AnySpec, candidate: dict[str, Any], prompt: str | None
) -> BaseModel:
    """The arguments as given; failing that, with ``prompt`` as the tool's text field."""
    validate_params = env.gate.validate_params
    try:
        return validate_params(spec, candidate)
    except ApiError:
        text_field = _text_field(spec)
        if prompt is None or text_field is None or text_field in candidate:
            raise
    try:
        return validate_params(spec, {**candidate, text_field: prompt})
    except ApiError:
        pass
    return validate_params(spec, candidate)  # report the caller's own arguments


def _text_field(spec: AnySpec) -> str | None:
    fields = spec.params.model_fields
    return next((f for f in TEXT_HINT_FIELDS if f in fields), None)


def _estimate(
    spec: AnySpec,
    candidate: dict[str, Any],
    args: CreatePaymentArgs,
    invalid: ApiError,
    book: RateBook,
) -> tuple[int, str]:
    """Price what was given: the service's estimator (sizing hints) if it has one, else
    the spec's own price on a model built with model_construct; L402_INVALID_PARAMS when
    impossible."""
    sized = _estimate_from_sizing_hints(spec, candidate, args, book)
    if sized is not None:
        return sized
    fields = spec.params.model_fields
    hints = {k: v for k, v in candidate.items() if k in fields}
    text_field = _text_field(spec)
    if text_field is not None and text_field not in hints:
        if args.prompt is not None:
            hints[text_field] = args.prompt
        elif args.characterCount is not None:
            hints[text_field] = "x" * args.characterCount
    try:
        amount_sats = spec.quote_sats(spec.params.model_construct(**hints), book)
    except Exception:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"Cannot price {spec.tool_name} from the arguments given ({invalid.message}). "
            "Send the tool's arguments, or prompt / characterCount, to get a quote.",
            extra=invalid.extra,
            example=invalid.example,
        ) from None
    canonical = json.dumps(hints, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(f"{spec.slug}\nestimate\n{canonical}".encode()).hexdigest()
    return amount_sats, digest


def _estimate_from_sizing_hints(
    spec: AnySpec, candidate: dict[str, Any], args: CreatePaymentArgs, book: RateBook
) -> tuple[int, str] | None:
    """The /api/estimate-cost estimator the service's price shape names, when the hints
    size it: characterCount (or the prompt's length) is its ``chars``, targetLanguage its
    target, and any of its own parameters given counts. Hints that name none of them are
    better priced by the spec itself (an estimator's defaults would stand in for them)."""
    estimate_id = spec.price_shape.estimate
    if estimate_id is None:
        return None
    fields = ESTIMATORS[estimate_id].params.model_fields
    hints = dict(candidate)
    if "chars" in fields and "chars" not in hints:
        if args.characterCount is not None:
            hints["chars"] = args.characterCount
        elif args.prompt is not None:
            hints["chars"] = len(args.prompt)
    if args.targetLanguage is not None and "targetLanguage" in fields:
        hints.setdefault("targetLanguage", args.targetLanguage)
    if not fields.keys() & hints.keys():
        return None
    try:
        quoted = estimate(ESTIMATORS, estimate_id, hints, book)
    except ApiError:
        return None  # the hints do not size this service; try the spec's own price
    canonical = json.dumps(quoted["params"], sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(f"{spec.slug}\nestimate\n{canonical}".encode()).hexdigest()
    return int(quoted["amountSats"]), digest


def _payment_fields(
    challenge: Challenge, env: ToolEnv, spec: AnySpec, quote: str
) -> dict[str, Any]:
    fields = challenge.body_fields(env.settings.public_base_url)
    return {
        "paymentId": fields["paymentId"],
        "lightningInvoice": fields["lightningInvoice"],
        "amountSats": fields["amountSats"],
        "hostedCheckoutUrl": fields["hostedCheckoutUrl"],
        "expiresAt": fields["expiresAt"],
        "paymentHash": fields["paymentHash"],
        "toolName": spec.tool_name,
        "quote": quote,
        "next": f"Pay lightningInvoice, confirm with check_payment_status, then call "
        f"{spec.tool_name} with this paymentId and the tool's arguments.",
    }


# -- the paid tool --------------------------------------------------------------------------


async def call_paid(
    env: ToolEnv, spec: AnySpec, arguments: dict[str, Any], ctx: CallContext
) -> dict[str, Any]:
    """Validate, then Gate.execute; nothing before the payment is looked at touches it."""
    env.gate.ensure_available(spec)
    body = dict(arguments)
    payment_id = body.pop("paymentId", None)
    if not isinstance(payment_id, str) or not payment_id:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"paymentId is required: call create_payment with toolName {spec.tool_name!r}, "
            "pay the invoice, then call this tool with the paymentId.",
            extra={"fields": [{"field": "paymentId", "message": "Field required"}]},
        )
    body, rework_token = rework.take_token(body)  # a free retry's token: not a param
    size = len(json.dumps(body, separators=(",", ":")).encode())
    if size > spec.max_body_bytes:
        raise ApiError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"The arguments are {size} bytes; {spec.tool_name} accepts at most "
            f"{spec.max_body_bytes}.",
        )
    params = env.gate.validate_params(spec, body)
    await env.gate.prevalidate(spec, params)
    if payment_id.startswith(SESSION_PREFIX) and env.gate.sessions is not None:
        return await _call_on_session(env, spec, params, payment_id)
    payment = await find_payment(env, payment_id)
    try:
        # The same dedup window as HTTP: a retried identical call gets its first outcome.
        result, _replayed = await env.gate.execute_deduplicated(
            payment, spec, params, rework_token=rework_token
        )
    except ApiError as exc:
        if exc.code == ErrorCode.PAYMENT_PENDING:
            exc.extra = {
                **exc.extra,
                "lightningInvoice": payment.bolt11,
                "hostedCheckoutUrl": env.gate.checkout_url(payment),
            }
        # Decided after looking at the payment: a tool failure, never a protocol error.
        return results.failure(exc)
    return results.from_service_result(result, untrusted=spec.untrusted_output)


async def _call_on_session(
    env: ToolEnv, spec: AnySpec, params: Any, payment_id: str
) -> dict[str, Any]:
    """A tool call paid from a payment session (payments/sessions.py): ``paymentId`` is
    ``sess_<sessionId>.<sessionToken>``; the call's price is debited from its balance, a
    failure credits it back, and the result carries the balance left."""
    assert env.gate.sessions is not None
    try:
        served = await env.gate.sessions.mcp_call(payment_id, spec, params)
    except ApiError as exc:
        return results.failure(exc)
    out = results.from_service_result(served.result, untrusted=spec.untrusted_output)
    structured = out.get("structuredContent")
    if isinstance(structured, dict):
        structured["session"] = {
            "sessionId": served.session_id,
            "chargedMsat": served.charged_msat,
            "balanceMsat": served.balance_msat,
            "balanceSats": served.balance_msat // 1000,
        }
    return out
