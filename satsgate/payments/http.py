"""POST /api/l402/<slug>: the HTTP face of the gate (L402 and MPP challenges)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from satsgate.edge.http import dumps, read_json, result_response
from satsgate.errors import ApiError, ErrorCode, envelope
from satsgate.payments import l402, mpp, problems, rework, streaming
from satsgate.payments.cashu import CASHU_HEADER
from satsgate.payments.challenger import Challenge
from satsgate.payments.gate import Gate
from satsgate.payments.verifier import Verified
from satsgate.services.base import ServiceResult, ServiceSpec


def challenge_response(
    challenge: Challenge,
    base_url: str,
    code: ErrorCode = ErrorCode.PAYMENT_REQUIRED,
    message: str = "Payment required: pay the invoice and repeat the request with Authorization.",
    *,
    request: web.Request | None = None,
    problem: str | None = None,
    problem_json: bool = False,
    extra_challenges: Sequence[str] = (),
    cashu_request: str | None = None,
) -> web.Response:
    """The 402: the envelope with the challenge's fields and the RFC 9457 members, the
    WWW-Authenticate lines that ``Accept-Payment`` (if any) accepts. ``problem_json``
    (a request with a Payment credential, or one that accepts it) makes the body
    application/problem+json. ``extra_challenges``: more WWW-Authenticate lines (the
    session intent's, payments/sessions.py). ``cashu_request``: the NUT-18 request for
    ``X-Cashu`` (NUT-24), when ecash is accepted."""
    body = problems.problem_fields(code, 402, message, base_url, problem)
    body |= envelope(code, message) | challenge.body_fields(base_url)
    return _with_challenge(
        body, challenge, request, code, problem_json, extra_challenges, cashu_request
    )


def _with_challenge(
    body: dict[str, Any],
    challenge: Challenge | None,
    request: web.Request | None,
    code: ErrorCode,
    problem_json: bool,
    extra_challenges: Sequence[str] = (),
    cashu_request: str | None = None,
) -> web.Response:
    if request is not None and not problem_json:
        problem_json = problems.wants_problem_json(request.headers.get("Accept", ""))
    content_type = problems.PROBLEM_JSON if problem_json else "application/json"
    resp = web.json_response(body, status=402, dumps=dumps, content_type=content_type)
    accept_payment = request.headers.get("Accept-Payment") if request is not None else None
    lines = [*(challenge.www_authenticate() if challenge is not None else ()), *extra_challenges]
    for value in problems.select_challenges(lines, accept_payment):
        resp.headers.add("WWW-Authenticate", value)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Error-Code"] = code
    resp.headers["X-Problem-Type"] = body["type"]
    if cashu_request is not None:  # NUT-24: ecash is accepted too
        resp.headers[CASHU_HEADER] = cashu_request
    return resp


def _cashu_request(gate: Gate, challenge: Challenge) -> str | None:
    return None if gate.cashu is None else gate.cashu.payment_request(challenge.amount_sats)


async def _fresh_challenge(
    request: web.Request,
    gate: Gate,
    spec: ServiceSpec[Any],
    params: BaseModel,
    code: ErrorCode,
    message: str,
    problem: str,
    *,
    problem_json: bool,
    exc: ApiError | None = None,
) -> web.Response:
    """A 402 with a new invoice after a credential (of any scheme) was refused; ``exc``'s
    envelope (refund, headers) is kept when given. With no invoice made (this address past its
    challenge limit, or the node's unpaid invoices at their cap), the same 402 without a
    challenge, saying when to retry (problems.without_challenge): never a 429 hiding why
    the credential was refused or ``exc``'s refund."""
    base_url = gate.public_base_url
    body = problems.problem_fields(code, 402, message, base_url, problem)
    body |= envelope(code, message) if exc is None else exc.envelope()
    challenge: Challenge | None = None
    sessions: list[str] = []
    retry: dict[str, str] = {}
    try:
        challenge = await gate.challenge_for(spec, params, via="http")
    except ApiError as refused:
        retry = problems.without_challenge(body, refused)
    else:
        body |= challenge.body_fields(base_url)
        if code == ErrorCode.PAYMENT_ALREADY_USED:  # the catalog's "create a new payment"
            body["suggestion"] = "Pay the fresh invoice offered in this response."
        sessions = await _session_lines(request, gate, spec, params)
    cashu = None if challenge is None else _cashu_request(gate, challenge)
    resp = _with_challenge(body, challenge, request, code, problem_json, sessions, cashu)
    resp.headers.update(exc.headers if exc is not None else {})
    resp.headers.update(retry)
    return resp


def _is_payment_scheme(values: list[str]) -> bool:
    if len(values) == 1:  # the usual case (every paid call): no generator
        return values[0].lstrip()[:8].lower() == "payment "
    return any(v.lstrip()[:8].lower() == "payment " for v in values)


def problem_response(exc: ApiError, base_url: str) -> web.Response:
    """An error as application/problem+json with the envelope as extension members."""
    body = problems.problem_fields(exc.code, exc.http_status, exc.message, base_url)
    body |= exc.envelope()
    resp = web.json_response(
        body, status=exc.http_status, dumps=dumps, content_type=problems.PROBLEM_JSON
    )
    resp.headers["X-Error-Code"] = exc.code
    resp.headers["X-Problem-Type"] = body["type"]
    for name, value in exc.headers.items():
        resp.headers[name] = value
    return resp


async def _session_lines(
    request: web.Request, gate: Gate, spec: ServiceSpec[Any], params: BaseModel
) -> list[str]:
    """The session intent's challenge for this 402 (a fresh deposit invoice), when
    ``Accept-Payment`` asks for it (payments/sessions.py)."""
    if gate.sessions is None:
        return []
    return await gate.sessions.offer_lines(spec, params, request.headers.get("Accept-Payment"))


BodyTransform = Callable[[Any], Any]


async def handle_paid_call(
    request: web.Request,
    gate: Gate,
    spec: ServiceSpec[Any],
    transform: BodyTransform | None = None,
) -> web.StreamResponse:
    """The whole HTTP flow for one paid call; ``transform`` adjusts the parsed body first.

    Every refusal of a credential (L402, LSAT or Payment: malformed, forged, unpaid,
    expired, used, another service's) is a 402 with a fresh challenge, its error_code in
    the body and ``X-Error-Code``; only more than one credential at once is a 400. A
    request carrying a Payment credential is answered as the core draft says: the
    draft's problem type, and every error as application/problem+json."""
    auth = request.headers.getall("Authorization", [])
    if not _is_payment_scheme(auth):
        return await _paid_call(request, gate, spec, transform, auth, payment_scheme=False)
    try:
        return await _paid_call(request, gate, spec, transform, auth, payment_scheme=True)
    except ApiError as exc:
        return problem_response(exc, gate.public_base_url)


class _Refused(Exception):
    """A credential answered with a fresh challenge (of the scheme it came in): its
    code, the message, the problem type and, when kept, the error's envelope."""

    def __init__(
        self, code: ErrorCode, message: str, problem: str, exc: ApiError | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.problem, self.exc = code, message, problem, exc


async def _paid_call(
    request: web.Request,
    gate: Gate,
    spec: ServiceSpec[Any],
    transform: BodyTransform | None,
    auth: list[str],
    *,
    payment_scheme: bool,
) -> web.StreamResponse:
    """One paid call's steps: a session's bearer call, else the params checked before
    any invoice; then, with no credential, the ecash payment or the 402; with one, the
    credential verified and spent on the call, or refused with a fresh 402."""
    gate.ensure_available(spec)
    if payment_scheme and gate.session_http is not None:
        # A session credential (payments/sessions.py) is always of the Payment scheme:
        # an L402 call or an unpaid request never needs the session intent's look-up.
        answered = await gate.session_http.http_call(request, spec, transform)
        if answered is not None:
            return answered
    body = await read_json(request, min(spec.max_body_bytes, gate.max_body_bytes))
    if transform is not None:
        body = transform(body)
    body, rework_token = rework.take_token(body)  # a free retry's token: not a param
    params = gate.validate_params(spec, body)
    await gate.prevalidate(spec, params)
    # A streamed answer runs the stream handler under the same spend rule; it is never
    # kept for the dedup window (a stream cannot be sent twice).
    streamed = spec.streams(params)
    run_spec = spec.streamed() if streamed else spec
    if not auth:
        if gate.cashu is not None and CASHU_HEADER in request.headers:
            return await _paid_in_ecash(request, gate, spec, run_spec, params)
        return await _challenge(request, gate, spec, params)
    try:
        verified = await _verified(gate, auth, spec)
        result, replayed = await _spent(
            gate,
            verified,
            run_spec,
            params,
            use_cache=not streamed and "X-No-Cache" not in request.headers,
            rework_token=rework_token,
            payment_scheme=payment_scheme,
        )
    except _Refused as refused:
        return await _fresh_challenge(
            request,
            gate,
            spec,
            params,
            refused.code,
            refused.message,
            refused.problem,
            problem_json=payment_scheme,
            exc=refused.exc,
        )
    except ApiError as exc:
        if exc.code in (ErrorCode.PAYMENT_PENDING, ErrorCode.PAYMENT_EXPIRED):
            return await _unpaid_response(request, gate, spec, params, exc, payment_scheme)
        raise
    if result.stream is not None:
        return await _relay(request, result, verified)
    return _served(result, verified, dedup_hit=replayed)


async def _paid_in_ecash(
    request: web.Request,
    gate: Gate,
    spec: ServiceSpec[Any],
    run_spec: ServiceSpec[Any],
    params: BaseModel,
) -> web.StreamResponse:
    """Paid in ecash (NUT-24): redeemed at the mint, then the spend rule as for any
    payment."""
    assert gate.cashu is not None
    result = await gate.cashu.pay(
        request.headers.getall(CASHU_HEADER),
        spec,
        params,
        gate.quote_sats(spec, params),
        lambda payment: gate.execute(payment, run_spec, params),
    )
    if result.stream is not None:
        return await _relay(request, result, None)
    return result_response(result)


async def _challenge(
    request: web.Request, gate: Gate, spec: ServiceSpec[Any], params: BaseModel
) -> web.Response:
    """The 402 of a call that came with no credential."""
    challenge = await gate.challenge_for(spec, params, via="http")
    return challenge_response(
        challenge,
        gate.public_base_url,
        request=request,
        extra_challenges=await _session_lines(request, gate, spec, params),
        cashu_request=_cashu_request(gate, challenge),
    )


async def _verified(gate: Gate, auth: list[str], spec: ServiceSpec[Any]) -> Verified:
    """The credential checked against its challenge; raises _Refused (or, for a
    malformed one among several credentials, a 400 ApiError: the draft's rule)."""
    try:
        return await gate.verify_authorization(auth, spec)
    except l402.MalformedCredential as exc:
        message = f"Malformed credential: {exc}"
        if len(auth) > 1:
            raise ApiError(exc.code, message) from None
        raise _Refused(exc.code, message, exc.problem) from None
    except l402.CredentialError as exc:
        raise _Refused(exc.code, f"The credential was not accepted: {exc}.", exc.problem) from None


async def _spent(
    gate: Gate,
    verified: Verified,
    run_spec: ServiceSpec[Any],
    params: BaseModel,
    *,
    use_cache: bool,
    rework_token: str | None,
    payment_scheme: bool,
) -> tuple[ServiceResult, bool]:
    """The call run on the verified credential under the spend rule: (result, whether
    it is the dedup window's replay). A credential that cannot pay for it raises
    _Refused; an unpaid one the ApiError the caller answers with its invoice."""
    try:
        return await gate.execute_credential(
            verified, run_spec, params, use_cache=use_cache, rework_token=rework_token
        )
    except l402.CredentialError as exc:  # its row is gone (revoked or pruned)
        problem = "invalid-challenge" if payment_scheme else "verification-failed"
        raise _Refused(
            ErrorCode.PAYMENT_INVALID, f"The credential was not accepted: {exc}.", problem
        ) from None
    except ApiError as exc:
        if exc.code in (ErrorCode.PAYMENT_ALREADY_USED, ErrorCode.PAYMENT_INSUFFICIENT):
            # A used credential, of either scheme, is answered with a fresh challenge: the
            # Payment draft (invalid-challenge) and bLIP-26's L402 clients, which keep a
            # token per URL and pay again only on a 402 (docs/spec-notes.md: not the
            # service spec's 403).
            raise _Refused(exc.code, exc.message, problems.PROBLEM_OF_CODE[exc.code], exc) from None
        raise


async def _unpaid_response(
    request: web.Request,
    gate: Gate,
    spec: ServiceSpec[Any],
    params: BaseModel,
    exc: ApiError,
    payment_scheme: bool,
) -> web.Response:
    if exc.code == ErrorCode.PAYMENT_EXPIRED:
        return await _fresh_challenge(
            request,
            gate,
            spec,
            params,
            exc.code,
            exc.message,
            "payment-expired",
            problem_json=payment_scheme,
        )
    # Unpaid: offer the same, still payable invoice again rather than a second one.
    payment = await gate.get_payment(str(exc.extra.get("paymentId", "")))
    if payment is None:
        raise exc
    challenge = gate.challenge_of(payment)
    resp = challenge_response(
        challenge,
        gate.public_base_url,
        exc.code,
        exc.message,
        request=request,
        problem_json=payment_scheme,
        cashu_request=_cashu_request(gate, challenge),
    )
    resp.headers["Retry-After"] = "5"
    return resp


async def _relay(
    request: web.Request, result: ServiceResult, verified: Verified | None
) -> web.StreamResponse:
    """A streamed answer paid one by one, as server-sent events (payments/streaming.py)."""
    assert result.stream is not None and result.stream.settle is not None
    headers = dict(result.headers)
    if verified is not None and verified.scheme == "Payment" and verified.mpp_challenge_id:
        headers["Payment-Receipt"] = mpp.receipt_header(
            verified.mpp_challenge_id, verified.payment_hash, int(time.time())
        )
    return await streaming.relay(request, result.stream, result.stream.settle, headers)


def _served(result: ServiceResult, verified: Verified, dedup_hit: bool = False) -> web.Response:
    resp = result_response(result)
    if verified.scheme == "Payment" and verified.mpp_challenge_id and resp.status < 300:
        resp.headers["Payment-Receipt"] = mpp.receipt_header(
            verified.mpp_challenge_id, verified.payment_hash, int(time.time())
        )
        # The core draft: a response carrying a receipt is never stored by a shared cache.
        resp.headers["Cache-Control"] = "private"
    if dedup_hit:
        resp.headers["X-Dedup"] = "hit"
    return resp
