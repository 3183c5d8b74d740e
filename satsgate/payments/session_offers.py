"""The session intent's offer: a deposit invoice (a ``payments`` row of mode 'deposit',
settled like any invoice) and the session challenge naming it, made for a 402 whose
client asks for sessions, and for the top-up a refusal for want of balance offers.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from pydantic import BaseModel

from satsgate.edge.ratelimit import ChallengeBudget, admit_challenge
from satsgate.errors import ApiError, ErrorCode
from satsgate.lightning.backend import BackendError, CreatedInvoice
from satsgate.payments import mpp, problems
from satsgate.payments.hmac_sha256 import HmacKey
from satsgate.payments.session_wire import SessionChallenge, challenge_id
from satsgate.services.base import ServiceSpec
from satsgate.services.catalog.rates import Rates
from satsgate.store import Payment, PaymentStatus

log = logging.getLogger("satsgate.sessions")

AnySpec = ServiceSpec[Any]
SESSION_SERVICE = "session"  # the service name of a deposit's payments row


class OfferTerms(Protocol):
    """The operator's terms an offer names (satsgate.payments.sessions.SessionConfig)."""

    @property
    def realm(self) -> str: ...
    @property
    def invoice_expiry_s(self) -> int: ...
    @property
    def idle_timeout_s(self) -> int: ...
    @property
    def deposit_multiplier(self) -> int: ...
    @property
    def max_deposit_sat(self) -> int: ...


class DepositNode(Protocol):
    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> CreatedInvoice: ...


class DepositRows(Protocol):
    async def insert(self, payment: Payment) -> None: ...


class SessionOffers:
    """Deposit invoices and their session challenges."""

    def __init__(
        self,
        *,
        config: OfferTerms,
        key: HmacKey,
        node: DepositNode,
        payments: DepositRows,
        rates: Rates,
        budget: ChallengeBudget | None,
    ) -> None:
        self._config = config
        self._key = key
        self._node = node
        self._payments = payments
        self._rates = rates
        # The node's bound on unpaid invoices, shared with the challenger: a deposit
        # invoice takes a slot like the call's challenge it is offered with.
        self._budget = budget

    async def offered_for(self, spec: AnySpec, params: BaseModel) -> SessionChallenge | None:
        """The session challenge (a top-up's deposit) for a 402 of this call, if one can
        be made (:meth:`offered`)."""
        return await self.offered(spec.quote_sats(params, self._rates.book), spec.title)

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
        (an RPC and a row in the node's database, and a good part of the 402's own cost:
        bench/README.md), so a 402 makes it only for a client that wants a session."""
        if not problems.accepts(accept_payment, "lightning", "session"):
            return []
        challenge = await self.offered_for(spec, params)
        return [] if challenge is None else [challenge.header()]
