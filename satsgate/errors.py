"""The error codes, their catalog, the error envelope and the root of the exception tree.

:class:`ErrorCode` is a ``StrEnum`` of every machine-readable code; a member's value
is the string on the wire (``error_code``, ``X-Error-Code``, /api/error-codes, the
OpenAPI document, MCP), and code names a member, never a bare string, so a type
checker rejects an unknown code. One table (:data:`CODES`, a :class:`CodeSpec` per
member) gives each code its HTTP status, whether it is retryable (and after how
long), and the suggestion an agent is shown. Every error response, HTTP or MCP, is
built from it by :func:`envelope`, so the body's ``error_code`` and the
``X-Error-Code`` header can never disagree.

Exception tree. Whatever a caller is answered leaves a face as an :class:`ApiError`;
the domain exceptions that stand for a code carry it as ``code: ErrorCode`` and turn
into an ApiError in one place::

    ApiError                         a code, a message, extra fields, a refund: the
                                     envelope; the HTTP edge (edge.http.error_middleware)
                                     and the MCP face render it
    engines.EngineError              an engine failed after payment: ``code``,
                                     ``may_fall_back``, a retry hint; ``api_error()`` is
                                     its envelope (the gate refunds, then raises it)
    payments.l402.CredentialError    PAYMENT_INVALID: the credential does not verify
        l402.CredentialExpired       PAYMENT_EXPIRED
        mpp.InvalidChallenge         PAYMENT_INVALID (problem invalid-challenge)
    payments.l402.MalformedCredential    MALFORMED_CREDENTIAL
                                     (these three: ``code`` and the draft's ``problem``,
                                     answered by payments/http.py with a fresh challenge)
    payments.session_wire.SessionProblem a refused session credential: ``code`` and
                                     ``problem``; ``api_error()`` for MCP

Exceptions that name no code, because the code depends on where they are raised, are
mapped by the one caller that knows: pydantic's ValidationError by
:func:`invalid_params`; ``services.inputs.params.InvalidField`` (a pre-payment file
check) to L402_INVALID_PARAMS by ``ServiceParams.checked``;
``json_input.JsonInputError`` to L402_INVALID_PARAMS (a body), MALFORMED_CREDENTIAL (an
MPP credential) or a JSON-RPC parse error (MCP);
``public_urls.UnsafeUrl`` to L402_CALLBACK_INVALID (``callback_error``);
``services.comms.screening.HeldForReview`` to CONTENT_POLICY_HELD (the hold desk) or
CONTENT_FILTERED with a refund (``Spender._hold``); the Cashu mint's
``MintError``/``MintUnreachable`` to the CASHU_* codes (payments/cashu.py).
The node's ``lightning.BackendError`` is mapped where it is met (an invoice not made is
SERVICE_ERROR, before anything is charged); the hold pages' ``HoldError`` and the
configuration errors answer no envelope. No code picks an error by testing an
exception's message: a branch reads a type or an attribute. Only where an upstream gives
nothing else is its text read: a failed prediction's free-text error
(``predictions.is_refusal``: CONTENT_FILTERED or SERVICE_ERROR), and lnd's macaroon
refusal, which comes with gRPC code Unknown (it only words the operator's message).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

CATALOG_VERSION = 1


class ErrorCode(StrEnum):
    """Every machine-readable error code; a member's value is its wire string."""

    TIMEOUT = "TIMEOUT"
    CONTENT_FILTERED = "CONTENT_FILTERED"
    CONTENT_FILTERED_RETRY = "CONTENT_FILTERED_RETRY"
    REWORK_EXPIRED = "REWORK_EXPIRED"
    REWORK_TOKEN_INVALID = "REWORK_TOKEN_INVALID"
    CONTENT_POLICY_HELD = "CONTENT_POLICY_HELD"
    RATE_LIMITED = "RATE_LIMITED"
    INVALID_INPUT = "INVALID_INPUT"
    SERVICE_ERROR = "SERVICE_ERROR"
    PAYMENT_NOT_FOUND = "PAYMENT_NOT_FOUND"
    PAYMENT_PENDING = "PAYMENT_PENDING"
    PAYMENT_ALREADY_USED = "PAYMENT_ALREADY_USED"
    RESULT_NOT_AVAILABLE = "RESULT_NOT_AVAILABLE"
    L402_INVALID_PARAMS = "L402_INVALID_PARAMS"
    L402_UPSTREAM_FAILED = "L402_UPSTREAM_FAILED"
    L402_REFUND_ISSUED = "L402_REFUND_ISSUED"
    L402_DEDUP_HIT = "L402_DEDUP_HIT"
    L402_AUTO_ROUTED = "L402_AUTO_ROUTED"
    L402_ESTIMATE_ONLY = "L402_ESTIMATE_ONLY"
    L402_CALLBACK_INVALID = "L402_CALLBACK_INVALID"
    REFUND_NOT_AVAILABLE = "REFUND_NOT_AVAILABLE"
    BOOK_QUALITY_CHECK_FAILED = "BOOK_QUALITY_CHECK_FAILED"
    OUTPUT_DURATION_INSANE = "OUTPUT_DURATION_INSANE"
    PAYMENT_REQUIRED = "PAYMENT_REQUIRED"
    PAYMENT_INVALID = "PAYMENT_INVALID"
    PAYMENT_EXPIRED = "PAYMENT_EXPIRED"
    PAYMENT_INSUFFICIENT = "PAYMENT_INSUFFICIENT"
    MALFORMED_CREDENTIAL = "MALFORMED_CREDENTIAL"
    SESSION_BINDING_REQUIRED = "SESSION_BINDING_REQUIRED"
    CASHU_TOKEN_INVALID = "CASHU_TOKEN_INVALID"
    CASHU_MINT_NOT_ACCEPTED = "CASHU_MINT_NOT_ACCEPTED"
    CASHU_UNIT_NOT_ACCEPTED = "CASHU_UNIT_NOT_ACCEPTED"
    CASHU_AMOUNT_TOO_SMALL = "CASHU_AMOUNT_TOO_SMALL"
    CASHU_TOKEN_SPENT = "CASHU_TOKEN_SPENT"
    CASHU_MINT_UNAVAILABLE = "CASHU_MINT_UNAVAILABLE"
    CASHU_TOKEN_PENDING = "CASHU_TOKEN_PENDING"
    SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    NOT_FOUND = "NOT_FOUND"
    DELIVERY_NOT_FOUND = "DELIVERY_NOT_FOUND"
    AI_CALL_NOT_FOUND = "AI_CALL_NOT_FOUND"
    SIGNING_REQUEST_NOT_FOUND = "SIGNING_REQUEST_NOT_FOUND"
    VOICE_BRIDGE_SESSION_NOT_FOUND = "VOICE_BRIDGE_SESSION_NOT_FOUND"
    RECIPIENT_OPTED_OUT = "RECIPIENT_OPTED_OUT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    INTERNAL_ERROR = "INTERNAL_ERROR"


