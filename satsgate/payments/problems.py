"""The Payment scheme's error answers: RFC 9457 problem details and ``Accept-Payment``.

A request that carries a ``Payment`` credential gets every error as
``application/problem+json`` (``type``, ``title``, ``status``, ``detail``) with
satsgate's error envelope (``error``, ``error_code``, ``suggestion``, ``refund``, ...)
as extension members, so a client of the core draft and a client of satsgate's
envelope read the same body. Payment problems use the draft's types under
``https://paymentauth.org/problems/``; any other failure is typed by its entry in
satsgate's error catalog (``<public URL>/api/error-codes#<CODE>``).

``Accept-Payment`` (core draft, "Client Payment Preferences") names the method/intent
pairs a client takes, with weights: the Payment challenges of a 402 are filtered to
those it accepts with q > 0, ordered by its q (server order among equals) and sent
before the L402 and LSAT challenges. A malformed header, or one that accepts none of the
challenges on offer, is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from satsgate.errors import CODES, ApiError, ErrorCode

PROBLEM_BASE = "https://paymentauth.org/problems/"
PROBLEM_JSON = "application/problem+json"

# The core draft's problem types and their titles.
TITLES = {
    "payment-required": "Payment Required",
    "payment-insufficient": "Payment Insufficient",
    "payment-expired": "Payment Expired",
    "verification-failed": "Payment Verification Failed",
    "method-unsupported": "Method Unsupported",
    "malformed-credential": "Malformed Credential",
    "invalid-challenge": "Invalid Challenge",
    "bad-request": "Bad Request",
    "invalid-payload": "Invalid Payload",
    "internal-payment-error": "Internal Payment Error",
}

# satsgate's payment codes whose problem is one of the draft's.
PROBLEM_OF_CODE = {
    ErrorCode.PAYMENT_REQUIRED: "payment-required",
    ErrorCode.PAYMENT_PENDING: "payment-required",
    ErrorCode.PAYMENT_INSUFFICIENT: "payment-insufficient",
    ErrorCode.PAYMENT_EXPIRED: "payment-expired",
    ErrorCode.PAYMENT_INVALID: "verification-failed",
    ErrorCode.PAYMENT_ALREADY_USED: "invalid-challenge",
    ErrorCode.MALFORMED_CREDENTIAL: "malformed-credential",
}


def problem_fields(
    code: ErrorCode, status: int, detail: str, base_url: str, problem: str | None = None
) -> dict[str, Any]:
    """type, title, status, detail for satsgate's ``code`` answered with ``status``;
    ``problem`` names the draft's type (else the code's own, else the catalog entry)."""
    problem = problem or PROBLEM_OF_CODE.get(code)
    if problem is not None:
        return {
            "type": PROBLEM_BASE + problem,
            "title": TITLES[problem],
            "status": status,
            "detail": detail,
        }
    entry = CODES.get(code)
    return {
        "type": f"{base_url}/api/error-codes#{code}",
        "title": entry.meaning if entry is not None else code,
        "status": status,
        "detail": detail,
    }


def without_challenge(body: dict[str, Any], refused: ApiError) -> dict[str, str]:
    """A 402 problem that no challenge could be added to (``refused``: the node's unpaid
    invoices at their cap, or the invoice failing). The problem stands, but nothing in
    it can be paid: its ``detail`` and ``error`` say why, ``suggestion`` says to retry,
    and when the refusal carries a retry hint, ``retry_after_seconds`` (unless the
    problem has its own) says when. Returns the headers to add to the 402:
    ``Retry-After`` with those seconds."""
    why = refused.message[:1].lower() + refused.message[1:]
    for key in ("detail", "error"):
        if key in body:
            body[key] = f"{str(body[key]).rstrip('.')}. There is nothing to pay here: {why}"
    seconds = refused.envelope().get("retry_after_seconds")
    if seconds is None:
        body["suggestion"] = "Retry later: the retry is offered a fresh payment request."
        return {}
    seconds = body.setdefault("retry_after_seconds", seconds)
    body["suggestion"] = f"Retry in {seconds} s: the retry is offered a fresh payment request."
    return {"Retry-After": str(seconds)}


def wants_problem_json(accept: str) -> bool:
    """Whether an Accept header names application/problem+json with q > 0. Its other
    media parameters (charset=...) are allowed (RFC 9110, 12.5.1); an item whose q is
    not a qvalue does not count. Never raises: the header is the client's to get wrong."""
    for item in accept.split(","):
        media, _, params = item.strip().partition(";")
        if media.strip().lower() == PROBLEM_JSON and _accept_q(params) not in (None, 0):
            return True
    return False


def _accept_q(params: str) -> float | None:
    """The q of an Accept item's parameters: 1 when absent, None when not a qvalue."""
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            return float(value) if _QVALUE.match(value) else None
    return 1.0


# -- Accept-Payment ---------------------------------------------------------------------------

_METHOD = re.compile(r"^(?:[a-z]+|\*)$")
_INTENT = re.compile(r"^(?:[A-Za-z0-9-]+|\*)$")
_QVALUE = re.compile(r"^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$")

PaymentRange = tuple[str, str, float]  # method or "*", intent or "*", q


class MalformedAcceptPayment(ValueError):
    pass


def _weight(params: str) -> float | None:
    """The q of ';q=0.5' style parameters (None when absent); raises on a bad qvalue."""
    q: float | None = None
    for param in params.split(";"):
        name, eq, value = param.strip().partition("=")
        if not name:
            continue
        if name.strip().lower() != "q" or not eq:
            raise MalformedAcceptPayment(f"unexpected parameter {param.strip()!r}")
        value = value.strip()
        if not _QVALUE.match(value):
            raise MalformedAcceptPayment(f"bad weight {value!r}")
        q = float(value)
    return q


def parse_accept_payment(value: str) -> list[PaymentRange]:
    """``Accept-Payment = #( method-or-* "/" intent-or-* [ weight ] )``; raises
    MalformedAcceptPayment."""
    ranges: list[PaymentRange] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue  # the # list rule allows empty elements
        token, _, params = item.partition(";")
        method, slash, intent = token.strip().partition("/")
        if not slash or not _METHOD.match(method) or not _INTENT.match(intent):
            raise MalformedAcceptPayment(f"bad payment range {token.strip()!r}")
        q = _weight(params)
        ranges.append((method, intent, 1.0 if q is None else q))
    if not ranges:
        raise MalformedAcceptPayment("no payment range")
    return ranges


def _preference(ranges: Sequence[PaymentRange], method: str, intent: str) -> float | None:
    """The q of the most specific range matching method/intent, or None if none does."""
    best: tuple[int, float] | None = None
    for r_method, r_intent, q in ranges:
        if r_method not in ("*", method) or r_intent not in ("*", intent):
            continue
        specificity = (r_method != "*") * 2 + (r_intent != "*")
        if best is None or specificity > best[0]:
            best = (specificity, q)
    return None if best is None else best[1]


def accepts(accept_payment: str | None, method: str, intent: str) -> bool:
    """Whether ``Accept-Payment`` names ``method``/``intent`` (itself or by a wildcard) with
    q > 0; False without the header or with a malformed one."""
    if not accept_payment:
        return False
    try:
        ranges = parse_accept_payment(accept_payment)
    except MalformedAcceptPayment:
        return False
    q = _preference(ranges, method, intent)
    return q is not None and q > 0


def challenge_method_intent(line: str) -> tuple[str, str] | None:
    """method and intent of a ``WWW-Authenticate: Payment ...`` value, else None."""
    scheme, _, rest = line.partition(" ")
    if scheme.lower() != "payment":
        return None
    params = dict(_PARAM.findall(rest))
    return params.get("method", ""), params.get("intent", "")


_PARAM = re.compile(r'([A-Za-z0-9_-]+)="([^"]*)"')


def select_challenges(lines: Sequence[str], accept_payment: str | None) -> list[str]:
    """The WWW-Authenticate values to send, in the order a client should read them.

    Without ``accept_payment`` (or with one that is malformed or accepts nothing on
    offer): ``lines`` as they are (the challenger's order: L402, LSAT, then the Payment
    challenges). With one: the Payment challenges it accepts first, by its preference
    (server order among equals), then the other schemes' (L402, LSAT); the Payment
    challenges it leaves out are dropped. A client that declared what it pays with is
    answered with that first, since some clients pay only the first challenge they read."""
    if not accept_payment:
        return list(lines)
    try:
        ranges = parse_accept_payment(accept_payment)
    except MalformedAcceptPayment:
        return list(lines)  # the draft: a malformed header MAY be ignored
    others: list[str] = []
    payment: list[tuple[float, int, str]] = []
    for index, line in enumerate(lines):
        pair = challenge_method_intent(line)
        if pair is None:
            others.append(line)
            continue
        q = _preference(ranges, *pair)
        if q is not None and q > 0:
            payment.append((-q, index, line))
    if not payment:
        return list(lines)  # none accepted: the draft lets the server send its normal set
    payment.sort()
    return [line for _, _, line in payment] + others
