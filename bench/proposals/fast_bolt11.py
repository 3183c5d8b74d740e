"""Proposal: a drop-in ``satsgate.invoices.sign_invoice`` without bitstring (~20x faster).

(Adopted: satsgate commit d29d740 moved this into ``satsgate/invoices.py``; the
experiment of the same name is now a no-op kept for comparisons with older trees.)

The ``bolt11`` library encodes through ``bitstring`` objects, one slice per
5-bit group, and derives the public key from the secret on every call; the dev
node spends ~3-8 ms per invoice there, which caps the 402 path (one dev-node
thread, the GIL). This builds the same bits with Python ints, keeps one
``coincurve.PrivateKey`` per key, signs the same message (RFC 6979, so the
signature is deterministic) and adds the bech32 checksum with a lookup table: the output is
the same string, byte for byte (``python bench/proposals/fast_bolt11.py`` checks
it against the library on random invoices).
"""

from __future__ import annotations

import functools
import secrets
import sys
import time

import coincurve
from bolt11.models.features import Feature, Features, FeatureState
from bolt11.utils import msat_to_amount

from satsgate.invoices import CURRENCY_BY_NETWORK

# BOLT11 tag types (5-bit values of the bech32 characters).
_P, _S, _D, _X, _C, _9 = 1, 16, 13, 6, 24, 5


def _feature_bits() -> tuple[int, int]:
    data = Features.from_feature_list(
        {
            Feature.var_onion_optin: FeatureState.required,
            Feature.payment_secret: FeatureState.required,
        }
    ).data
    return data.uint, data.len


_FEATURES = _feature_bits()


@functools.lru_cache(maxsize=8)
def _key(private_key_hex: str) -> coincurve.PrivateKey:
    return coincurve.PrivateKey(bytes.fromhex(private_key_hex))


class _Bits:
    __slots__ = ("length", "value")

    def __init__(self) -> None:
        self.value = 0
        self.length = 0

    def add(self, value: int, length: int) -> None:
        self.value = (self.value << length) | value
        self.length += length

    def tagged(self, tag: int, value: int, length: int) -> None:
        pad = -length % 5  # zero bits at the end, up to a whole 5-bit group
        groups = (length + pad) // 5
        self.add((tag << 10) | groups, 15)
        self.add(value << pad, length + pad)

    def tagged_bytes(self, tag: int, data: bytes) -> None:
        self.tagged(tag, int.from_bytes(data, "big"), 8 * len(data))

    def tagged_int(self, tag: int, value: int) -> None:
        groups = -(-value.bit_length() // 5)  # as few 5-bit groups as hold it
        self.tagged(tag, value, 5 * groups)


def _u5(value: int, length: int) -> list[int]:
    return [(value >> shift) & 31 for shift in range(length - 5, -1, -5)]


_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GEN = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
# The five generator XORs for each value of the top 5 bits, folded into one lookup.
_TABLE = tuple(
    functools.reduce(lambda acc, i: acc ^ (_GEN[i] if top >> i & 1 else 0), range(5), 0)
    for top in range(32)
)


def _bech32(hrp: str, data: list[int]) -> str:
    """BIP 173 bech32 (the same checksum as the ``bech32`` package, table-driven)."""
    chk = 1
    for v in [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp] + data:
        chk = ((chk & 0x1FFFFFF) << 5) ^ v ^ _TABLE[chk >> 25]
    for _ in range(6):
        chk = ((chk & 0x1FFFFFF) << 5) ^ _TABLE[chk >> 25]
    chk ^= 1
    checksum = [(chk >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[d] for d in data + checksum)


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
    """Same contract and output as ``satsgate.invoices.sign_invoice``."""
    if amount_msat <= 0:
        raise ValueError("amount_msat must be positive")
    hrp = "ln" + CURRENCY_BY_NETWORK[network] + msat_to_amount(amount_msat)
    bits = _Bits()
    bits.add(int(time.time()) if created_at is None else created_at, 35)
    bits.tagged_bytes(_P, bytes.fromhex(payment_hash))
    bits.tagged_bytes(_S, bytes.fromhex(payment_secret))
    bits.tagged_bytes(_D, description.encode())
    bits.tagged_int(_X, expiry_s)
    bits.tagged_int(_C, 18)
    bits.tagged(_9, *_FEATURES)
    pad = -bits.length % 8
    signing_data = (bits.value << pad).to_bytes((bits.length + pad) // 8, "big")
    signature = _key(private_key_hex).sign_recoverable(hrp.encode() + signing_data)
    bits.add(int.from_bytes(signature, "big"), 8 * len(signature))
    return _bech32(hrp, _u5(bits.value, bits.length))


def library_sign(
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
    """The reference: what ``sign_invoice`` did through the ``bolt11`` library."""
    import bolt11
    from bolt11.models.tags import Tag, TagChar, Tags

    tags = Tags()
    tags.add(TagChar.payment_hash, payment_hash)
    tags.add(TagChar.payment_secret, payment_secret)
    tags.add(TagChar.description, description)
    tags.add(TagChar.expire_time, expiry_s)
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
    invoice = bolt11.Bolt11(
        currency=CURRENCY_BY_NETWORK[network],
        date=int(time.time()) if created_at is None else created_at,
        tags=tags,
        amount_msat=bolt11.MilliSatoshi(amount_msat),
    )
    return str(bolt11.encode(invoice, private_key_hex))


def _self_test(count: int = 200) -> None:
    from satsgate.invoices import decode_invoice

    key = secrets.token_hex(32)
    slow = fast = 0.0
    for i in range(count):
        kwargs = {
            "network": ("regtest", "bitcoin", "testnet", "signet")[i % 4],
            "amount_msat": secrets.randbelow(10**12) + 1 if i % 3 else 1000 * (i + 1),
            "payment_hash": secrets.token_hex(32),
            "payment_secret": secrets.token_hex(32),
            "description": "satsgate: " + "é✓x" * (i % 40),
            "expiry_s": (600, 1, 3600, 86400 * 30, 31)[i % 5],
            "private_key_hex": key,
            "created_at": 1_700_000_000 + i,
        }
        t0 = time.perf_counter()
        want = library_sign(**kwargs)
        t1 = time.perf_counter()
        got = sign_invoice(**kwargs)
        t2 = time.perf_counter()
        slow, fast = slow + t1 - t0, fast + t2 - t1
        if got != want:
            raise SystemExit(f"MISMATCH for {kwargs}:\n{want}\n{got}")
        decode_invoice(got)  # and it decodes, signature checked
    print(
        f"{count} invoices identical; library {slow / count * 1e3:.3f} ms,"
        f" this {fast / count * 1e3:.3f} ms per invoice"
    )


if __name__ == "__main__":
    _self_test(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
