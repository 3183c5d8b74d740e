"""The gate's HMAC-SHA256 against the standard library's, on any key and message."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

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
