"""POST /api/l402/<slug>: the HTTP face of the gate (L402 and MPP challenges)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from satsgate.errors import ApiError, envelope
from satsgate.http_util import dumps, read_json, result_response
from satsgate.payments import l402, mpp
from satsgate.payments.gate import Challenge, Gate, Verified, validate_params
from satsgate.services.base import ServiceResult, ServiceSpec, request_digest


def challenge_response(
    challenge: Challenge,
    base_url: str,
    code: str = "PAYMENT_REQUIRED",
    message: str = "Payment required: pay the invoice and repeat the request with Authorization.",
) -> web.Response:
    body = envelope(code, message) | challenge.body_fields(base_url)
    resp = web.json_response(body, status=402, dumps=dumps)
    for value in challenge.www_authenticate():
        resp.headers.add("WWW-Authenticate", value)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Error-Code"] = code
    return resp


async def _fresh_challenge(
    gate: Gate,
    spec: ServiceSpec[Any],
    params: BaseModel,
    code: str,
    message: str,
    problem: str,
) -> web.Response:
    challenge = await gate.challenge_for(spec, params, via="http")
    resp = challenge_response(challenge, gate.settings.public_base_url, code, message)
    resp.headers["Content-Type"] = "application/json"
    resp.headers["X-Problem-Type"] = mpp.PROBLEM_BASE + problem
    return resp


async def handle_paid_call(
    request: web.Request, gate: Gate, spec: ServiceSpec[Any]
) -> web.Response:
    gate.ensure_available(spec)
    body = await read_json(request, min(spec.max_body_bytes, gate.settings.max_body_bytes))
    params = validate_params(spec, body)
    await gate.prevalidate(spec, params)

    auth = request.headers.getall("Authorization", [])
    if not auth:
        challenge = await gate.challenge_for(spec, params, via="http")
        return challenge_response(challenge, gate.settings.public_base_url)

    try:
        verified = await gate.verify_authorization(auth, spec)
    except l402.MalformedCredential as exc:
        raise ApiError("MALFORMED_CREDENTIAL", f"Malformed credential: {exc}") from None
    except l402.CredentialError as exc:
        code = "PAYMENT_EXPIRED" if "expired" in str(exc) else "PAYMENT_INVALID"
        problem = "payment-expired" if code == "PAYMENT_EXPIRED" else "verification-failed"
        return await _fresh_challenge(
            gate, spec, params, code, f"The credential was not accepted: {exc}.", problem
        )

    key = (verified.payment.payment_hash, request_digest(spec.slug, params))
    use_cache = "X-No-Cache" not in request.headers
    if use_cache:
        earlier = gate.dedup.lookup(key)
        replay = await _replay(earlier, verified) if earlier is not None else None
        if replay is not None:
            return replay
        if earlier is None:
            gate.dedup.begin(key)
        else:
            use_cache = False  # the first attempt never ran; the spend rule decides
    try:
        result = await gate.execute(verified.payment, spec, params)
    except ApiError as exc:
        if exc.code in ("PAYMENT_PENDING", "PAYMENT_EXPIRED"):
            if use_cache:
                gate.dedup.forget(key)
            return await _unpaid_response(gate, spec, params, exc)
        if use_cache:
            # Cache only what followed a spend (it carries a refund); anything else never ran.
            if exc.refund is not None:
                gate.dedup.fail(key, exc)
            else:
                gate.dedup.forget(key)
        raise
    except BaseException:
        if use_cache:
            gate.dedup.forget(key)
        raise
    if use_cache:
        gate.dedup.finish(key, result)
    return _served(result, verified)


async def _unpaid_response(
    gate: Gate, spec: ServiceSpec[Any], params: BaseModel, exc: ApiError
) -> web.Response:
    if exc.code == "PAYMENT_EXPIRED":
        return await _fresh_challenge(gate, spec, params, exc.code, exc.message, "payment-expired")
    # Unpaid: offer the same, still payable invoice again rather than a second one.
    payment = await gate.store.get_payment(str(exc.extra.get("paymentId", "")))
    if payment is None:
        raise exc
    resp = challenge_response(
        gate.challenge_of(payment), gate.settings.public_base_url, exc.code, exc.message
    )
    resp.headers["Retry-After"] = "5"
    return resp


def _served(result: ServiceResult, verified: Verified, dedup_hit: bool = False) -> web.Response:
    resp = result_response(result)
    if verified.scheme == "Payment" and verified.mpp_challenge_id and resp.status < 300:
        resp.headers["Payment-Receipt"] = mpp.receipt_header(
            verified.mpp_challenge_id, verified.payment.payment_hash, int(time.time())
        )
    if dedup_hit:
        resp.headers["X-Dedup"] = "hit"
    return resp


async def _replay(
    earlier: asyncio.Future[ServiceResult], verified: Verified
) -> web.Response | None:
    """The first response again, or None when the first attempt ended without running."""
    try:
        result = await asyncio.shield(earlier)
    except asyncio.CancelledError:
        if earlier.cancelled():
            return None
        raise
    except ApiError as exc:
        exc.headers = {**exc.headers, "X-Dedup": "hit"}
        raise
    return _served(result, verified, dedup_hit=True)
