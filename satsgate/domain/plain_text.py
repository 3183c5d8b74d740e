"""The plain form of a message text that phrase rules match against.

Case-folded, accents removed, leetspeak inside words undone (``p4ssw0rd`` ->
``password``), letters spaced out to dodge a filter joined again (``p a s s w o r d``),
punctuation turned into spaces (sentence ends kept as `` . ``), one space between words.
Used by the screen's rules (:mod:`satsgate.domain.screening_rules`) and by the opt-out check of
replies and transcripts (:func:`satsgate.domain.do_not_contact.asks_not_to_be_contacted`).
"""

from __future__ import annotations

import re
import unicodedata

_LEET = str.maketrans(
    {
        "0": "o",
        "1": "i",
        "3": "e",
        "4": "a",
        "5": "s",
        "7": "t",
        "@": "a",
        "$": "s",
        "!": "i",
        "|": "l",
    }
)
_LEET_TOKEN = re.compile(r"[a-z0-9@$!|]*[a-z][a-z0-9@$!|]*")
_SPACED = re.compile(r"\b(?:[a-z][ .\-_*]){3,}[a-z]\b")


def _unleet(match: re.Match[str]) -> str:
    token = match.group(0)
    letters = sum(ch.isalpha() for ch in token)
    if letters == len(token) or letters < 2:
        return token
    if token.rstrip("0123456789").isalpha():  # "abc123", "covid19": letters then a number
        return token
    if token[0].isdigit() and not (token[0] == "0" and token[1:2].isalpha()):
        # "7pm", "2nd", "4k": a number with its unit (but "0tp" is "otp")
        return token
    return token.translate(_LEET)


def normalise(text: str) -> str:
    """Case, accents, leetspeak and spacing folded away; one space between words."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in folded if not unicodedata.combining(ch))
    plain = plain.replace("ß", "ss").replace("’", "'").replace("`", "'")
    plain = _LEET_TOKEN.sub(_unleet, plain)
    plain = _SPACED.sub(lambda m: re.sub(r"[ .\-_*]", "", m.group(0)), plain)
    plain = re.sub(r"[.!?;:\n]+(?:\s|$)", " . ", plain)  # sentence ends stay
    plain = re.sub(r"[^a-z0-9'+.]+", " ", plain)
    return re.sub(r"\s+", " ", plain).strip()
