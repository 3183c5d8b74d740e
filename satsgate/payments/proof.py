"""Who may act on a payment besides spending it: refund it, see its refund secrets.

Every node on a Lightning payment's route learns its payment hash, its amount and,
before the payer does, its preimage; a payment's paymentId is no secret either (it is
in the 402 body, a session deposit's is ``dep_<payment hash>``). So none of these,
alone or together, proves a payment. A payment created by an HTTP 402 challenge
(``via = 'http'``: L402/MPP charges, session deposits and top-ups) is proven by the
credential its payer was issued over HTTPS, checked as a paid call's is
(:meth:`satsgate.payments.verifier.Verifier.owns`): ``L402 <macaroon>:<preimage>``
with a macaroon that verifies for this payment, or ``Payment <b64url JSON>`` echoing a
challenge this server issued for this payment's hash, with its preimage. An expired
credential still proves its payment (it was issued to the payer). A payment created
by MCP ``create_payment`` (``via = 'mcp'``) is its MCP caller's handle by the spec's
design: there the paymentId (``pay_`` and 32 random hex, handed to that caller only)
is the proof as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from satsgate.constant_time import texts_equal
from satsgate.store import Payment


class Owners(Protocol):
    """Checks a credential against a payment (the gate's verifier)."""

    def owns(self, values: Sequence[str], payment: Payment) -> bool: ...


def proves(
    owners: Owners,
    payment: Payment,
    *,
    authorization: Sequence[str] = (),
    payment_id: str | None = None,
) -> bool:
    """The caller showed it owns ``payment``: the credential it was paid with
    (``authorization``: an Authorization value, as sent), or, for a payment created
    through MCP only, its paymentId."""
    if (
        payment.via == "mcp"
        and payment_id is not None
        and texts_equal(payment_id, payment.payment_id)
    ):
        return True
    return owners.owns(authorization, payment)


_NOT_ALONE = "the preimage alone proves nothing (every node on the payment's route learns it)"
# Where each face takes the credential that proves an HTTP 402 payment (for messages).
SEND_AUTHORIZATION = (
    "Send the credential it was paid with as the Authorization header "
    "('L402 <macaroon>:<preimage>' or 'Payment <base64url JSON>'); " + _NOT_ALONE + "."
)
SEND_CREDENTIAL = (
    "Send the credential it was paid with as credential (the Authorization value "
    "'L402 <macaroon>:<preimage>' or 'Payment <base64url JSON>'); " + _NOT_ALONE + "."
)


def refuse_bare_preimage(data: Any, send: str) -> Any:
    """A params model's before-validator: a body with ``preimage`` (once the proof of an
    HTTP payment) is refused, naming what to ``send`` instead."""
    if isinstance(data, dict) and "preimage" in data:
        raise ValueError(f"preimage is not accepted: {send}")
    return data
