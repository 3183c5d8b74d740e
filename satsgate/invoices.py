"""BOLT11 encode (sign) and decode, through the ``bolt11`` library.

The one place satsgate touches invoice encoding: the dev node signs with
:func:`sign_invoice`; refunds and tests read invoices with :func:`decode_invoice`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import bolt11
from bolt11.models.features import Feature, Features, FeatureState
from bolt11.models.tags import Tag, TagChar, Tags

# BOLT11 human-readable currency prefixes by network name.
CURRENCY_BY_NETWORK = {"bitcoin": "bc", "testnet": "tb", "signet": "tbs", "regtest": "bcrt"}
NETWORK_BY_CURRENCY = {v: k for k, v in CURRENCY_BY_NETWORK.items()}


class InvalidInvoice(ValueError):
    """The string is not a valid, signed BOLT11 invoice."""


@dataclass(frozen=True)
class DecodedInvoice:
    payment_hash: str
    amount_msat: int | None  # None for an amountless invoice
    created_at: int
    expires_at: int
    network: str
    payee: str  # node pubkey, hex
    description: str

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.expires_at


def sign_invoice(
    *,
    network: str,
    amount_msat: int,
    payment_hash: str,
    payment_secret: str,
    description: str,
    expiry_s: int,
    private_key_hex: str,
    created_at: int | None = None,
) -> str:
    """A BOLT11 invoice for exactly ``amount_msat``, signed by ``private_key_hex``."""
    if amount_msat <= 0:
        raise ValueError("amount_msat must be positive")
    tags = Tags()
    tags.add(TagChar.payment_hash, payment_hash)
    tags.add(TagChar.payment_secret, payment_secret)
    tags.add(TagChar.description, description)
    tags.add(TagChar.expire_time, expiry_s)
    tags.add(TagChar.min_final_cltv_expiry, 18)
    # var_onion_optin and payment_secret, as every current node sets them.
    tags.tags.append(
        Tag(
            TagChar.features,
            Features.from_feature_list(
                {
                    Feature.var_onion_optin: FeatureState.required,
                    Feature.payment_secret: FeatureState.required,
                }
            ),
        )
    )
    invoice = bolt11.Bolt11(
        currency=CURRENCY_BY_NETWORK[network],
        date=int(time.time()) if created_at is None else created_at,
        tags=tags,
        amount_msat=bolt11.MilliSatoshi(amount_msat),
    )
    return str(bolt11.encode(invoice, private_key_hex))


def decode_invoice(bolt11_str: str) -> DecodedInvoice:
    """Decode and check the signature; raises InvalidInvoice on anything malformed."""
    text = bolt11_str.strip()
    if text.lower().startswith("lightning:"):
        text = text[len("lightning:") :]
    try:
        inv = bolt11.decode(text)
    except Exception as exc:  # the library raises many unrelated types
        raise InvalidInvoice(f"not a valid BOLT11 invoice: {exc}") from exc
    network = NETWORK_BY_CURRENCY.get(inv.currency)
    if network is None:
        raise InvalidInvoice(f"unknown currency prefix {inv.currency}")
    return DecodedInvoice(
        payment_hash=inv.payment_hash,
        amount_msat=int(inv.amount_msat) if inv.amount_msat else None,
        created_at=int(inv.date),
        expires_at=int(inv.date) + int(inv.expiry),
        network=network,
        payee=str(inv.payee or ""),
        description=str(inv.description or ""),
    )
