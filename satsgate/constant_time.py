"""Comparing secrets a client sends with the ones satsgate expects."""

from __future__ import annotations

import hmac


def texts_equal(given: str, expected: str) -> bool:
    """Whether ``given`` equals ``expected``, in time that does not depend on where they
    differ. Any text compares: ``hmac.compare_digest`` raises TypeError on a ``str``
    beyond ASCII, and a client's text can be anything (a 500 where a refusal belongs)."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )
