"""Payment sessions: the "session" intent of the Payment scheme, lightning method
(draft-lightning-session-00).

A 402 of a paid endpoint whose request asks for the session intent (``Accept-Payment:
lightning/session``, or a wildcard over it) offers, beside L402 and the charge intent, a
session challenge: ``amount`` (the price of this call, in sats), ``currency`` "sat",
``unitType`` "request", a fresh ``depositInvoice`` for ``depositAmount`` (the price
times ``session_deposit_multiplier``, at most ``session_max_deposit_sat``, never below
the one call), its ``paymentHash`` and ``idleTimeout``. The deposit is a row of
``payments`` (mode 'deposit'), settled like any invoice.

Credentials (``Authorization: Payment <b64url JCS JSON>``), ``payload.action``:

- ``open`` (``preimage``, amountless ``returnInvoice``): consumes the paid deposit
  into a new session (id: the deposit's payment hash), binds it to a session token and
  serves the request as a bearer call; the token is in this answer only
  (``Payment-Session-Token`` and the receipt's ``sessionToken``);
- ``bearer`` (``sessionId``, ``preimage``, ``token``): serves the request, debiting its
  quoted price from the balance in one conditional UPDATE (store/sessions.py); too
  little left is a fresh 402 (insufficient-balance) whose session challenge is the
  top-up's;
- ``topUp`` (also ``topup``; ``sessionId``, ``topUpPreimage``, ``token``): consumes a
  paid deposit into the session's balance; answers ``{"status": "ok"}`` and serves
  nothing;
- ``close`` (``sessionId``, ``preimage``, ``token``): closes the session and pays the
  balance left to the return invoice (the node's own payment, under the refunds' fee
  cap); a second close answers the same result.

The binding (a departure from the draft, whose bearer proof is the deposit preimage
alone: every node on the deposit's route learns that preimage). The token is
HMAC-SHA256, under a key derived from the server secret, of the session id and the id
of the challenge the session was opened with: only the payer holds that challenge (it
came in a 402 over HTTPS), so only the payer's open is answered with it, and a replay
of that same open credential gets the same token back, never a second one. The store
keeps its sha256; each action compares in constant time. A credential without it, or
with another, is refused (``SESSION_BINDING_REQUIRED``) before anything is debited,
credited, consumed or closed.

One balance serves every paid service. A call that fails after its debit is credited
back at once; a metered call (``ServiceResult.metered_msat``: text billed by tokens)
is debited its quote first and credited what it did not use. Every success carries a
``Payment-Receipt`` with the balance left. Failures answer 402 with fresh challenges and
an RFC 9457 body typed ``https://paymentauth.org/problems/lightning/...``.

An idle session (no debit or top-up for ``session_idle_timeout_s``) is closed by the
sweep, which also retries failed payouts and resolves payouts whose outcome was unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from aiohttp import web
from pydantic import BaseModel

from satsgate.engines import EngineError
from satsgate.errors import ApiError, ErrorCode, envelope
from satsgate.http_edge import dumps, read_json, result_response
from satsgate.invoices import InvalidInvoice, decode_invoice
from satsgate.lightning import BackendError, CreatedInvoice, PaymentResult, PaymentState
from satsgate.payments import mpp, problems, streaming
from satsgate.payments.challenger import Challenge
from satsgate.payments.dedup import DedupCache
from satsgate.payments.hmac_sha256 import HmacKey, hmac_sha256
from satsgate.payments.session_wire import (
    BINDING_PROBLEM,
    HEX_DIGITS,
    PROBLEM_TITLES,
    PROBLEMS,
    SessionChallenge,
    SessionCredential,
    SessionProblem,
    challenge_id,
    parse_credential,
    receipt_header,
    session_payload,
    session_token,
    token_sha256,
)
from satsgate.payout_fees import PayoutFees
from satsgate.ratelimit import ChallengeBudget, admit_challenge
from satsgate.services.base import ServiceContext, ServiceResult, ServiceSpec, StreamPiece
from satsgate.services.catalog.rates import Rates
from satsgate.store import Payment, PaymentStatus
from satsgate.store.sessions import ReturnInvoiceTaken, Session, SessionRepository

log = logging.getLogger("satsgate.sessions")

AnySpec = ServiceSpec[Any]
SESSION_SERVICE = "session"  # the service name of a deposit's payments row
MCP_PREFIX = "sess_"  # an MCP paymentId that names a session: sess_<sessionId>.<token>
TOKEN_HEADER = "Payment-Session-Token"  # the open's answer: the session token
# A payout whose return invoice has expired is not tried again (the operator sees it).
_NEVER = 2**62
_MAX_KNOWN_BEARERS = 10_000


class ReturnInvoice(NamedTuple):
    """An open's checked return invoice: its text and its payment hash."""

    bolt11: str
    payment_hash: str


def _sats(msat: int) -> int:
    return msat // 1000


# -- the collaborators it uses -------------------------------------------------------------


class InvoiceNode(Protocol):
    """The node: deposit invoices, and the payouts on close."""

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> CreatedInvoice: ...

    async def pay_invoice(
        self, bolt11: str, max_fee_msat: int, timeout_s: int, amount_msat: int | None = None
    ) -> PaymentResult: ...

    async def lookup_payment(self, payment_hash: str) -> PaymentResult: ...


class DepositPayments(Protocol):
    async def insert(self, payment: Payment) -> None: ...

    async def get_by_hash(self, payment_hash: str) -> Payment | None: ...


class PaidRefresher(Protocol):
    async def refresh_paid(self, payment: Payment) -> Payment: ...


