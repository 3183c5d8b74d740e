"""BOLT11 signing: byte-identical to the bolt11 library's encoder, and decodable."""

from __future__ import annotations

import hashlib
import secrets
import time

import bolt11
import coincurve
from bolt11.models.features import Feature, Features, FeatureState
from bolt11.models.tags import Tag, TagChar, Tags
from pyln.proto.invoice import Invoice as PylnInvoice

from satsgate.lightning.invoices import decode_invoice, sign_invoice


def library_sign(**kw: object) -> str:
    """The reference: the same invoice built and signed by the bolt11 library."""
    tags = Tags()
    tags.add(TagChar.payment_hash, kw["payment_hash"])
    tags.add(TagChar.payment_secret, kw["payment_secret"])
    tags.add(TagChar.description, kw["description"])
    tags.add(TagChar.expire_time, kw["expiry_s"])
    tags.add(TagChar.min_final_cltv_expiry, 18)
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
    currency = {"bitcoin": "bc", "testnet": "tb", "signet": "tbs", "regtest": "bcrt"}
    invoice = bolt11.Bolt11(
        currency=currency[str(kw["network"])],
        date=int(str(kw["created_at"])),
        tags=tags,
        amount_msat=bolt11.MilliSatoshi(int(str(kw["amount_msat"]))),
    )
    return str(bolt11.encode(invoice, str(kw["private_key_hex"])))


def test_identical_to_the_library_on_random_invoices() -> None:
    key = secrets.token_hex(32)
    for i in range(60):
        kw: dict[str, object] = {
            "network": ("regtest", "bitcoin", "testnet", "signet")[i % 4],
            "amount_msat": secrets.randbelow(10**12) + 1 if i % 3 else 1000 * (i + 1),
            "payment_hash": secrets.token_hex(32),
            "payment_secret": secrets.token_hex(32),
            "description": "satsgate: " + "é✓x" * (i % 40),
            "expiry_s": (600, 1, 3600, 86400 * 30, 31)[i % 5],
            "private_key_hex": key,
            "created_at": 1_700_000_000 + i,
        }
        assert sign_invoice(**kw) == library_sign(**kw)  # type: ignore[arg-type]


def test_decodes_with_two_independent_decoders() -> None:
    key = coincurve.PrivateKey()
    preimage = secrets.token_bytes(32)
    text = sign_invoice(
        network="regtest",
        amount_msat=5_000,
        payment_hash=hashlib.sha256(preimage).hexdigest(),
        payment_secret=secrets.token_hex(32),
        description="render-card",
        expiry_s=600,
        private_key_hex=key.secret.hex(),
    )
    ours = decode_invoice(text)
    assert ours.amount_msat == 5_000 and ours.network == "regtest"
    assert ours.payee == key.public_key.format().hex()
    assert abs(ours.expires_at - (time.time() + 600)) < 5
    other = PylnInvoice.decode(text)
    assert other.paymenthash == hashlib.sha256(preimage).digest()
    assert other.pubkey.format() == key.public_key.format()
