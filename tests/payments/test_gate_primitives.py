"""The gate's hot-path primitives against the standard library: HMAC-SHA256 on any
key and message, and the MPP expiry's RFC 3339 time."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

from satsgate.payments import mpp
from satsgate.payments.hmac_sha256 import HmacKey, hmac_sha256

# Keys around and beyond the 64-byte block (longer keys are hashed first).
keys = st.binary(min_size=0, max_size=200)
messages = st.binary(min_size=0, max_size=300)


@given(keys, messages)
def test_hmac_sha256_equals_the_standard_library(key: bytes, message: bytes) -> None:
    assert hmac_sha256(key, message) == hmac.digest(key, message, "sha256")


@given(keys, st.lists(messages, min_size=1, max_size=4))
def test_a_fixed_key_gives_the_same_digest_every_time(key: bytes, batch: list[bytes]) -> None:
    fixed = HmacKey(key)
    for message in batch:  # its precomputed states must not be consumed by a digest
        assert fixed.digest(message) == hmac.new(key, message, hashlib.sha256).digest()


def test_rfc_4231_case_2() -> None:
    digest = hmac_sha256(b"Jefe", b"what do ya want for nothing?")
    assert digest.hex() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert HmacKey(b"Jefe").digest(b"what do ya want for nothing?") == digest


@given(st.integers(min_value=0, max_value=253402300799))  # up to 9999-12-31T23:59:59Z
def test_mpp_expiry_times_round_trip(unix_s: int) -> None:
    """The 402's RFC 3339 expiry (formatted with time.gmtime) reads back to the second."""
    text = mpp.rfc3339(unix_s)
    assert len(text) == 20 and text.endswith("Z")
    assert mpp.parse_rfc3339(text) == unix_s