class CallChallenges(Protocol):
    """What the session intent needs of the calls' own 402 (payments/challenger.py): a
    request's params checked before any invoice, and a fresh charge and L402 challenge
    for a refusal's 402."""

    def validate_params(self, spec: AnySpec, body: Any) -> BaseModel: ...

    async def prevalidate(self, spec: AnySpec, params: BaseModel) -> None: ...

    async def challenge_for(self, spec: AnySpec, params: BaseModel, via: str) -> Challenge: ...


class Contexts(Protocol):
    """Makes a call's context; ``rates`` is the app's BTC rate book (quotes read it)."""

    @property
    def rates(self) -> Rates: ...

    def for_call(self, call_id: str, *, service: str | None = None) -> ServiceContext: ...


@dataclass(frozen=True)
class SessionConfig:
    secret: str
    realm: str
    network: str
    invoice_expiry_s: int
    deposit_multiplier: int
    max_deposit_sat: int
    idle_timeout_s: int
    pay_timeout_s: int
    fees: PayoutFees  # the routing fees a payout may spend (shared with refunds)
    public_base_url: str
    max_body_bytes: int


@dataclass
class Served:
    """A served session call: the result, what it cost and the balance left."""

    result: ServiceResult
    session_id: str
    charged_msat: int
    balance_msat: int


@dataclass
class _InFlight:
    count: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class _SessionStream:
    """How a streamed session call's reservation ends (streaming.StreamSettle): trued up
    by use, credited back on a failure (once), kept when the caller leaves."""

    def __init__(self, desk: Sessions, session_id: str, price_msat: int, balance: int) -> None:
        self._desk = desk
        self._session_id = session_id
        self._price_msat = price_msat
        self._balance = balance
        self._ended = False

    async def failed(self, code: ErrorCode, message: str) -> dict[str, Any]:
        if self._ended:
            return {}
        self._ended = True
        credit = await self._desk._credit(self._session_id, self._price_msat, message)
        return _credit_said(message, credit)

    async def finished(self, last: StreamPiece) -> dict[str, Any]:
        self._ended = True
        earned, balance = await self._desk._true_up(
            self._session_id, self._price_msat, last.metered_msat, self._balance
        )
        return {
            "method": mpp.METHOD,
            "reference": self._session_id,
            "spent": earned / 1000,
            "spentMsat": earned,
            "balanceMsat": balance,
            "balanceSats": _sats(balance),
        }

    def abandoned(self) -> None:
        if not self._ended:
            self._ended = True
            self._desk._sessions.answered(self._session_id, self._price_msat)