@dataclass(frozen=True)
class CodeSpec:
    """One catalog entry: what a code means and how it is answered."""

    code: ErrorCode
    http_status: int
    meaning: str
    suggestion: str
    example: str = ""
    retry_after_seconds: int | None = None  # present only for retryable codes
    spec: bool = True  # False for codes satsgate adds to the spec's 23


_CODES: tuple[CodeSpec, ...] = (
    CodeSpec(
        ErrorCode.TIMEOUT,
        504,
        "The request or the upstream engine timed out.",
        "Retry later with the same request.",
        retry_after_seconds=20,
    ),
    CodeSpec(
        ErrorCode.CONTENT_FILTERED,
        422,
        "The output was blocked by content moderation.",
        "Rephrase the prompt and submit again.",
    ),
    CodeSpec(
        ErrorCode.CONTENT_FILTERED_RETRY,
        422,
        "The upstream model refused although the content screen passed. "
        "The payment is neither spent nor refunded.",
        "Change the input and retry with the same paymentId and reworkToken before rework_until.",
    ),
    CodeSpec(
        ErrorCode.REWORK_EXPIRED,
        410,
        "Free retries ended at the deadline; nothing ran.",
        "A refund opens within 15 minutes; claim it at /recover.",
    ),
    CodeSpec(
        ErrorCode.REWORK_TOKEN_INVALID,
        403,
        "A retry lacked a valid reworkToken; nothing ran.",
        "Send the rework_token from the CONTENT_FILTERED_RETRY response as reworkToken.",
    ),
    CodeSpec(
        ErrorCode.CONTENT_POLICY_HELD,
        451,
        "The request is held for review and was not delivered; the payment is held.",
        "Ask for human review at appeal_url (1 sat).",
    ),
    CodeSpec(
        ErrorCode.RATE_LIMITED,
        429,
        "Too many requests.",
        "Wait and retry.",
        retry_after_seconds=10,
    ),
    CodeSpec(
        ErrorCode.INVALID_INPUT,
        400,
        "The engine rejected the parameters.",
        "Fix the input and resubmit.",
    ),
    CodeSpec(
        ErrorCode.SERVICE_ERROR,
        502,
        "Generic upstream failure.",
        "Try another model, or retry later.",
    ),
    CodeSpec(
        ErrorCode.PAYMENT_NOT_FOUND,
        404,
        "No payment with this paymentId.",
        "Create a payment first with create_payment (or POST without Authorization).",
    ),
    CodeSpec(
        ErrorCode.PAYMENT_PENDING,
        402,
        "The invoice is not paid yet.",
        "Pay the invoice, then retry with the same paymentId.",
        retry_after_seconds=5,
    ),
    CodeSpec(
        ErrorCode.PAYMENT_ALREADY_USED,
        403,
        "Service already used: one payment covers one call.",
        "Create a new payment for the next call.",
    ),
    CodeSpec(
        ErrorCode.RESULT_NOT_AVAILABLE,
        410,
        "This result cannot be handed over: the payment was refunded, or the result expired.",
        "Nothing was charged for this request; claim any refund at /recover.",
    ),
    CodeSpec(
        ErrorCode.L402_INVALID_PARAMS,
        400,
        "Validation failed before payment; no invoice was created.",
        "Fix the listed fields and send the request again.",
        example='{"template": "headline", "title": "Hello"}',
    ),
    CodeSpec(
        ErrorCode.L402_UPSTREAM_FAILED,
        502,
        "The service failed after payment.",
        "Claim the refund with the LNURL-withdraw link in `refund`.",
    ),
    CodeSpec(
        ErrorCode.L402_REFUND_ISSUED,
        502,
        "A refund was issued for this payment.",
        "Claim the refund with the LNURL-withdraw link in `refund`.",
    ),
    CodeSpec(
        ErrorCode.L402_DEDUP_HIT,
        200,
        "An identical request with the same credential was served from the 30 s dedup cache.",
        "Nothing to do; send X-No-Cache to bypass the cache.",
    ),
    CodeSpec(
        ErrorCode.L402_AUTO_ROUTED,
        200,
        "Routed through model 'auto'; the chosen id is in X-Route-Model.",
        "Pin a numeric modelId for reproducibility.",
    ),
    CodeSpec(
        ErrorCode.L402_ESTIMATE_ONLY,
        200,
        "This response is an estimate; no invoice was created.",
        "POST the request to /api/l402/<service> to get an invoice.",
    ),
    CodeSpec(
        ErrorCode.L402_CALLBACK_INVALID,
        400,
        "callback_url rejected: it must be public HTTPS.",
        "Use a public https:// URL, or omit callback_url and poll.",
    ),
    CodeSpec(
        ErrorCode.REFUND_NOT_AVAILABLE,
        409,
        "No refund: the payment was delivered, already refunded, or a refund is queued.",
        "When refund_status is present, claim at /recover.",
    ),
    CodeSpec(
        ErrorCode.BOOK_QUALITY_CHECK_FAILED,
        422,
        "Source book chapters failed sanity checks. A refund was issued.",
        "Fix the source file; claim the refund with the link in `refund`.",
    ),
    CodeSpec(
        ErrorCode.OUTPUT_DURATION_INSANE,
        502,
        "The rendered audiobook reports a duration over 24 hours. A refund was issued.",
        "Claim the refund with the link in `refund`.",
    ),
    # Codes satsgate adds: the spec leaves these situations without a code.
    CodeSpec(
        ErrorCode.PAYMENT_REQUIRED,
        402,
        "This call needs payment.",
        "Pay the invoice in the WWW-Authenticate challenge and repeat the request "
        "with Authorization.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.PAYMENT_INVALID,
        402,
        "The credential does not verify (macaroon, preimage, challenge or service binding).",
        "Pay the fresh invoice offered in this response.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.PAYMENT_EXPIRED,
        402,
        "The invoice or challenge expired before it was paid.",
        "Pay the fresh invoice offered in this response.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.PAYMENT_INSUFFICIENT,
        402,
        "The request prices above what was paid for it; the payment was refunded in full.",
        "Claim the refund, then pay the new quote.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.MALFORMED_CREDENTIAL,
        400,
        "The Authorization header cannot be parsed.",
        "Send exactly one credential: 'L402 <macaroon>:<preimage>' or 'Payment <b64url>'.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.SESSION_BINDING_REQUIRED,
        402,
        "A payment session is spent, topped up and closed only with the session token its "
        "open answered; this credential lacks it or carries another. Nothing was charged.",
        "Send payload.token: the sessionToken of the open's Payment-Receipt (also its "
        "Payment-Session-Token header). Over MCP the paymentId is "
        "sess_<sessionId>.<sessionToken>.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.CASHU_TOKEN_INVALID,
        400,
        "The X-Cashu token does not decode, or its mint refused it as invalid (NUT-24).",
        "Send one cashuB (V4) token from a mint named in the 402's X-Cashu payment request.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.CASHU_MINT_NOT_ACCEPTED,
        400,
        "The X-Cashu token is from a mint this node does not accept (NUT-24).",
        "Pay with a token from one of the mints listed in `mints` (and in the 402's X-Cashu).",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.CASHU_UNIT_NOT_ACCEPTED,
        400,
        "The X-Cashu token is in another unit than this node takes (NUT-24).",
        "Pay with a token in the unit named in `unit` (sat).",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.CASHU_AMOUNT_TOO_SMALL,
        400,
        "The X-Cashu token is worth less than the request costs, after the mint's input fees "
        "(NUT-24).",
        "Send a token worth at least `amountSats` plus `inputFeeSats`; any excess comes back "
        "as change in X-Cashu-Change.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.CASHU_TOKEN_SPENT,
        400,
        "The X-Cashu token was presented before or is spent at its mint: a token pays for one "
        "call (NUT-24).",
        "Send a fresh token. If the call it paid for failed, its refund token is attached.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.CASHU_MINT_UNAVAILABLE,
        503,
        "The X-Cashu token's mint did not answer; nothing was charged.",
        "Retry later with the same token.",
        retry_after_seconds=30,
        spec=False,
    ),
    CodeSpec(
        ErrorCode.CASHU_TOKEN_PENDING,
        503,
        "The X-Cashu token's swap at its mint is not settled yet: its answer was lost, the "
        "mint holds the token's proofs pending, or another request is redeeming the same "
        "token. The token is not lost: it pays for one call, or it is handed back.",
        "Retry with the same token after retry_after_seconds.",
        retry_after_seconds=5,
        spec=False,
    ),
    CodeSpec(
        ErrorCode.SERVICE_UNAVAILABLE,
        503,
        "This service has no engine configured on this node.",
        "Use another service, or ask the operator to configure it.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.STORE_UNAVAILABLE,
        503,
        "The node's database did not answer (restarting, or unreachable): this request did "
        "not run. A payment it carried is not lost: its call was not served, and it pays "
        "for a retry.",
        "Retry with the same request and credential after retry_after_seconds.",
        retry_after_seconds=5,
        spec=False,
    ),
    CodeSpec(
        ErrorCode.NOT_FOUND,
        404,
        "No such service, job or resource.",
        "See /api/l402/models and /.well-known/l402-services for what exists.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.DELIVERY_NOT_FOUND,
        404,
        "No SMS with this message_id, or no call with this call_id.",
        "Use the message_id of the send-sms answer or the call_id of the call answer.",
        example="GET /api/l402/send-sms?message_id=<message_id>",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.AI_CALL_NOT_FOUND,
        404,
        "No AI call with this call_id, or none awaiting confirmation under this session_id.",
        "Use the call_id or session_id from the ai-call answer; a confirmation is "
        "accepted only while the call is pending_confirm.",
        example='{"action": "confirm", "session_id": "<session_id>", "answers": {}}',
        spec=False,
    ),
    CodeSpec(
        ErrorCode.SIGNING_REQUEST_NOT_FOUND,
        404,
        "No e-signature request with this requestId.",
        "Use the requestId from the e-signature answer (its status_url reads it).",
        example="GET /api/l402/e-signature?requestId=<requestId>",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.VOICE_BRIDGE_SESSION_NOT_FOUND,
        404,
        "No voice-bridge session with this sessionId; for say, none that is still open.",
        "Use the sessionId from the open_voice_bridge answer. Say needs an open session: "
        "after end_voice_bridge (or when the deposit ran out) open a new one.",
        example='{"sessionId": "<sessionId>"}',
        spec=False,
    ),
    CodeSpec(
        ErrorCode.RECIPIENT_OPTED_OUT,
        403,
        "A recipient asked not to be contacted (the do-not-contact list).",
        "Remove the listed recipients. Refused before any invoice: nothing was charged "
        "(a payment already made stays unused: request_refund gives it back; refused "
        "after the spend, the refund is attached).",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.PAYLOAD_TOO_LARGE,
        413,
        "The request body is larger than this service accepts.",
        "Send a smaller file.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.METHOD_NOT_ALLOWED,
        405,
        "This endpoint does not take that HTTP method.",
        "Use the method listed in the OpenAPI document.",
        spec=False,
    ),
    CodeSpec(
        ErrorCode.INTERNAL_ERROR,
        500,
        "An unexpected error inside satsgate.",
        "Retry; if it persists, tell the operator.",
        spec=False,
    ),
)

CODES: dict[ErrorCode, CodeSpec] = {c.code: c for c in _CODES}


@dataclass
class ApiError(Exception):
    """An error with a catalog code. Raise it anywhere; the edge renders the envelope."""

    code: ErrorCode
    message: str
    extra: dict[str, Any] = field(default_factory=dict)
    refund: dict[str, Any] | None = None
    suggestion: str | None = None
    example: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.code = ErrorCode(self.code)  # a stored code string becomes its member; unknown raises
        super().__init__(self.message)

    @property
    def http_status(self) -> int:
        return CODES[self.code].http_status

    def envelope(self) -> dict[str, Any]:
        return envelope(
            self.code,
            self.message,
            refund=self.refund,
            suggestion=self.suggestion,
            example=self.example,
            **self.extra,
        )


def envelope(
    code: ErrorCode,
    message: str,
    *,
    refund: dict[str, Any] | None = None,
    suggestion: str | None = None,
    example: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The spec's error body: error, error_code, suggestion, example, retry hint, refund."""
    entry = CODES[ErrorCode(code)]
    body: dict[str, Any] = {
        "error": message,
        "error_code": entry.code.value,
        "suggestion": suggestion or entry.suggestion,
        "example": example if example is not None else entry.example,
    }
    if entry.retry_after_seconds is not None:
        body["retry_after_seconds"] = entry.retry_after_seconds
    if refund is not None:
        body["refund"] = refund
    body.update(extra)
    return body


def invalid_params(exc: ValidationError, what: str = "parameters", example: str = "") -> ApiError:
    """A pydantic ValidationError as L402_INVALID_PARAMS, listing every bad field."""
    fields = [
        {"field": ".".join(str(p) for p in err["loc"]) or "(body)", "message": err["msg"]}
        for err in exc.errors(include_url=False, include_context=False)
    ]
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    return ApiError(
        ErrorCode.L402_INVALID_PARAMS,
        f"Invalid {what}: {summary}",
        extra={"fields": fields},
        example=example,
    )


def catalog_document() -> dict[str, Any]:
    """GET /api/error-codes."""
    return {
        "version": CATALOG_VERSION,
        "codes": [
            {
                "error_code": c.code.value,
                "http_status": c.http_status,
                "meaning": c.meaning,
                "suggestion": c.suggestion,
                "retryable": c.retry_after_seconds is not None,
                "retry_after_seconds": c.retry_after_seconds,
                "in_spec": c.spec,
            }
            for c in _CODES
        ],
    }


# The refund object's fields that claim it: shown only to whoever proves the payment
# (satsgate.payments.proof).
_REFUND_SECRETS = ("lnurl_withdraw", "refund_secret", "recover_url")
PROOF_HINT = (
    "The refund link is shown to the payer only: poll with the Authorization header the "
    "call was paid with (or, for a payment made with create_payment, its paymentId)."
)


def without_refund_secrets(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its refund object (if any) stripped of what claims it."""
    refund = body.get("refund")
    if not isinstance(refund, dict):
        return body
    public = {k: v for k, v in refund.items() if k not in _REFUND_SECRETS}
    return {**body, "refund": {**public, "claim": PROOF_HINT}}
