"""The challenger: quote a call, issue its invoice, and answer with the challenge.

Nothing here spends or charges: a 402 costs the caller nothing. The payment is
stored as unpaid with the invoice; its macaroon (L402) and MPP challenge are
derived from the stored row, so the same payment always gets the same challenge.

The hosted checkout link carries a token of its own, never the paymentId (which
spends an MCP payment): ``ck_`` + the invoice's payment hash (public in the invoice
anyway) + a MAC of it under the server secret (:meth:`Challenger.checkout_token`), so
only satsgate mints one and it names its payment without a column or a lookup table.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from satsgate.domain.do_not_contact import OptOuts
from satsgate.edge.ratelimit import ChallengeBudget, admit_challenge
from satsgate.engines import Engines
from satsgate.errors import ApiError, ErrorCode, invalid_params
from satsgate.lightning.backend import BackendError, CreatedInvoice
from satsgate.payments import l402, mpp
from satsgate.services.base import PrecheckMemo, ServiceSpec, request_digest
from satsgate.services.catalog.rates import RateBook, Rates
from satsgate.store import Payment, PaymentStatus

log = logging.getLogger(__name__)

# Seconds of checking an unpaid request may take (decoding and measuring its files).
PREVALIDATE_BUDGET_S = 20.0

AnySpec = ServiceSpec[Any]


class InvoiceIssuer(Protocol):
    """The Lightning node, as far as issuing invoices goes."""

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> CreatedInvoice:
        """An invoice for exactly ``amount_msat``."""
        ...


class HoldIssuer(Protocol):
    """Hold invoices (see :mod:`satsgate.payments.holds`): issued with a kept preimage."""

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> tuple[CreatedInvoice, str]: ...

    async def insert(self, payment: Payment, preimage: str) -> None: ...


class UnpaidPayments(Protocol):
    """Where a new payment is recorded (the store's payments repository)."""

    async def insert(self, payment: Payment) -> None:
        """Record a new payment; returns once it is committed."""
        ...


@dataclass(frozen=True)
class Challenge:
    """What a client needs to pay for one call."""

    payment: Payment
    macaroon_b64: str
    mpp: mpp.Challenge
    checkout_token: str

    @property
    def amount_sats(self) -> int:
        return self.payment.amount_msat // 1000

    def www_authenticate(self) -> list[str]:
        return [*l402.challenge_headers(self.macaroon_b64, self.payment.bolt11), self.mpp.header()]

    def body_fields(self, base_url: str) -> dict[str, Any]:
        return {
            "paymentId": self.payment.payment_id,
            "invoice": self.payment.bolt11,
            "lightningInvoice": self.payment.bolt11,
            "paymentHash": self.payment.payment_hash,
            "macaroon": self.macaroon_b64,
            "amountSats": self.amount_sats,
            "expiresAt": mpp.rfc3339(self.payment.expires_at),
            "service": self.payment.service,
            "hostedCheckoutUrl": f"{base_url}/checkout/{self.checkout_token}",
        }


_CHECKOUT_TOKEN = re.compile(r"^ck_([0-9a-f]{64})([0-9a-f]{32})$")


def validate_params(spec: AnySpec, body: Any, book: RateBook) -> BaseModel:
    """Schema check before any invoice against the app's rate ``book`` (its destination
    table serves or refuses a number: ServiceSpec.parse): L402_INVALID_PARAMS lists every
    bad field."""
    if not isinstance(body, dict):
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            "The request body must be a JSON object.",
            example=_example(spec),
        )
    try:
        params: BaseModel = spec.parse(body, book)
    except ValidationError as exc:
        raise invalid_params(exc, example=_example(spec)) from None
    return params


def _example(spec: AnySpec) -> str:
    return mpp.canonical_json(dict(spec.example)) if spec.example else ""


def realm_of(public_base_url: str) -> str:
    """The MPP realm: the host (and port) of the public address."""
    return public_base_url.split("://", 1)[-1].split("/", 1)[0]


