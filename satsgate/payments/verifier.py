"""The verifier: parse a credential and check it, before anything is spent.

In order: the credential decodes; sha256(preimage) equals the payment hash; the
macaroon's HMAC chain verifies under its per-token root key derived from the
server secret (or, for a macaroon minted before keys were derived, under the key
stored with its payment), or the MPP challenge id verifies under the server
secret; the caveats hold (service, expiry). It reads a payment only where the
credential cannot be checked without it, and never writes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from satsgate.edge import json_input
from satsgate.payments import l402, mpp
from satsgate.payments.session_wire import INTENT as SESSION_INTENT
from satsgate.services.base import ServiceSpec
from satsgate.store import Payment

AnySpec = ServiceSpec[Any]
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


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
            if not _signed_by_stored_key(decoded, payment):
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

    def owns(self, values: Sequence[str], payment: Payment) -> bool:
        """The Authorization ``values`` prove ``payment``: one credential that carries,
        beside the preimage of its invoice, something only its payer received over
        HTTPS and checked here as a paid call's is, so that what every node on the
        payment's route learns (hash, amount, preimage) proves nothing:

        - ``L402``/``LSAT``: the macaroon names this payment's hash and token, and its
          HMAC chain verifies under the token's root key (derived, or stored with the
          payment);
        - ``Payment``: the echoed challenge's id verifies under the server secret and
          its request names this payment's hash (a charge's ``methodDetails.paymentHash``,
          a session deposit's or top-up's ``paymentHash``), and the payload carries the
          preimage (``preimage``, or a top-up's ``topUpPreimage``).

        Expiry is not checked: an expired credential was still issued to the payer.
        Never raises on a malformed value (it proves nothing)."""
        return self._names(values, payment, with_preimage=True)

    def issued_for(self, values: Sequence[str], payment: Payment) -> bool:
        """The Authorization ``values`` carry what satsgate issued for ``payment``'s 402
        over HTTPS, with or without a preimage: its macaroon (``L402 <macaroon>``,
        ``L402 <macaroon>:``, or with any preimage), verified as :meth:`owns` verifies
        it, or ``Payment <b64url JSON>`` echoing a challenge issued for its hash (any
        payload). The hand-off of a payment someone else paid (its checkout page) rests
        on this: the agent that got the 402 learns the preimage. Never raises."""
        return self._names(values, payment, with_preimage=False)

    def _names(self, values: Sequence[str], payment: Payment, *, with_preimage: bool) -> bool:
        """:meth:`owns` (``with_preimage``) or :meth:`issued_for`."""
        if len(values) != 1:
            return False
        scheme, _, rest = values[0].strip().partition(" ")
        scheme_l = scheme.lower()
        try:
            if scheme_l in ("l402", "lsat"):
                if with_preimage:
                    cred = l402.parse_credential(rest)
                    if not _preimage_of(payment, cred.preimage):
                        return False
                    raw = cred.macaroon
                else:
                    raw = l402.decode_base64(rest.strip().partition(":")[0])
                return self._macaroon_of(l402.decode_macaroon(raw), payment)
            if scheme_l == "payment":
                doc: Any = json_input.loads(mpp.b64url_decode(rest.strip()))
                if not isinstance(doc, dict) or not self._challenge_names(doc, payment):
                    return False
                return not with_preimage or _payload_preimage(doc, payment)
        except (l402.MalformedCredential, l402.CredentialError, json_input.JsonInputError):
            return False
        return False

    def _macaroon_of(self, decoded: l402.DecodedMacaroon, payment: Payment) -> bool:
        if decoded.payment_hash != payment.payment_hash or decoded.token_id != payment.token_id:
            return False
        derived = self._root_keys.for_token(decoded.identifier[34:])
        return l402.signature_matches(decoded, derived) or _signed_by_stored_key(decoded, payment)

    def _challenge_names(self, doc: dict[str, Any], payment: Payment) -> bool:
        """The echoed challenge in ``doc`` verifies under the server secret and names
        ``payment``'s hash (a charge's, a session deposit's or top-up's)."""
        _, intent, request, _ = mpp.authenticated_challenge(
            doc, secret=self._server_secret, intents=(mpp.INTENT, SESSION_INTENT)
        )
        if intent == SESSION_INTENT:
            named = request.get("paymentHash")
            named = named.lower() if isinstance(named, str) else None
        else:
            named = mpp.charge_payment_hash(request)
        return named == payment.payment_hash


def _payload_preimage(doc: dict[str, Any], payment: Payment) -> bool:
    """A Payment credential's payload carries ``payment``'s preimage (``preimage``, or a
    top-up's ``topUpPreimage``)."""
    payload = doc.get("payload")
    if not isinstance(payload, dict):
        return False
    return any(
        isinstance(payload.get(field), str) and _preimage_of(payment, payload[field])
        for field in ("preimage", "topUpPreimage")
    )


def _preimage_of(payment: Payment, preimage: str) -> bool:
    """``preimage`` (hex) hashes to the payment's hash; compared in constant time."""
    if _HEX64.fullmatch(preimage) is None:
        return False
    digest = hashlib.sha256(bytes.fromhex(preimage)).hexdigest()
    return hmac.compare_digest(digest, payment.payment_hash)


def _signed_by_stored_key(decoded: l402.DecodedMacaroon, payment: Payment) -> bool:
    """The macaroon verifies under the random root key stored with ``payment`` (tokens
    minted before root keys were derived); False when none is stored (a deposit)."""
    return bool(payment.root_key) and l402.signature_matches(
        decoded, bytes.fromhex(payment.root_key)
    )
