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

from satsgate.lightning.invoices import (
    RefusedPayoutInvoice,
    decode_invoice,
    payout_invoice,
    sign_invoice,
)


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


def _invoice(network: str = "regtest", amount_msat: int = 21_000, expiry_s: int = 600) -> str:
    return sign_invoice(
        network=network,
        amount_msat=amount_msat,
        payment_hash=secrets.token_hex(32),
        payment_secret=secrets.token_hex(32),
        description="payout",
        expiry_s=expiry_s,
        private_key_hex=secrets.token_hex(32),
    )


def test_payout_invoice_names_the_rule_each_refusal_broke() -> None:
    good = _invoice()
    decoded = payout_invoice(good, amount_msat=21_000, network="regtest")
    assert decoded.amount_msat == 21_000
    refusals = [
        ("lnbcrt1garbage", 21_000, "regtest", 0, "decoding", "is not a valid BOLT11 invoice"),
        (good, 20_000, "regtest", 0, "amount", "must be for exactly 20000 msat (20 sat)"),
        (good, 20_001, "regtest", 0, "amount", "must be for exactly 20001 msat"),
        (good, None, "regtest", 0, "amount", "must carry no amount"),
        (_invoice(amount_msat=0), 21_000, "regtest", 0, "amount", "must be for exactly"),
        (good, 21_000, "bitcoin", 0, "network", "is not for bitcoin"),
        # Bech32 is one case: a node would refuse to pay a mixed one.
        (good[:10] + good[10:].upper(), 21_000, "regtest", 0, "decoding", "is not a valid"),
        (_invoice(expiry_s=2**40), 21_000, "regtest", 0, "decoding", "is not a valid"),
        (_invoice(expiry_s=1), 21_000, "regtest", 0, "expiry", None),
        (good, 21_000, "regtest", 900, "expiry", "expires within 900 s"),
    ]
    time.sleep(1.1)  # the one-second invoice is past its expiry
    for bolt11_text, amount, network, valid_for_s, check, reason in refusals:
        try:
            payout_invoice(
                bolt11_text, amount_msat=amount, network=network, valid_for_s=valid_for_s
            )
        except RefusedPayoutInvoice as refused:
            assert refused.check == check
            assert str(refused).startswith(reason or "has expired")
        else:
            raise AssertionError(f"{check} refusal not raised for {reason}")
    amountless = _invoice(amount_msat=0)
    assert payout_invoice(amountless, amount_msat=None, network="regtest").amount_msat is None