class Challenger:
    """Quotes, invoices and challenges. ``engines`` says which services (and models)
    this node can run; a credential stays valid ``credential_ttl_s`` past its invoice's
    expiry; the MPP challenge is bound to ``server_secret``, ``network`` and the realm
    of ``public_base_url``."""

    def __init__(
        self,
        *,
        node: InvoiceIssuer,
        payments: UnpaidPayments,
        engines: Engines,
        root_keys: l402.RootKeys,
        server_secret: str,
        network: str,
        public_base_url: str,
        invoice_expiry_s: int,
        credential_ttl_s: int,
        holds: HoldIssuer | None = None,
        opt_outs: OptOuts | None = None,
        budget: ChallengeBudget | None = None,
        rates: Rates | None = None,
        prechecks: PrecheckMemo | None = None,
    ) -> None:
        self._node = node
        # The node's bound on unpaid challenges outstanding (any client address).
        self._budget = budget
        # The app's BTC rate book: quotes of BTC-pegged prices (the fallback without one).
        self._rates = rates if rates is not None else Rates()
        # The app's memo of deterministic checks before any invoice (ServiceSpec.prevalidate).
        self._prechecks = prechecks if prechecks is not None else PrecheckMemo()
        self._opt_outs = opt_outs  # the do-not-contact list (ServiceSpec.recipients)
        # With hold invoices on, payments of the paymentId flow (MCP) are hold invoices:
        # L402/MPP need the preimage at payment time, which a held HTLC never gives.
        self._holds = holds
        self._payments = payments
        self._engines = engines
        self._root_keys = root_keys
        self._server_secret = server_secret
        self._network = network
        self._realm = realm_of(public_base_url)
        self._public_base_url = public_base_url
        self._invoice_expiry_s = invoice_expiry_s
        self._credential_ttl_s = credential_ttl_s

    def ensure_available(self, spec: AnySpec, params: BaseModel | None = None) -> None:
        """Refuse, before any invoice, a service (or a model) no engine serves here."""
        reason = spec.unavailable_reason(self._engines, params)
        if reason is not None:
            raise ApiError(ErrorCode.SERVICE_UNAVAILABLE, f"{reason}; nothing was charged.")

    def validate_params(self, spec: AnySpec, body: Any) -> BaseModel:
        """:func:`validate_params` against this app's rate book (its destinations)."""
        return validate_params(spec, body, self._rates.book)

    async def prevalidate(self, spec: AnySpec, params: BaseModel) -> None:
        """Checks beyond the schema, before any invoice (e.g. a PDF that must parse),
        and that an engine serves the model the request chose. Unpaid work has a time
        budget: a request whose files take longer to check is refused (the check itself,
        bounded by the service's size caps, ends on its own in its thread)."""
        self.ensure_available(spec, params)
        try:
            # In this task (no task of its own, as wait_for would make per call).
            async with asyncio.timeout(PREVALIDATE_BUDGET_S):
                await spec.prevalidate(params, self._prechecks)
        except TimeoutError:
            raise ApiError(
                ErrorCode.L402_INVALID_PARAMS,
                f"Invalid parameters: (body): the files took longer than "
                f"{PREVALIDATE_BUDGET_S:g} s to check before payment; send smaller ones. "
                "Nothing was charged.",
            ) from None
        if spec.recipients is not None and self._opt_outs is not None:
            opted = await self._opt_outs.opted_out(spec.recipients(params))
            if opted:
                raise ApiError(
                    ErrorCode.RECIPIENT_OPTED_OUT,
                    f"{len(opted)} recipient(s) asked not to be contacted: "
                    f"{', '.join(opted)}; nothing was charged.",
                    extra={"recipients": list(opted)},
                )

    async def create_payment(
        self,
        spec: AnySpec,
        *,
        amount_sats: int,
        digest: str,
        via: str,
    ) -> Challenge:
        """Create the invoice and store the payment as unpaid; nothing else is charged.
        RATE_LIMITED, before any invoice, when the client being answered is past its
        challenge limit (``challenge_rate_per_min``: every invoice for an unpaid request
        is made here or in ``Sessions.offered``, and both ask :func:`admit_challenge`) or
        the node's unpaid invoices are at their cap (``max_unpaid_challenges``)."""
        admit_challenge()
        if self._budget is None:
            return await self._create_payment(spec, amount_sats, digest, via)
        async with self._budget.issuing():
            return await self._create_payment(spec, amount_sats, digest, via)

    async def _create_payment(
        self, spec: AnySpec, amount_sats: int, digest: str, via: str
    ) -> Challenge:
        amount_msat = amount_sats * 1000
        description = f"satsgate: {spec.title} ({amount_sats} sat)"
        hold = self._holds is not None and via == "mcp"
        preimage = ""
        try:
            if self._holds is not None and hold:
                invoice, preimage = await self._holds.create_invoice(
                    amount_msat, description, self._invoice_expiry_s
                )
            else:
                invoice = await self._node.create_invoice(
                    amount_msat, description, self._invoice_expiry_s
                )
        except (BackendError, OSError) as exc:
            log.error("invoice creation failed: %s", exc)
            raise ApiError(
                ErrorCode.SERVICE_ERROR,
                "The Lightning node could not create an invoice; nothing was charged.",
            ) from exc
        now = int(time.time())
        token_id = secrets.token_bytes(32)
        payment = Payment(
            payment_id=f"pay_{secrets.token_hex(16)}",
            payment_hash=invoice.payment_hash,
            bolt11=invoice.bolt11,
            service=spec.slug,
            amount_msat=amount_msat,
            status=PaymentStatus.UNPAID,
            created_at=now,
            expires_at=invoice.expires_at,
            paid_at=None,
            spent_at=None,
            root_key=self._root_keys.for_token(token_id).hex(),  # per-token macaroon root key
            token_id=token_id.hex(),
            request_digest=digest,
            description=description,
            via=via,
            mode="hold" if hold else "invoice",
        )
        if self._holds is not None and hold:
            await self._holds.insert(payment, preimage)
        else:
            await self._payments.insert(payment)
        return self.challenge_of(payment)

    def challenge_of(self, payment: Payment) -> Challenge:
        """The challenge for a stored payment: the same macaroon and invoice every time."""
        token = l402.mint(
            payment.payment_hash,
            payment.service,
            payment.expires_at + self._credential_ttl_s,
            bytes.fromhex(payment.root_key),
            bytes.fromhex(payment.token_id),
        )
        challenge = mpp.make_challenge(
            secret=self._server_secret,
            realm=self._realm,
            amount_sats=payment.amount_msat // 1000,
            bolt11=payment.bolt11,
            payment_hash=payment.payment_hash,
            network=self._network,
            expires_at=payment.expires_at,
            description=payment.description,
        )
        return Challenge(payment, token.macaroon_b64, challenge, self.checkout_token(payment))

    def checkout_token(self, payment: Payment) -> str:
        """The hosted checkout page's token for ``payment`` (see the module docstring)."""
        return f"ck_{payment.payment_hash}{self._checkout_mac(payment.payment_hash)}"

    def checkout_url(self, payment: Payment) -> str:
        return f"{self._public_base_url}/checkout/{self.checkout_token(payment)}"

    def checkout_payment_hash(self, token: str) -> str | None:
        """The payment hash a checkout token names, or None for a token satsgate did not
        mint."""
        match = _CHECKOUT_TOKEN.match(token)
        if match is None or not hmac.compare_digest(match[2], self._checkout_mac(match[1])):
            return None
        return match[1]

    def _checkout_mac(self, payment_hash: str) -> str:
        key = self._server_secret.encode()
        return hmac.new(key, f"checkout\n{payment_hash}".encode(), hashlib.sha256).hexdigest()[:32]

    def quote_sats(self, spec: AnySpec, params: BaseModel) -> int:
        """What ``params`` cost now: the invoice amount at the app's current rate book."""
        return spec.quote_sats(params, self._rates.book)

    async def challenge_for(self, spec: AnySpec, params: BaseModel, via: str) -> Challenge:
        """Quote ``params`` and issue its invoice: the 402 of one call."""
        return await self.create_payment(
            spec,
            amount_sats=self.quote_sats(spec, params),
            digest=request_digest(spec.slug, params),
            via=via,
        )
