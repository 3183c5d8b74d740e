"""HMAC-SHA256 (RFC 2104) on hashlib, for the gate's hot paths.

Why not ``hmac.digest``: with OpenSSL 3 each call looks the digest up again and
builds a fresh HMAC context, several times the cost of one SHA-256 of the same
bytes. A paid L402 call runs five HMACs (the derived root key, the
key generator, the identifier, two caveats) and every 402 runs them again to
mint. Here a key's padded inner and outer states are hashed once
(:class:`HmacKey`, for the long-lived keys) or the pads are built with one
``bytes.translate`` each (:func:`hmac_sha256`, for the per-token chain keys).
``tests/payments/test_gate_primitives.py`` holds both to the standard library's ``hmac``.
"""

from __future__ import annotations

import hashlib

_BLOCK = 64  # SHA-256 block size, bytes
_OUTER_PAD = bytes(x ^ 0x5C for x in range(256))
_INNER_PAD = bytes(x ^ 0x36 for x in range(256))


def _block_key(key: bytes) -> bytes:
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    return key.ljust(_BLOCK, b"\x00")


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256(key, message), 32 bytes."""
    block = _block_key(key)
    inner = hashlib.sha256(block.translate(_INNER_PAD) + message).digest()
    return hashlib.sha256(block.translate(_OUTER_PAD) + inner).digest()


class HmacKey:
    """HMAC-SHA256 under one fixed key; its padded states are hashed once."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        block = _block_key(key)
        self._inner = hashlib.sha256(block.translate(_INNER_PAD))
        self._outer = hashlib.sha256(block.translate(_OUTER_PAD))

    def digest(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()
