"""Who may act on a payment besides spending it: refund it, see its refund secrets.

A payment created by an HTTP 402 challenge (``via = 'http'``) is the payer's once they
hold its preimage: the proof of payment, which only whoever paid the invoice learns.
Its paymentId proves nothing (it is in the 402 body, and earlier in checkout links and
logs). A payment created by MCP ``create_payment`` (``via = 'mcp'``) is its MCP caller's
handle by the spec's design: there the paymentId itself is the proof.

The preimage comes as a field (``preimage``, 64 hex) or inside the credential the call
was paid with (``Authorization: L402 <macaroon>:<preimage>`` or ``Payment <b64url JSON>``
with ``payload.preimage``): for this check the preimage alone matters, so an expired MPP
challenge still proves its payment.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any

from satsgate import json_input
from satsgate.payments import l402, mpp
from satsgate.store import Payment

_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


def preimage_proves(payment: Payment, preimage: str | None) -> bool:
    """``preimage`` is the preimage of the payment's invoice."""
    if preimage is None or not _HEX64.match(preimage):
        return False
    digest = hashlib.sha256(bytes.fromhex(preimage)).hexdigest()
    return hmac.compare_digest(digest, payment.payment_hash)


def preimage_of(authorization: Sequence[str]) -> str | None:
    """The preimage inside one L402 or Payment credential, unchecked; None if none."""
    if len(authorization) != 1:
        return None
    scheme, _, rest = authorization[0].strip().partition(" ")
    scheme_l = scheme.lower()
    try:
        if scheme_l in ("l402", "lsat"):
            return l402.parse_credential(rest).preimage
        if scheme_l == "payment":
            doc: Any = json_input.loads(mpp.b64url_decode(rest.strip()))
            payload = doc.get("payload") if isinstance(doc, dict) else None
            preimage = payload.get("preimage") if isinstance(payload, dict) else None
            return preimage if isinstance(preimage, str) else None
    except (l402.MalformedCredential, l402.CredentialError, json_input.JsonInputError, ValueError):
        return None
    return None


def proves(
    payment: Payment,
    *,
    preimage: str | None = None,
    authorization: Sequence[str] = (),
    payment_id: str | None = None,
) -> bool:
    """The caller showed it owns ``payment``: its preimage (given, or in its credential),
    or, for a payment created through MCP only, its paymentId."""
    if (
        payment.via == "mcp"
        and payment_id is not None
        and hmac.compare_digest(payment_id, payment.payment_id)
    ):
        return True
    if preimage_proves(payment, preimage):
        return True
    return preimage_proves(payment, preimage_of(authorization))


# The refund object's fields that claim it: shown only to whoever proves the payment.
_REFUND_SECRETS = ("lnurl_withdraw", "refund_secret", "recover_url")
PROOF_HINT = (
    "The refund link is shown to the payer only: poll with the Authorization header the "
    "call was paid with (or, for a payment made with create_payment, its paymentId)."
)


def without_refund_secrets(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its refund object (if any) stripped of what claims it."""
    refund = body.get("refund")
    if not isinstance(refund, dict):
        return body
    public = {k: v for k, v in refund.items() if k not in _REFUND_SECRETS}
    return {**body, "refund": {**public, "claim": PROOF_HINT}}