class Sessions:
    """The session intent: challenges, the four actions, the balance and the payouts."""

    def __init__(
        self,
        *,
        config: SessionConfig,
        node: InvoiceNode,
        payments: DepositPayments,
        sessions: SessionRepository,
        settlements: PaidRefresher,
        contexts: Contexts,
        challenges: CallChallenges,
        budget: ChallengeBudget | None = None,
    ) -> None:
        self._config = config
        self._challenges = challenges
        # The node's bound on unpaid invoices, shared with the challenger: a deposit
        # invoice takes a slot like the call's challenge it is offered with.
        self._budget = budget
        self._key = HmacKey(config.secret.encode())
        # Its own key, so that no token is ever a valid challenge id or the reverse.
        self._token_key = HmacKey(hmac_sha256(config.secret.encode(), b"session token"))
        self._node = node
        self._payments = payments
        self._sessions = sessions
        self._settlements = settlements
        self._contexts = contexts
        self._in_flight: dict[str, _InFlight] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}
        self._paying: set[str] = set()
        # An open's call, replayed to a retry of the same credential (the draft's
        # idempotency by challenge id) for five minutes.
        self._opened = DedupCache(300.0, max_entries=2_000)
        # Bearer credentials (the Authorization value) verified already, the session token
        # included: session id and challenge id. A secret like the value itself (it holds
        # the token): kept in memory only.
        self._bearers: dict[str, tuple[str, str]] = {}
        # Sessions' stored token hashes, as read (a session's never changes): a fresh
        # credential of a known session is checked without a read. Bounded like the above.
        self._token_hashes: dict[str, str] = {}

    # -- the challenge ---------------------------------------------------------------------

    def deposit_sats(self, price_sats: int) -> int:
        c = self._config
        return max(price_sats, min(price_sats * c.deposit_multiplier, c.max_deposit_sat))

    async def offered(self, price_sats: int, description: str) -> SessionChallenge | None:
        """A fresh deposit invoice and its session challenge (priced at one call), as a
        402 offers it beside the call's own challenge; None when none can be made: the
        node failed to make the invoice, the client is past its challenge limit (an
        answer spends one request of it however many invoices it offers), or the node's
        unpaid invoices are at their cap (``max_unpaid_challenges``: the deposit takes a
        slot like the call's challenge; with none left it is not made, and the call's
        challenge stands)."""
        try:
            admit_challenge()  # the client's challenge limit, as for the call's challenge
            if self._budget is None:
                return await self._challenge(price_sats, description)
            async with self._budget.issuing():
                return await self._challenge(price_sats, description)
        except (BackendError, OSError) as exc:
            log.warning("no session challenge: the deposit invoice failed: %s", exc)
        except ApiError as exc:
            if exc.code != ErrorCode.RATE_LIMITED:
                raise
            log.info("no session challenge: %s", exc.message)
        return None

    async def _challenge(self, price_sats: int, description: str) -> SessionChallenge:
        c = self._config
        deposit = self.deposit_sats(max(1, price_sats))
        text = f"satsgate session deposit ({deposit} sat)"
        invoice = await self._node.create_invoice(deposit * 1000, text, c.invoice_expiry_s)
        now = int(time.time())
        await self._payments.insert(
            Payment(
                # Named by its hash (public in the challenge): a deposit paid and never
                # opened is refunded like any unused payment (POST /api/l402/refund with
                # paymentId "dep_<paymentHash>" and the preimage).
                payment_id=f"dep_{invoice.payment_hash}",
                payment_hash=invoice.payment_hash,
                bolt11=invoice.bolt11,
                service=SESSION_SERVICE,
                amount_msat=deposit * 1000,
                status=PaymentStatus.UNPAID,
                created_at=now,
                expires_at=invoice.expires_at,
                paid_at=None,
                spent_at=None,
                root_key="",
                token_id="",
                request_digest="",
                description=text,
                via="http",
                mode="deposit",
            )
        )
        request = {
            "amount": str(max(1, price_sats)),
            "currency": "sat",
            "description": description,
            "unitType": "request",
            "depositInvoice": invoice.bolt11,
            "paymentHash": invoice.payment_hash,
            "depositAmount": str(deposit),
            "idleTimeout": str(c.idle_timeout_s),
        }
        request_b64 = mpp.b64url(mpp.canonical_json(request).encode())
        expires = mpp.rfc3339(invoice.expires_at)
        cid = challenge_id(self._key, c.realm, request_b64, expires)
        return SessionChallenge(cid, c.realm, request_b64, expires, request)

    async def offer_lines(
        self, spec: AnySpec, params: BaseModel, accept_payment: str | None = None
    ) -> list[str]:
        """The session challenge for a 402 that offers this call, as WWW-Authenticate
        lines: only when ``Accept-Payment`` asks for the session intent
        (``lightning/session``, or a wildcard covering it), and one can be made
        (:meth:`offered`; the other challenges stand). Its deposit is a second invoice
        (an RPC and a row in the node's database, ~270 us of satsgate's CPU on the dev
        node: bench/README.md), so a 402 makes it only for a client that wants a
        session."""
        if not problems.accepts(accept_payment, "lightning", "session"):
            return []
        challenge = await self.offered(
            spec.quote_sats(params, self._contexts.rates.book), spec.title
        )
        return [] if challenge is None else [challenge.header()]

    # -- HTTP -----------------------------------------------------------------------------

    async def http_call(
        self,
        request: web.Request,
        spec: AnySpec,
        transform: Callable[[Any], Any] | None,
    ) -> web.StreamResponse | None:
        """Answer a request whose Authorization is a session credential; None for any
        other request (the charge intent and L402 answer those)."""
        auth = request.headers.getall("Authorization", [])
        if len(auth) != 1:
            return None
        known = self._bearers.get(auth[0])
        if known is not None:  # this very bearer credential verified before
            session_id, challenge = known
            checked = await self._params(request, spec, transform)
            try:
                if spec.streams(checked):
                    return await self._stream(request, session_id, spec, checked, challenge)
                served = await self._debit_and_run(session_id, spec, checked)
            except SessionProblem as problem:
                return await self._problem_response(spec, checked, problem)
            return self._served_response(served, challenge)
        scheme, _, rest = auth[0].strip().partition(" ")
        if scheme.lower() != "payment":
            return None
        doc = session_payload(rest)
        if doc is None:
            return None
        params: BaseModel | None = None
        try:
            cred = parse_credential(doc, self._key)
            if cred.action in ("open", "bearer"):
                params = await self._params(request, spec, transform)
            if cred.action == "open" and params is not None and spec.streams(params):
                deposit_hash, return_invoice = self._open_checks(cred)
                opened = await self._open_session(deposit_hash, cred.challenge_id, return_invoice)
                token = self._token(opened.session_id, cred.challenge_id)
                try:
                    return await self._stream(
                        request, opened.session_id, spec, params, cred.challenge_id, token
                    )
                except (ApiError, SessionProblem) as exc:
                    _hand_over(exc, token)
                    raise
            if cred.action == "open":
                served = await self._open(cred, spec, params)
                token = self._token(served.session_id, cred.challenge_id)
                return self._served_response(served, cred.challenge_id, token)
            if cred.action == "bearer" and params is not None:
                session_id = cred.text("sessionId").lower()
                _check_owner(session_id, cred.hex32("preimage"))
                await self._bound(session_id, cred.token())
                if spec.streams(params):
                    return await self._stream(request, session_id, spec, params, cred.challenge_id)
                served = await self._debit_and_run(session_id, spec, params)
                # Verified: its repeats (the same header value) skip the decode, the
                # challenge's HMAC, the preimage's hash and the token's check (the value
                # holds the token). Bounded; cleared when full.
                if len(self._bearers) >= _MAX_KNOWN_BEARERS:
                    self._bearers.clear()
                self._bearers[auth[0]] = (session_id, cred.challenge_id)
                return self._served_response(served, cred.challenge_id)
            if cred.action == "topUp":
                session = await self._top_up(cred)
                return self._action_response(
                    {"status": "ok", "sessionId": session.session_id, **_balance(session)},
                    session.session_id,
                    cred,
                    balanceSats=_sats(session.balance_msat),
                )
            session_id = cred.text("sessionId").lower()
            _check_owner(session_id, cred.hex32("preimage"))
            await self._bound(session_id, cred.token())
            closed = await self.close(session_id)
            refund_status = _refund_status(closed)
            refund_sats = _sats(closed.refund_msat or 0)
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
        except SessionProblem as problem:
            if params is None:
                params = await self._params_or_none(request, spec, transform)
            return await self._problem_response(spec, params, problem)

    async def _params(
        self,
        request: web.Request,
        spec: AnySpec,
        transform: Callable[[Any], Any] | None,
    ) -> BaseModel:
        limit = min(spec.max_body_bytes, self._config.max_body_bytes)
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
                balanceSats=_sats(served.balance_msat),
                balanceMsat=served.balance_msat,
                chargedMsat=served.charged_msat,
                **_token_members(token),
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
            base_url = self._config.public_base_url
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
                body |= charge.body_fields(self._config.public_base_url)
                headers += charge.www_authenticate()
            session = await self.offered(
                spec.quote_sats(params, self._contexts.rates.book), spec.title
            )
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

    # -- the actions ----------------------------------------------------------------------

    def _fresh(self, cred: SessionCredential) -> str:
        """The deposit hash of an open or topUp credential's (unexpired) challenge."""
        if cred.expires_at is not None and cred.expires_at <= time.time():
            raise SessionProblem(
                "challenge-expired", ErrorCode.PAYMENT_EXPIRED, "the challenge has expired"
            )
        payment_hash = cred.request.get("paymentHash")
        if not isinstance(payment_hash, str) or not cred.request.get("depositInvoice"):
            raise SessionProblem(
                "unknown-challenge", ErrorCode.PAYMENT_INVALID, "this challenge carries no deposit"
            )
        return payment_hash.lower()

    async def _deposit(self, payment_hash: str) -> Payment:
        """The deposit's row, refreshed from the node if its settlement is not seen yet."""
        payment = await self._payments.get_by_hash(payment_hash)
        if payment is None or payment.mode != "deposit":
            raise SessionProblem("unknown-challenge", ErrorCode.PAYMENT_INVALID, "unknown deposit")
        if payment.status is PaymentStatus.UNPAID:
            payment = await self._settlements.refresh_paid(payment)
        if payment.status is PaymentStatus.UNPAID:
            raise SessionProblem(
                "unknown-challenge",
                ErrorCode.PAYMENT_PENDING,
                "the deposit invoice is not paid yet",
                {"retry_after_seconds": 2},
            )
        return payment

    def _return_invoice(self, bolt11: str) -> ReturnInvoice:
        try:
            invoice = decode_invoice(bolt11)
        except InvalidInvoice as exc:
            raise SessionProblem(
                "invalid-return-invoice", ErrorCode.PAYMENT_INVALID, f"returnInvoice: {exc}"
            ) from None
        if invoice.amount_msat:
            raise SessionProblem(
                "invalid-return-invoice",
                ErrorCode.PAYMENT_INVALID,
                "returnInvoice must carry no amount: the refund is decided at close",
            )
        if invoice.network != self._config.network:
            raise SessionProblem(
                "invalid-return-invoice",
                ErrorCode.PAYMENT_INVALID,
                f"returnInvoice is not for {self._config.network}",
            )
        if invoice.expires_at <= time.time() + self._config.idle_timeout_s:
            raise SessionProblem(
                "invalid-return-invoice",
                ErrorCode.PAYMENT_INVALID,
                "returnInvoice expires before the idle timeout "
                f"({self._config.idle_timeout_s} s); the draft recommends twice that or more",
            )
        return ReturnInvoice(bolt11.strip(), invoice.payment_hash)

    def _open_checks(self, cred: SessionCredential) -> tuple[str, ReturnInvoice]:
        """An open credential's deposit hash and return invoice, checked (the preimage
        with the deposit hash the challenge names)."""
        deposit_hash = self._fresh(cred)
        preimage = cred.hex32("preimage")
        if hashlib.sha256(bytes.fromhex(preimage)).hexdigest() != deposit_hash:
            raise SessionProblem(
                "invalid-preimage",
                ErrorCode.PAYMENT_INVALID,
                "sha256(preimage) is not the paymentHash",
            )
        return deposit_hash, self._return_invoice(cred.text("returnInvoice"))

    async def _open_session(
        self, deposit_hash: str, challenge_id: str, return_invoice: ReturnInvoice
    ) -> Session:
        deposit = await self._deposit(deposit_hash)
        # The node pays an invoice once: a second session's payout would move nothing
        # (the node answers "already paid") yet read as paid. The deposit stays unused:
        # open again with a fresh return invoice. The read answers the common case; the
        # store's unique index the race of two opens that both passed it.
        if await self._sessions.return_invoice_taken(
            return_invoice.bolt11, return_invoice.payment_hash, deposit_hash
        ):
            raise _return_invoice_taken()
        try:
            session = await self._sessions.open(
                deposit.payment_hash,
                challenge_id,
                return_invoice.bolt11,
                return_invoice.payment_hash,
                token_sha256(self._token(deposit.payment_hash, challenge_id)),
                int(time.time()),
            )
        except ReturnInvoiceTaken:
            raise _return_invoice_taken() from None
        if session is None:
            raise SessionProblem(
                "unknown-challenge",
                ErrorCode.PAYMENT_ALREADY_USED,
                "this deposit was used already",
                await self._used_deposit(deposit_hash, challenge_id),
            )
        log.info("session %s opened with %d msat", session.session_id[:16], session.deposit_msat)
        return session

    async def _open(
        self, cred: SessionCredential, spec: AnySpec, params: BaseModel | None
    ) -> Served:
        assert params is not None
        deposit_hash, return_invoice = self._open_checks(cred)
        key = (cred.challenge_id, "open")
        earlier = self._opened.lookup(key)
        if earlier is not None:  # a retry of this open: its first answer, nothing again
            result = await asyncio.shield(earlier)
            session = await self._sessions.get(deposit_hash)
            balance = session.balance_msat if session is not None else 0
            return Served(result, deposit_hash, 0, balance)
        session = await self._open_session(deposit_hash, cred.challenge_id, return_invoice)
        self._opened.begin(key)
        try:
            served = await self._debit_and_run(session.session_id, spec, params)
        except BaseException as exc:
            self._opened.forget(key)
            _hand_over(exc, self._token(session.session_id, cred.challenge_id))
            raise
        self._opened.finish(key, served.result)
        return served

    async def _used_deposit(self, payment_hash: str, challenge_id: str) -> dict[str, Any]:
        """Who used a deposit; to the open credential that opened the session with it
        (its challenge echo, which only the payer holds), that session's token again."""
        use = await self._sessions.deposit_use(payment_hash)
        if use is None:
            return {}
        session_id, kind, opened_with = use
        if kind == "open" and hmac.compare_digest(opened_with, challenge_id):
            token = self._token(session_id, challenge_id)
            return {"sessionId": session_id, "sessionToken": token}
        return {"sessionId": session_id}

    async def _top_up(self, cred: SessionCredential) -> Session:
        deposit_hash = self._fresh(cred)
        session_id = cred.text("sessionId").lower()
        preimage = cred.hex32("topUpPreimage")
        if hashlib.sha256(bytes.fromhex(preimage)).hexdigest() != deposit_hash:
            raise SessionProblem(
                "invalid-preimage",
                ErrorCode.PAYMENT_INVALID,
                "sha256(topUpPreimage) is not the paymentHash",
            )
        await self._bound(session_id, cred.token())
        use = await self._sessions.deposit_use(deposit_hash)
        if use is not None:
            used_for, kind, challenge = use
            session = await self._sessions.get(used_for)
            if used_for == session_id and kind == "topup" and challenge == cred.challenge_id:
                assert session is not None
                return session  # a retry of this top-up: the same answer, credited once
            raise SessionProblem(
                "unknown-challenge", ErrorCode.PAYMENT_ALREADY_USED, "this deposit was used already"
            )
        await self._deposit(deposit_hash)
        outcome, session_or_none = await self._sessions.top_up(
            session_id, deposit_hash, cred.challenge_id, int(time.time())
        )
        if outcome == "unknown":
            raise SessionProblem("session-not-found", ErrorCode.PAYMENT_INVALID, "no such session")
        if outcome == "closed":
            raise SessionProblem(
                "session-closed", ErrorCode.PAYMENT_ALREADY_USED, "the session is closed"
            )
        if outcome != "ok" or session_or_none is None:  # lost to a concurrent use
            raise SessionProblem(
                "unknown-challenge", ErrorCode.PAYMENT_ALREADY_USED, "this deposit was used already"
            )
        log.info("session %s topped up", session_id[:16])
        return session_or_none

    def _token(self, session_id: str, challenge_id: str) -> str:
        return session_token(self._token_key, session_id, challenge_id)

    async def _bound(
        self, session_id: str, token: str | None, carrier: str = "payload.token"
    ) -> None:
        """Whether ``token`` is the session's (its sha256 compared in constant time with
        the stored one): SessionProblem if not, before anything of the session changes.
        ``carrier`` names where the credential carries it."""
        if token is None:
            raise _binding_problem(
                session_id,
                f"{carrier} is required: a session is spent, topped up and closed with "
                "the sessionToken its open answered (Payment-Session-Token); the preimage "
                "alone is not accepted",
            )
        stored = self._token_hashes.get(session_id)
        if stored is None:
            session = await self._sessions.get(session_id)
            if session is None:
                raise SessionProblem(
                    "session-not-found", ErrorCode.PAYMENT_INVALID, "no such session"
                )
            if session.token_sha256 is None:
                raise _binding_problem(
                    session_id,
                    "this session was opened before sessions were bound to a token, so no "
                    "credential spends or closes it: after "
                    f"{self._config.idle_timeout_s} s without use it is closed and its "
                    "balance is paid to its return invoice",
                )
            stored = session.token_sha256
            if len(self._token_hashes) >= _MAX_KNOWN_BEARERS:
                self._token_hashes.clear()
            self._token_hashes[session_id] = stored
        if not hmac.compare_digest(token_sha256(token), stored):
            raise _binding_problem(
                session_id,
                f"{carrier} is not this session's token: send the sessionToken the "
                "session's open answered (Payment-Session-Token)",
            )

    async def _debit_and_run(self, session_id: str, spec: AnySpec, params: BaseModel) -> Served:
        """The debit, the call, the credit of what it did not earn (the credential proven:
        the preimage and the token, or the open that made the session)."""
        if spec.mode == "job":
            raise SessionProblem(
                "insufficient-balance",
                ErrorCode.PAYMENT_REQUIRED,
                f"{spec.slug} runs as a job and is paid per call (L402 or the charge intent), "
                "not from a session",
            )
        price_msat = spec.quote_sats(params, self._contexts.rates.book) * 1000
        with self._under_way(session_id):
            balance = await self._sessions.debit(session_id, price_msat, int(time.time()))
            if balance is None:
                raise await self._why_not(session_id, price_msat)
            return await self._run(session_id, spec, params, price_msat, balance)

    @contextlib.contextmanager
    def _under_way(self, session_id: str) -> Iterator[None]:
        """A call of the session under way, counted from before its debit: a close that
        comes meanwhile waits for it (and its credit, if any) before it decides the
        refund."""
        flight = self._in_flight.get(session_id)
        if flight is None:
            flight = self._in_flight[session_id] = _InFlight()
        flight.count += 1
        flight.idle.clear()
        try:
            yield
        finally:
            flight.count -= 1
            if flight.count == 0:
                flight.idle.set()
                if self._in_flight.get(session_id) is flight:
                    del self._in_flight[session_id]

    async def _stream(
        self,
        request: web.Request,
        session_id: str,
        spec: AnySpec,
        params: BaseModel,
        challenge_id: str,
        token: str | None = None,
    ) -> web.StreamResponse:
        """A streamed call (server-sent events, satsgate.payments.streaming) paid from the
        session: the quote is reserved (debited) first; at the stream's end the cost by
        the tokens used is debited instead (the rest credited) and the payment-receipt
        event says what it cost. A failure before the first piece is credited and
        answered as an error; one after it is credited and ends the stream with ``event:
        error``. A stream the client abandons keeps its reservation (what was generated
        for it is paid)."""
        assert spec.stream_handler is not None
        price_msat = spec.quote_sats(params, self._contexts.rates.book) * 1000
        with self._under_way(session_id):
            balance = await self._sessions.debit(session_id, price_msat, int(time.time()))
            if balance is None:
                raise await self._why_not(session_id, price_msat)
            ctx = self._contexts.for_call(
                f"ses_{session_id[:16]}_{secrets.token_hex(6)}", service=spec.slug
            )
            opened = await self._open_stream(spec, ctx, params, session_id, price_msat)
            headers = {
                **opened.headers,
                # At the start: what was reserved for this call; the final cost follows
                # in the stream's payment-receipt event.
                "Payment-Receipt": receipt_header(
                    session_id,
                    int(time.time()),
                    challengeId=challenge_id,
                    balanceSats=_sats(balance),
                    balanceMsat=balance,
                    reservedMsat=price_msat,
                    **_token_members(token),
                ),
            }
            if token is not None:  # an open's answer (relay: Cache-Control no-store)
                headers[TOKEN_HEADER] = token
            assert opened.stream is not None
            if spec.untrusted_output:
                opened.stream.receipt["untrusted_output"] = True
            settle = _SessionStream(self, session_id, price_msat, balance)
            return await streaming.relay(request, opened.stream, settle, headers)

    async def _open_stream(
        self,
        spec: AnySpec,
        ctx: ServiceContext,
        params: BaseModel,
        session_id: str,
        price_msat: int,
    ) -> ServiceResult:
        """The stream up to its first piece; a failure before it is credited back."""
        assert spec.stream_handler is not None
        try:
            return await spec.stream_handler(ctx, params)
        except BaseException as exc:
            answer = await self._call_failed(session_id, price_msat, spec.slug, exc)
            if answer is exc:
                raise
            raise answer from exc

    async def _true_up(
        self, session_id: str, price_msat: int, metered: int | None, balance: int
    ) -> tuple[int, int]:
        """A streamed call's end: of its reservation the cost by use is kept (never more),
        the rest credited back. Returns (earned, balance)."""
        earned = price_msat if metered is None else max(0, min(price_msat, metered))
        if earned < price_msat:
            after = await self._sessions.credit(
                session_id, price_msat - earned, int(time.time()), held_msat=price_msat
            )
            if after is not None:
                return earned, after
            return price_msat, balance
        self._sessions.answered(session_id, price_msat)
        return earned, balance

    async def _why_not(self, session_id: str, price_msat: int) -> SessionProblem:
        session = await self._sessions.get(session_id)
        if session is None:
            return SessionProblem("session-not-found", ErrorCode.PAYMENT_INVALID, "no such session")
        if session.status != "open":
            return SessionProblem(
                "session-closed",
                ErrorCode.PAYMENT_ALREADY_USED,
                "the session is closed: open a new one",
                {"sessionId": session_id},
            )
        return SessionProblem(
            "insufficient-balance",
            ErrorCode.PAYMENT_INSUFFICIENT,
            f"this call costs {price_msat // 1000} sat and the session holds "
            f"{session.balance_msat} msat: top it up with the deposit of this 402",
            {
                "sessionId": session_id,
                "balanceSats": _sats(session.balance_msat),
                "balanceMsat": session.balance_msat,
                "amountSats": price_msat // 1000,
            },
        )

    async def _run(
        self,
        session_id: str,
        spec: AnySpec,
        params: BaseModel,
        price_msat: int,
        balance: int,
    ) -> Served:
        ctx = self._contexts.for_call(
            f"ses_{session_id[:16]}_{secrets.token_hex(6)}", service=spec.slug
        )
        try:
            result = await spec.handler(ctx, params)
        except BaseException as exc:
            answer = await self._call_failed(session_id, price_msat, spec.slug, exc)
            if answer is exc:
                raise
            raise answer from exc
        if spec.untrusted_output and isinstance(result.body, dict):
            result = replace(result, body={**result.body, "untrusted_output": True})
        earned = price_msat
        if result.metered_msat is not None:
            earned = max(0, min(price_msat, result.metered_msat))
        elif result.charged_msat is not None and result.charged_msat < price_msat:
            earned = max(0, result.charged_msat)
        if earned < price_msat:
            after = await self._sessions.credit(
                session_id, price_msat - earned, int(time.time()), held_msat=price_msat
            )
            if after is not None:
                balance = after
            else:
                log.error("session %s: a true-up credit was refused", session_id[:16])
                earned = price_msat
        else:
            self._sessions.answered(session_id, price_msat)
        return Served(result, session_id, earned, balance)

    async def _call_failed(
        self, session_id: str, price_msat: int, slug: str, exc: BaseException
    ) -> BaseException:
        """A service's handler failed after the session's debit: the price goes back at
        once, and the answer to raise (``exc`` itself, or the ApiError it becomes) says
        what happened (:func:`_credit_said`: the session's credit and balance, no refund,
        since none was made). A cancellation is credited and goes on."""
        if isinstance(exc, asyncio.CancelledError):
            await asyncio.shield(self._credit(session_id, price_msat, "call cancelled"))
            return exc
        if isinstance(exc, ApiError):
            await self._answer_credited(session_id, price_msat, exc, exc.message)
            return exc
        if isinstance(exc, EngineError):
            error = exc.api_error()
            await self._answer_credited(session_id, price_msat, error, exc.message)
            return error
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: not a failure
            return exc
        log.error("service %s failed after a session debit", slug, exc_info=exc)
        error = ApiError(ErrorCode.L402_UPSTREAM_FAILED, "The service failed.")
        await self._answer_credited(session_id, price_msat, error, repr(exc))
        return error

    async def _answer_credited(
        self, session_id: str, price_msat: int, error: ApiError, reason: str
    ) -> None:
        credit = await self._credit(session_id, price_msat, reason)
        said = _credit_said(error.message, credit)
        error.message, error.suggestion = said["error"], said["suggestion"]
        error.refund = None
        error.extra = {**error.extra, "session": credit}

    async def _credit(self, session_id: str, amount_msat: int, reason: str) -> dict[str, Any]:
        """Give a failed call's debit back at once; the envelope's ``session`` member."""
        balance = await self._sessions.credit(
            session_id, amount_msat, int(time.time()), held_msat=amount_msat
        )
        if balance is None:
            log.error(
                "session %s: the credit of %d msat was refused (%s)",
                session_id[:16],
                amount_msat,
                reason[:200],
            )
            return {"sessionId": session_id, "creditedMsat": 0}
        return {
            "sessionId": session_id,
            "creditedMsat": amount_msat,
            "creditedSats": _sats(amount_msat),
            "balanceMsat": balance,
            "balanceSats": _sats(balance),
        }

    # -- MCP ------------------------------------------------------------------------------

    async def mcp_call(self, payment_id: str, spec: AnySpec, params: BaseModel) -> Served:
        """A tool call paid from a session: ``paymentId = "sess_<sessionId>.<token>"``
        (the session token its open answered; the preimage is not accepted). Raises
        ApiError."""
        session_id, dot, token = payment_id[len(MCP_PREFIX) :].partition(".")
        session_id = session_id.lower()
        if not dot or not token or len(session_id) != 64 or not set(session_id) <= HEX_DIGITS:
            raise ApiError(
                ErrorCode.SESSION_BINDING_REQUIRED,
                "A session paymentId is sess_<sessionId>.<sessionToken>: the sessionToken "
                "the session's open answered (Payment-Session-Token); the session's "
                "preimage is not accepted.",
            )
        try:
            await self._bound(session_id, token, "the paymentId's sessionToken")
            return await self._debit_and_run(session_id, spec, params)
        except SessionProblem as problem:
            raise problem.api_error() from None

    # -- close and payouts ----------------------------------------------------------------

    async def close(self, session_id: str, reason: str = "client") -> Session:
        """Close (once) and pay the balance to the return invoice; every close of the same
        session answers the outcome of that one. Raises SessionProblem for none."""
        session_id = session_id.lower()
        if await self._sessions.close(session_id, reason, int(time.time())):
            log.info("session %s closed (%s)", session_id[:16], reason)
            started = asyncio.ensure_future(self._finish_close(session_id))
            self._closing[session_id] = started
            started.add_done_callback(lambda _: self._closing.pop(session_id, None))
        running = self._closing.get(session_id)
        if running is not None:
            await asyncio.shield(running)
        session = await self._sessions.get(session_id)
        if session is None:
            raise SessionProblem("session-not-found", ErrorCode.PAYMENT_INVALID, "no such session")
        return session

    async def _finish_close(self, session_id: str) -> None:
        """After open -> closed: let calls under way finish (their credits count), decide
        the refund once, pay it."""
        flight = self._in_flight.get(session_id)
        if flight is not None:
            await flight.idle.wait()
        session = await self._sessions.decide_refund(session_id, int(time.time()))
        if session is not None and session.payout_status == "pending":
            await self._pay(session_id)

    async def _pay(self, session_id: str) -> None:
        """One payout attempt, claimed first (never two at once, never a second after an
        attempt whose outcome is unknown)."""
        session = await self._sessions.get(session_id)
        if session is None or session.refund_msat is None:
            return
        now = int(time.time())
        try:
            invoice = decode_invoice(session.return_invoice)
        except InvalidInvoice as exc:  # checked at open; kept for the operator if not
            await self._sessions.note_payout_error(session_id, str(exc)[:500])
            return
        claimed = await self._sessions.claim_payout(session_id, invoice.payment_hash, now)
        if claimed is None:
            return
        amount = session.refund_msat
        if invoice.expired():
            await self._sessions.payout_outcome(
                session_id,
                "failed",
                now,
                error="the return invoice expired before the payout: the operator pays the "
                "payer by other means",
                retry_at=_NEVER,
            )
            log.warning("session %s: return invoice expired, %d msat owed", session_id, amount)
            return
        if claimed.payout_attempts == 1 and await self._paid_before(invoice.payment_hash):
            # Not by an attempt of this session's (this is its first): a node pays an
            # invoice once, and would answer "already paid" for this one.
            await self._sessions.payout_outcome(
                session_id,
                "failed",
                now,
                error="the return invoice was paid already, not by this session: the "
                "operator pays the payer by other means",
                retry_at=_NEVER,
            )
            log.warning("session %s: return invoice paid already, %d msat owed", session_id, amount)
            return
        self._paying.add(session_id)
        try:
            grant = await self._config.fees.grant(amount)
            result = await self._node.pay_invoice(
                session.return_invoice,
                grant.limit_msat,
                self._config.pay_timeout_s,
                amount_msat=amount,
            )
            await self._config.fees.settle(grant, result)
        except (BackendError, OSError, TimeoutError) as exc:
            log.warning("session %s payout: outcome unknown (%s)", session_id[:16], exc)
            await self._sessions.note_payout_error(session_id, f"outcome unknown: {exc}"[:500])
            return
        finally:
            self._paying.discard(session_id)
        await self._apply(session_id, claimed.payout_attempts, result)

    async def _paid_before(self, payment_hash: str) -> bool:
        """Whether the node has paid (or is paying) this hash already. Unknown (the node
        does not answer): False, the payout goes ahead as it would have."""
        try:
            known = await self._node.lookup_payment(payment_hash)
        except (BackendError, OSError, TimeoutError):
            return False
        return known.state is not PaymentState.FAILED

    async def _apply(self, session_id: str, attempts: int, result: PaymentResult) -> None:
        now = int(time.time())
        if result.state is PaymentState.SUCCEEDED:
            await self._sessions.payout_outcome(
                session_id, "succeeded", now, fee_msat=result.fee_msat
            )
            log.info("session %s: balance paid out, fee %d msat", session_id[:16], result.fee_msat)
        elif result.state is PaymentState.FAILED:
            delay = min(3600, 60 * 2 ** max(0, attempts - 1))
            reason = result.failure_reason or "the node gave no reason"
            await self._sessions.payout_outcome(
                session_id, "failed", now, error=reason[:500], retry_at=now + delay
            )
            log.warning("session %s payout failed (%s); retried in %d s", session_id, reason, delay)
        # PENDING: stays paying until the node says (reconcile)

    async def sweep(self) -> dict[str, int]:
        """Close idle sessions, finish closes a restart cut short, retry due payouts and
        resolve payouts whose outcome was unknown. Returns what it did."""
        now = int(time.time())
        done = {"closed": 0, "decided": 0, "paid": 0, "resolved": 0}
        for session_id in await self._sessions.idle(now - self._config.idle_timeout_s):
            if session_id in self._in_flight:
                continue
            with contextlib.suppress(SessionProblem):
                await self.close(session_id, "idle")
                done["closed"] += 1
        for session_id in await self._sessions.undecided():
            if session_id in self._closing:
                continue
            await self._finish_close(session_id)
            done["decided"] += 1
        for session_id in await self._sessions.payouts_due(now):
            if session_id in self._closing or session_id in self._paying:
                continue
            await self._pay(session_id)
            done["paid"] += 1
        settled_before = now - self._config.pay_timeout_s - 60
        for session_id, payout_hash, updated_at in await self._sessions.payouts_paying():
            if session_id in self._paying or updated_at > settled_before or not payout_hash:
                continue
            session = await self._sessions.get(session_id)
            with contextlib.suppress(BackendError, OSError, TimeoutError):
                result = await self._node.lookup_payment(payout_hash)
                if result.state is not PaymentState.PENDING and session is not None:
                    await self._apply(session_id, session.payout_attempts, result)
                    done["resolved"] += 1
        return done

    async def give_back_held(self) -> int:
        """At start-up, before any call: what calls a crash left unanswered had debited
        goes back to their sessions (see SessionRepository.give_back_held)."""
        return await self._sessions.give_back_held(int(time.time()))

    async def wait_closing(self) -> None:
        """Let closes under way finish (shutdown, tests)."""
        if self._closing:
            await asyncio.gather(*list(self._closing.values()), return_exceptions=True)


