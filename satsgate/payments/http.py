"""POST /api/l402/<slug>: the HTTP face of the gate (L402 and MPP challenges)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from satsgate.errors import ApiError, envelope
from satsgate.http_edge import dumps, read_json, result_response
from satsgate.payments import l402, mpp
from satsgate.payments.cashu import CASHU_HEADER
from satsgate.payments.challenger import Challenge, validate_params
from satsgate.payments.gate import Gate
from satsgate.payments.verifier import Verified
from satsgate.ratelimit import check_challenge
from satsgate.services.base import ServiceResult, ServiceSpec


def challenge_response(
    challenge: Challenge,
    base_url: str,
    code: str = "PAYMENT_REQUIRED",
    message: str = "Payment required: pay the invoice and repeat the request with Authorization.",
    cashu_request: str | None = None,
) -> web.Response:
    body = envelope(code, message) | challenge.body_fields(base_url)
    resp = web.json_response(body, status=402, dumps=dumps)
    for value in challenge.www_authenticate():
        resp.headers.add("WWW-Authenticate", value)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Error-Code"] = code
    if cashu_request is not None:  # NUT-24: ecash is accepted too
        resp.headers[CASHU_HEADER] = cashu_request
    return resp


def _cashu_request(gate: Gate, challenge: Challenge) -> str | None:
    return None if gate.cashu is None else gate.cashu.payment_request(challenge.amount_sats)


async def _fresh_challenge(
    gate: Gate,
    spec: ServiceSpec[Any],
    params: BaseModel,
    code: str,
    message: str,
    problem: str,
) -> web.Response:
    challenge = await gate.challenge_for(spec, params, via="http")
    resp = challenge_response(
        challenge, gate.public_base_url, code, message, _cashu_request(gate, challenge)
    )
    resp.headers["Content-Type"] = "application/json"
    resp.headers["X-Problem-Type"] = mpp.PROBLEM_BASE + problem
    return resp


BodyTransform = Callable[[Any], Any]


async def handle_paid_call(
    request: web.Request,
    gate: Gate,
    spec: ServiceSpec[Any],
    transform: BodyTransform | None = None,
) -> web.Response:
    """The whole HTTP flow for one paid call; ``transform`` adjusts the parsed body first."""
    gate.ensure_available(spec)
    body = await read_json(request, min(spec.max_body_bytes, gate.max_body_bytes))
    if transform is not None:
        body = transform(body)
    params = validate_params(spec, body)
    await gate.prevalidate(spec, params)

    auth = request.headers.getall("Authorization", [])
    if not auth and gate.cashu is not None and CASHU_HEADER in request.headers:
        # Paid in ecash (NUT-24): redeemed at the mint, then the spend rule as for any payment.
        result = await gate.cashu.pay(
            request.headers.getall(CASHU_HEADER),
            spec,
            params,
            lambda payment: gate.execute(payment, spec, params),
        )
        return result_response(result)
    if not auth:
        challenge = await gate.challenge_for(spec, params, via="http")
        return challenge_response(
            challenge, gate.public_base_url, cashu_request=_cashu_request(gate, challenge)
        )

    try:
        verified = await gate.verify_authorization(auth, spec)
    except l402.MalformedCredential as exc:
        raise ApiError("MALFORMED_CREDENTIAL", f"Malformed credential: {exc}") from None
    except l402.CredentialError as exc:
        check_challenge(request)  # a fresh invoice follows: limited like any challenge
        code = exc.code
        problem = "payment-expired" if code == "PAYMENT_EXPIRED" else "verification-failed"
        return await _fresh_challenge(
            gate, spec, params, code, f"The credential was not accepted: {exc}.", problem
        )

    try:
        result, replayed = await gate.execute_credential(
            verified, spec, params, use_cache="X-No-Cache" not in request.headers
        )
    except l402.CredentialError as exc:  # its row is gone (revoked or pruned)
        check_challenge(request)
        return await _fresh_challenge(
            gate,
            spec,
            params,
            "PAYMENT_INVALID",
            f"The credential was not accepted: {exc}.",
            "verification-failed",
        )
    except ApiError as exc:
        if exc.code in ("PAYMENT_PENDING", "PAYMENT_EXPIRED"):
            if exc.code == "PAYMENT_EXPIRED":
                check_challenge(request)
            return await _unpaid_response(gate, spec, params, exc)
        raise
    return _served(result, verified, dedup_hit=replayed)


async def _unpaid_response(
    gate: Gate, spec: ServiceSpec[Any], params: BaseModel, exc: ApiError
) -> web.Response:
    if exc.code == "PAYMENT_EXPIRED":
        return await _fresh_challenge(gate, spec, params, exc.code, exc.message, "payment-expired")
    # Unpaid: offer the same, still payable invoice again rather than a second one.
    payment = await gate.get_payment(str(exc.extra.get("paymentId", "")))
    if payment is None:
        raise exc
    challenge = gate.challenge_of(payment)
    resp = challenge_response(
        challenge, gate.public_base_url, exc.code, exc.message, _cashu_request(gate, challenge)
    )
    resp.headers["Retry-After"] = "5"
    return resp


def _served(result: ServiceResult, verified: Verified, dedup_hit: bool = False) -> web.Response:
    resp = result_response(result)
    if verified.scheme == "Payment" and verified.mpp_challenge_id and resp.status < 300:
        resp.headers["Payment-Receipt"] = mpp.receipt_header(
            verified.mpp_challenge_id, verified.payment_hash, int(time.time())
        )
    if dedup_hit:
        resp.headers["X-Dedup"] = "hit"
    return resp
