"""The session intent's HTTP face: a request whose Authorization is a session
credential, answered with the call (and its receipt), the action's result, or a 402
problem with fresh challenges. What moves money is the desk's (payments/sessions.py);
the credential's wire is session_wire.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel

from satsgate.edge.http import dumps, read_json, result_response
from satsgate.errors import ApiError, envelope
from satsgate.payments import problems
from satsgate.payments.challenger import Challenge
from satsgate.payments.session_wire import (
    PROBLEM_TITLES,
    PROBLEMS,
    SessionCredential,
    SessionProblem,
    receipt_header,
    session_payload,
)
from satsgate.payments.sessions import (
    TOKEN_HEADER,
    AnySpec,
    Served,
    Sessions,
    balance_fields,
    check_owner,
    hand_over,
    refund_status_of,
    sats,
    token_members,
)


class CallChallenges(Protocol):
    """What the session intent needs of the calls' own 402 (payments/challenger.py): a
    request's params checked before any invoice, and a fresh charge and L402 challenge
    for a refusal's 402."""

    def validate_params(self, spec: AnySpec, body: Any) -> BaseModel: ...

    async def prevalidate(self, spec: AnySpec, params: BaseModel) -> None: ...

    async def challenge_for(self, spec: AnySpec, params: BaseModel, via: str) -> Challenge: ...


# Bearer credentials remembered as verified (see SessionHttp.__init__); cleared when full.
_MAX_KNOWN_BEARERS = 10_000