def _check_owner(session_id: str, preimage: str) -> None:
    if hashlib.sha256(bytes.fromhex(preimage)).hexdigest() != session_id.lower():
        raise SessionProblem(
            "invalid-preimage", ErrorCode.PAYMENT_INVALID, "sha256(preimage) is not the sessionId"
        )


def _credit_said(cause: str, credit: dict[str, Any]) -> dict[str, Any]:
    """The error members of a session call that failed after its debit: ``session`` (the
    credit and the balance after it), and an ``error`` and a ``suggestion`` that say
    that; a session call's failure makes no refund, so they name none."""
    if credit["creditedMsat"]:
        error = (
            f"{cause} Nothing was charged for this call: its price, "
            f"{credit['creditedMsat']} msat, was credited back to the session, whose "
            f"balance is {credit['balanceMsat']} msat."
        )
        suggestion = (
            "Nothing to claim: the price is back in the session's balance (session."
            "balanceMsat). Retry with a bearer credential, or close the session to be "
            "paid the balance."
        )
    else:
        error = (
            f"{cause} Its price could not be credited back to the session "
            "(session.creditedMsat is 0)."
        )
        suggestion = "Give the operator the sessionId: the node's log records the failed credit."
    return {"error": error, "suggestion": suggestion, "session": credit}


