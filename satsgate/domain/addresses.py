"""The addresses a person is reached at, in the one form the do-not-contact list keys on.

A phone number is ``+<digits>`` (E.164); an e-mail address is lower-cased with an ASCII
(IDNA) domain. The store keys the list's rows by this form; the screen, the operator
routes and the opt-out path normalise with it before they compare or add.
"""

from __future__ import annotations

import re
import unicodedata


def normalise_address(address: str) -> str:
    """The form the list keys on: ``+<digits>`` for a phone number (spaces, dots,
    dashes, brackets and a leading ``00`` removed), else a lower-cased e-mail address
    with an IDNA domain. ValueError for neither."""
    value = unicodedata.normalize("NFKC", address).strip()
    if "@" in value:
        local, _, domain = value.rpartition("@")
        try:
            domain = domain.strip().rstrip(".").encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"{address!r} is not an e-mail address") from None
        if not local or not domain or "." not in domain:
            raise ValueError(f"{address!r} is not an e-mail address")
        return f"{local.strip().lower()}@{domain.lower()}"
    digits = re.sub(r"[\s().\-/]", "", value)
    if digits.startswith("00"):
        digits = "+" + digits[2:]
    if not re.fullmatch(r"\+[1-9][0-9]{6,14}", digits):
        raise ValueError(f"{address!r} is not an E.164 number or an e-mail address")
    return digits
