"""The screen's rules (first cut; the full multilingual table follows)."""

from __future__ import annotations

import re
import unicodedata


def normalise(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return re.sub(r"\s+", " ", plain).strip()


_STOP = re.compile(r"^\s*(stop|unsubscribe|stopp|arret|arrete|baja|pare|parar)\s*[.!]*\s*$")


def check_text(text: str, sender_name: str | None = None) -> tuple[str, ...]:
    """Labels of what the text is flagged for; () when it passes."""
    plain = normalise(f"{sender_name or ''} {text}")
    reasons: list[str] = []
    if re.search(r"\b(verification code|one[- ]time (pass)?code|seed phrase|your pin)\b", plain):
        reasons.append("credential:code")
    return tuple(reasons)


def asks_to_stop(text: str) -> bool:
    plain = normalise(text)
    return bool(_STOP.match(plain)) or "don't call me again" in plain