def _binding_problem(session_id: str, detail: str) -> SessionProblem:
    return SessionProblem(
        BINDING_PROBLEM, ErrorCode.SESSION_BINDING_REQUIRED, detail, {"sessionId": session_id}
    )


def _hand_over(exc: BaseException, token: str) -> None:
    """The answer to an open whose session was made but whose call failed or was
    refused carries the session's token all the same (the balance is the payer's)."""
    if isinstance(exc, ApiError):
        exc.headers = {**exc.headers, TOKEN_HEADER: token}
        exc.extra = {**exc.extra, "sessionToken": token}
    elif isinstance(exc, SessionProblem):
        exc.token = token
        exc.extra = {**exc.extra, "sessionToken": token}


def _token_members(token: str | None) -> dict[str, str]:
    """The receipt's ``sessionToken``: on an open's answer only."""
    return {} if token is None else {"sessionToken": token}


def _refund_status(session: Session) -> str:
    """The draft's refundStatus; 'pending' while the node has not said (satsgate's own)."""
    status = session.payout_status
    if status in ("skipped", "succeeded", "failed"):
        return str(status)
    return "pending"


def _balance(session: Session) -> dict[str, int]:
    return {"balanceSats": _sats(session.balance_msat), "balanceMsat": session.balance_msat}


def _return_invoice_taken() -> SessionProblem:
    return SessionProblem(
        "invalid-return-invoice",
        ErrorCode.PAYMENT_INVALID,
        "returnInvoice is another session's already: make a fresh one per session",
    )
