"""The verifier: parse a credential and check it, before anything is spent.

In order: the credential decodes; sha256(preimage) equals the payment hash; the
macaroon's HMAC chain verifies under its per-token root key derived from the
server secret (or, for a macaroon minted before keys were derived, under the key
stored with its payment), or the MPP challenge id verifies under the server
secret; the caveats hold (service, expiry). It reads a payment only where the
credential cannot be checked without it, and never writes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from satsgate.payments import l402, mpp
from satsgate.services.base import ServiceSpec
from satsgate.store import Payment

AnySpec = ServiceSpec[Any]


class PaymentsByHash(Protocol):
    """Read access to payments by their invoice's hash (the store's payments repository)."""

    async def get_by_hash(self, payment_hash: str) -> Payment | None:
        """The payment of this invoice, or None."""
        ...


@dataclass(frozen=True)
class Verified:
    """A credential that verified. ``payment`` is None when the macaroon verified
    under its derived root key: the row is then read by the spend itself (one
    statement), see :meth:`satsgate.payments.spender.Spender.execute_credential`."""

    payment_hash: str
    scheme: str  # "L402" or "Payment"
    payment: Payment | None = None
    token_id: str = ""
    mpp_challenge_id: str | None = None


class Verifier:
    def __init__(
        self, *, payments: PaymentsByHash, root_keys: l402.RootKeys, server_secret: str
    ) -> None:
        self._payments = payments
        self._root_keys = root_keys
        self._server_secret = server_secret

    async def verify_authorization(self, values: list[str], spec: AnySpec) -> Verified:
        """Verify one Authorization header; raises MalformedCredential / CredentialError."""
        if len(values) != 1:
            raise l402.MalformedCredential("send exactly one Authorization header")
        scheme, _, rest = values[0].strip().partition(" ")
        scheme_l = scheme.lower()
        if scheme_l in ("l402", "lsat"):
            cred = l402.parse_credential(rest)
            decoded = l402.decode_macaroon(cred.macaroon)
            l402.check_preimage(decoded.payment_hash, cred.preimage)
            now = int(time.time())
            if l402.signature_matches(decoded, self._root_keys.for_token(decoded.identifier[34:])):
                l402.check_caveats(decoded, spec.slug, now)
                return Verified(decoded.payment_hash, "L402", token_id=decoded.token_id)
            # Not under a derived key: a macaroon minted with a stored random root key.
            payment = await self._payments.get_by_hash(decoded.payment_hash)
            if payment is None or payment.token_id != decoded.token_id:
                raise l402.CredentialError("unknown or revoked macaroon")
            if not l402.signature_matches(decoded, bytes.fromhex(payment.root_key)):
                raise l402.CredentialError("the macaroon signature does not verify")
            l402.check_caveats(decoded, spec.slug, now)
            return Verified(payment.payment_hash, "L402", payment, payment.token_id)
        if scheme_l == "payment":
            mcred = mpp.parse_credential(rest, secret=self._server_secret)
            l402.check_preimage(mcred.payment_hash, mcred.preimage)
            payment = await self._payments.get_by_hash(mcred.payment_hash)
            if payment is None:
                raise mpp.InvalidChallenge("unknown payment")
            if payment.service != spec.slug:
                raise mpp.InvalidChallenge(
                    f"this credential was issued for {payment.service}, not {spec.slug}"
                )
            return Verified(
                payment.payment_hash, "Payment", payment, mpp_challenge_id=mcred.challenge_id
            )
        raise l402.MalformedCredential(f"unsupported authorization scheme {scheme!r}")