class SessionHttp:
    """The session intent over HTTP (payments/http.py hands it every request of the
    Payment scheme first)."""

    def __init__(
        self,
        desk: Sessions,
        challenges: CallChallenges,
        *,
        public_base_url: str,
        max_body_bytes: int,
    ) -> None:
        self._desk = desk
        self._challenges = challenges
        self._public_base_url = public_base_url
        self._max_body_bytes = max_body_bytes
        # Bearer credentials (the Authorization value) verified already, the session token
        # included: session id and challenge id. A secret like the value itself (it holds
        # the token): kept in memory only.
        self._bearers: dict[str, tuple[str, str]] = {}

    async def http_call(
        self,
        request: web.Request,
        spec: AnySpec,
        transform: Callable[[Any], Any] | None,
    ) -> web.StreamResponse | None:
        """Answer a request whose Authorization is a session credential; None for any
        other request (the charge intent and L402 answer those). A refused credential
        is answered with a 402 that carries fresh challenges for the same call."""
        auth = request.headers.getall("Authorization", [])
        if len(auth) != 1:
            return None
        known = self._bearers.get(auth[0])
        if known is not None:  # this very bearer credential verified before
            return await self._repeat_bearer(request, spec, transform, *known)
        scheme, _, rest = auth[0].strip().partition(" ")
        doc = session_payload(rest) if scheme.lower() == "payment" else None
        if doc is None:
            return None
        params: BaseModel | None = None
        try:
            cred = self._desk.parse(doc)
            if cred.action == "topUp":
                return await self._top_up(cred)
            if cred.action == "close":
                return await self._close(cred)
            params = await self._params(request, spec, transform)
            if cred.action == "open":
                return await self._open(request, spec, params, cred)
            return await self._bearer(request, spec, params, cred, auth[0])
        except SessionProblem as problem:
            if params is None:
                params = await self._params_or_none(request, spec, transform)
            return await self._problem_response(spec, params, problem)

    async def _repeat_bearer(
        self,
        request: web.Request,
        spec: AnySpec,
        transform: Callable[[Any], Any] | None,
        session_id: str,
        challenge_id: str,
    ) -> web.StreamResponse:
        """A bearer credential verified before: the session's debit and the call."""
        params = await self._params(request, spec, transform)
        try:
            if spec.streams(params):
                return await self._desk.stream(request, session_id, spec, params, challenge_id)
            served = await self._desk.debit_and_run(session_id, spec, params)
        except SessionProblem as problem:
            return await self._problem_response(spec, params, problem)
        return self._served_response(served, challenge_id)

    async def _open(
        self, request: web.Request, spec: AnySpec, params: BaseModel, cred: SessionCredential
    ) -> web.StreamResponse:
        """Open the session on its paid deposit and serve this first call from it; the
        answer hands over the session token (on a streamed call's failure too)."""
        if not spec.streams(params):
            served = await self._desk.open(cred, spec, params)
            token = self._desk.token_for(served.session_id, cred.challenge_id)
            return self._served_response(served, cred.challenge_id, token)
        deposit_hash, return_invoice = self._desk.open_checks(cred)
        opened = await self._desk.open_session(deposit_hash, cred.challenge_id, return_invoice)
        token = self._desk.token_for(opened.session_id, cred.challenge_id)
        try:
            return await self._desk.stream(
                request, opened.session_id, spec, params, cred.challenge_id, token
            )
        except (ApiError, SessionProblem) as exc:
            hand_over(exc, token)
            raise

    async def _bearer(
        self,
        request: web.Request,
        spec: AnySpec,
        params: BaseModel,
        cred: SessionCredential,
        authorization: str,
    ) -> web.StreamResponse:
        """A call on an open session, its payer proven by preimage and session token."""
        session_id = await self._owned_session(cred)
        if spec.streams(params):
            return await self._desk.stream(request, session_id, spec, params, cred.challenge_id)
        served = await self._desk.debit_and_run(session_id, spec, params)
        # Verified: its repeats (the same header value) skip the decode, the challenge's
        # HMAC, the preimage's hash and the token's check (the value holds the token).
        # Bounded; cleared when full.
        if len(self._bearers) >= _MAX_KNOWN_BEARERS:
            self._bearers.clear()
        self._bearers[authorization] = (session_id, cred.challenge_id)
        return self._served_response(served, cred.challenge_id)

    async def _top_up(self, cred: SessionCredential) -> web.StreamResponse:
        session = await self._desk.top_up(cred)
        return self._action_response(
            {"status": "ok", "sessionId": session.session_id, **balance_fields(session)},
            session.session_id,
            cred,
            balanceSats=sats(session.balance_msat),
        )

    async def _close(self, cred: SessionCredential) -> web.StreamResponse:
        """Close the session; its unused balance goes back to the return invoice."""
        session_id = await self._owned_session(cred)
        closed = await self._desk.close(session_id)
        refund_status = refund_status_of(closed)
        # Undecided (calls of other instances still under way): the balance now, which
        # their failures can only raise.
        refund_msat = closed.balance_msat if closed.refund_msat is None else closed.refund_msat
        refund_sats = sats(refund_msat)
        return self._action_response(
            {
                "status": "closed",
                "sessionId": session_id,
                "refundSats": refund_sats,
                "refundStatus": refund_status,
                "closeReason": closed.close_reason,
            },
            session_id,
            cred,
            refundSats=refund_sats,
            refundStatus=refund_status,
        )

    async def _owned_session(self, cred: SessionCredential) -> str:
        """The credential's session id, once its preimage and session token prove the
        payer (the preimage alone is known to every routing node). Raises
        SessionProblem."""
        session_id = cred.text("sessionId").lower()
        check_owner(session_id, cred.hex32("preimage"))
        await self._desk.check_bound(session_id, cred.token())
        return session_id

    async def _params(
        self,
        request: web.Request,
        spec: AnySpec,
        transform: Callable[[Any], Any] | None,
    ) -> BaseModel:
        limit = min(spec.max_body_bytes, self._max_body_bytes)
        body = await read_json(request, limit)
        if transform is not None:
            body = transform(body)
        params = self._challenges.validate_params(spec, body)
        await self._challenges.prevalidate(spec, params)
        return params

    async def _params_or_none(
        self,
        request: web.Request,
        spec: AnySpec,
        transform: Callable[[Any], Any] | None,
    ) -> BaseModel | None:
        try:
            return await self._params(request, spec, transform)
        except ApiError:
            return None

    def _served_response(
        self, served: Served, challenge_id: str, token: str | None = None
    ) -> web.StreamResponse:
        """A served call's answer with its receipt; an open's (``token``) carries the
        session token too, and is stored by no cache."""
        resp = result_response(served.result)
        if resp.status < 300:
            resp.headers["Payment-Receipt"] = receipt_header(
                served.session_id,
                int(time.time()),
                challengeId=challenge_id,
                balanceSats=sats(served.balance_msat),
                balanceMsat=served.balance_msat,
                chargedMsat=served.charged_msat,
                **token_members(token),
            )
            resp.headers["Cache-Control"] = "private"
            if token is not None:
                resp.headers[TOKEN_HEADER] = token
                resp.headers["Cache-Control"] = "private, no-store"
        return resp

    def _action_response(
        self, body: dict[str, Any], session_id: str, cred: SessionCredential, **receipt: Any
    ) -> web.StreamResponse:
        resp = web.json_response(body, dumps=dumps)
        resp.headers["Payment-Receipt"] = receipt_header(
            session_id, int(time.time()), challengeId=cred.challenge_id, **receipt
        )
        resp.headers["Cache-Control"] = "private"
        return resp

    async def _problem_response(
        self, spec: AnySpec, params: BaseModel | None, problem: SessionProblem
    ) -> web.StreamResponse:
        """402, fresh challenges (L402, charge and a session deposit: the top-up's), and an
        RFC 9457 body with satsgate's envelope fields as extension members. With no
        challenge made (the node's unpaid invoices at their cap), the 402 says so and
        when to retry (problems.without_challenge)."""
        if problem.problem in PROBLEM_TITLES:
            body: dict[str, Any] = {
                "type": PROBLEMS + problem.problem,
                "title": PROBLEM_TITLES[problem.problem],
                "status": 402,
                "detail": problem.detail,
            }
        else:  # satsgate's own (the binding): its error-catalog entry
            base_url = self._public_base_url
            body = problems.problem_fields(problem.code, 402, problem.detail, base_url)
        body |= envelope(problem.code, problem.detail) | problem.extra
        headers: list[str] = []
        retry: dict[str, str] = {}
        if params is not None:
            refused: ApiError | None = None
            try:
                charge = await self._challenges.challenge_for(spec, params, via="http")
            except ApiError as exc:  # the node's unpaid invoices at their cap, or no invoice
                refused = exc
            else:
                body |= charge.body_fields(self._public_base_url)
                headers += charge.www_authenticate()
            session = await self._desk.offered_for(spec, params)
            if session is not None:
                headers.append(session.header())
                body["session"] = session.fields
            if refused is not None and not headers:
                retry = problems.without_challenge(body, refused)
        resp = web.json_response(body, status=402, dumps=dumps)
        resp.headers.update(retry)
        resp.content_type = "application/problem+json"
        for value in headers:
            resp.headers.add("WWW-Authenticate", value)
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["X-Error-Code"] = problem.code
        token = problem.token or problem.extra.get("sessionToken")
        if token:
            resp.headers[TOKEN_HEADER] = token
        return resp
