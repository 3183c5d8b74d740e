"""Payment sessions: the "session" intent of the Payment scheme, lightning method
(draft-lightning-session-00).

A 402 of a paid endpoint whose request asks for the session intent (``Accept-Payment:
lightning/session``, or a wildcard over it) offers, beside L402 and the charge intent, a
session challenge: ``amount`` (the price of this call, in sats), ``currency`` "sat",
``unitType`` "request", a fresh ``depositInvoice`` for ``depositAmount`` (the price
times ``session_deposit_multiplier``, at most ``session_max_deposit_sat``, never below
the one call), its ``paymentHash`` and ``idleTimeout``. The deposit is a row of
``payments`` (mode 'deposit'), settled like any invoice.

The credentials and the session token that binds a session to its payer are described
with their wire (satsgate.payments.session_wire); the HTTP face is session_http.py, the
offer session_offers.py, the close and payout session_payouts.py.

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
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

from aiohttp import web
from pydantic import BaseModel

from satsgate.constant_time import texts_equal
from satsgate.edge.ratelimit import ChallengeBudget
from satsgate.engines import EngineError
from satsgate.errors import ApiError, ErrorCode
from satsgate.lightning.invoices import RefusedPayoutInvoice, payout_invoice
from satsgate.payments import mpp, streaming
from satsgate.payments.dedup import DedupCache
from satsgate.payments.hmac_sha256 import HmacKey, hmac_sha256
from satsgate.payments.session_offers import (
    DepositNode,
    DepositRows,
    SessionOffers,
)
from satsgate.payments.session_payouts import CallsUnderWay, PayoutNode, SessionPayouts
from satsgate.payments.session_wire import (
    BINDING_PROBLEM,
    HEX_DIGITS,
    SessionCredential,
    SessionProblem,
    parse_credential,
    receipt_header,
    session_token,
    token_sha256,
)
from satsgate.payouts.fees import PayoutFees
from satsgate.services.base import ServiceContext, ServiceResult, ServiceSpec, StreamPiece
from satsgate.services.catalog.rates import Rates
from satsgate.store import Payment, PaymentStatus
from satsgate.store.sessions import ReturnInvoiceTaken, Session, SessionRepository

log = logging.getLogger("satsgate.sessions")
# Sessions' token hashes remembered as read (see Sessions.__init__); cleared when full.
_MAX_KNOWN_TOKENS = 10_000

AnySpec = ServiceSpec[Any]
MCP_PREFIX = "sess_"  # an MCP paymentId that names a session: sess_<sessionId>.<token>
TOKEN_HEADER = "Payment-Session-Token"  # the open's answer: the session token


class ReturnInvoice(NamedTuple):
    """An open's checked return invoice: its text and its payment hash."""

    bolt11: str
    payment_hash: str


def sats(msat: int) -> int:
    return msat // 1000


# -- the collaborators it uses -------------------------------------------------------------


class InvoiceNode(DepositNode, PayoutNode, Protocol):
    """The node: deposit invoices, and the payouts on close."""


class DepositPayments(DepositRows, Protocol):
    async def get_by_hash(self, payment_hash: str) -> Payment | None: ...


class PaidRefresher(Protocol):
    async def refresh_paid(self, payment: Payment) -> Payment: ...


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


@dataclass
class Served:
    """A served session call: the result, what it cost and the balance left."""

    result: ServiceResult
    session_id: str
    charged_msat: int
    balance_msat: int


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
            "balanceSats": sats(balance),
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
        budget: ChallengeBudget | None = None,
    ) -> None:
        self._config = config
        self._key = HmacKey(config.secret.encode())
        # Its own key, so that no token is ever a valid challenge id or the reverse.
        self._token_key = HmacKey(hmac_sha256(config.secret.encode(), b"session token"))
        self._node = node
        self._payments = payments
        self._sessions = sessions
        self._settlements = settlements
        self._contexts = contexts
        self._offers = SessionOffers(
            config=config,
            key=self._key,
            node=node,
            payments=payments,
            rates=contexts.rates,
            budget=budget,
        )
        # The offer (session_offers.py): a deposit invoice and its challenge.
        self.offered = self._offers.offered
        self.offered_for = self._offers.offered_for
        self.offer_lines = self._offers.offer_lines
        self._in_flight: dict[str, CallsUnderWay] = {}
        self._payouts = SessionPayouts(
            node=node,
            sessions=sessions,
            fees=config.fees,
            pay_timeout_s=config.pay_timeout_s,
            idle_timeout_s=config.idle_timeout_s,
            under_way=self._in_flight,
        )
        # A session's end (session_payouts.py): the close, its payout, the sweep.
        self.close = self._payouts.close
        self.sweep = self._payouts.sweep
        self.wait_closing = self._payouts.wait_closing
        # An open's call, replayed to a retry of the same credential (the draft's
        # idempotency by challenge id) for five minutes.
        self._opened = DedupCache(300.0, max_entries=2_000)
        # Sessions' stored token hashes, as read (a session's never changes): a fresh
        # credential of a known session is checked without a read. Bounded like the above.
        self._token_hashes: dict[str, str] = {}

    # -- the challenge ---------------------------------------------------------------------

    def parse(self, doc: dict[str, Any]) -> SessionCredential:
        """A decoded session credential checked against this server's challenges."""
        return parse_credential(doc, self._key)

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
        """An amountless invoice on our network that outlives the idle timeout (the refund
        is decided at close, which may come that late)."""
        idle_s = self._config.idle_timeout_s
        try:
            invoice = payout_invoice(
                bolt11, amount_msat=None, network=self._config.network, valid_for_s=idle_s
            )
        except RefusedPayoutInvoice as refused:
            why = {
                "amount": ": the refund is decided at close",
                "expiry": " (the idle timeout); the draft recommends twice that or more",
            }.get(refused.check, "")
            raise SessionProblem(
                "invalid-return-invoice", ErrorCode.PAYMENT_INVALID, f"returnInvoice {refused}{why}"
            ) from None
        return ReturnInvoice(bolt11.strip(), invoice.payment_hash)

    def open_checks(self, cred: SessionCredential) -> tuple[str, ReturnInvoice]:
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

    async def open_session(
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
                token_sha256(self.token_for(deposit.payment_hash, challenge_id)),
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

    async def open(
        self, cred: SessionCredential, spec: AnySpec, params: BaseModel | None
    ) -> Served:
        assert params is not None
        deposit_hash, return_invoice = self.open_checks(cred)
        key = (cred.challenge_id, "open")
        earlier = self._opened.lookup(key)
        if earlier is not None:  # a retry of this open: its first answer, nothing again
            result = await asyncio.shield(earlier)
            session = await self._sessions.get(deposit_hash)
            balance = session.balance_msat if session is not None else 0
            return Served(result, deposit_hash, 0, balance)
        session = await self.open_session(deposit_hash, cred.challenge_id, return_invoice)
        self._opened.begin(key)
        try:
            served = await self.debit_and_run(session.session_id, spec, params)
        except BaseException as exc:
            self._opened.forget(key)
            hand_over(exc, self.token_for(session.session_id, cred.challenge_id))
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
        if kind == "open" and texts_equal(challenge_id, opened_with):
            token = self.token_for(session_id, challenge_id)
            return {"sessionId": session_id, "sessionToken": token}
        return {"sessionId": session_id}

    async def top_up(self, cred: SessionCredential) -> Session:
        deposit_hash = self._fresh(cred)
        session_id = cred.text("sessionId").lower()
        preimage = cred.hex32("topUpPreimage")
        if hashlib.sha256(bytes.fromhex(preimage)).hexdigest() != deposit_hash:
            raise SessionProblem(
                "invalid-preimage",
                ErrorCode.PAYMENT_INVALID,
                "sha256(topUpPreimage) is not the paymentHash",
            )
        await self.check_bound(session_id, cred.token())
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

    def token_for(self, session_id: str, challenge_id: str) -> str:
        return session_token(self._token_key, session_id, challenge_id)

    async def check_bound(
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
            if len(self._token_hashes) >= _MAX_KNOWN_TOKENS:
                self._token_hashes.clear()
            self._token_hashes[session_id] = stored
        if not hmac.compare_digest(token_sha256(token), stored):
            raise _binding_problem(
                session_id,
                f"{carrier} is not this session's token: send the sessionToken the "
                "session's open answered (Payment-Session-Token)",
            )

    async def debit_and_run(self, session_id: str, spec: AnySpec, params: BaseModel) -> Served:
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
            flight = self._in_flight[session_id] = CallsUnderWay()
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

    async def stream(
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
                    balanceSats=sats(balance),
                    balanceMsat=balance,
                    reservedMsat=price_msat,
                    **token_members(token),
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
                "balanceSats": sats(session.balance_msat),
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
            "creditedSats": sats(amount_msat),
            "balanceMsat": balance,
            "balanceSats": sats(balance),
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
            await self.check_bound(session_id, token, "the paymentId's sessionToken")
            return await self.debit_and_run(session_id, spec, params)
        except SessionProblem as problem:
            raise problem.api_error() from None

    async def give_back_held(self, gone: str) -> int:
        """What calls the gone instance ``gone`` left unanswered had debited goes back
        to their sessions (see SessionRepository.give_back_held)."""
        return await self._sessions.give_back_held(gone, int(time.time()))


def check_owner(session_id: str, preimage: str) -> None:
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


def hand_over(exc: BaseException, token: str) -> None:
    """The answer to an open whose session was made but whose call failed or was
    refused carries the session's token all the same (the balance is the payer's)."""
    if isinstance(exc, ApiError):
        exc.headers = {**exc.headers, TOKEN_HEADER: token}
        exc.extra = {**exc.extra, "sessionToken": token}
    elif isinstance(exc, SessionProblem):
        exc.token = token
        exc.extra = {**exc.extra, "sessionToken": token}


def token_members(token: str | None) -> dict[str, str]:
    """The receipt's ``sessionToken``: on an open's answer only."""
    return {} if token is None else {"sessionToken": token}


def refund_status_of(session: Session) -> str:
    """The draft's refundStatus; 'pending' while the node has not said (satsgate's own)."""
    status = session.payout_status
    if status in ("skipped", "succeeded", "failed"):
        return str(status)
    return "pending"


def balance_fields(session: Session) -> dict[str, int]:
    return {"balanceSats": sats(session.balance_msat), "balanceMsat": session.balance_msat}


def _return_invoice_taken() -> SessionProblem:
    return SessionProblem(
        "invalid-return-invoice",
        ErrorCode.PAYMENT_INVALID,
        "returnInvoice is another session's already: make a fresh one per session",
    )
