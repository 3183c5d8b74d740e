"""Offline language identification: py3langid (BSD-3-Clause), whose wheel ships its model
(97 languages, naive Bayes over byte n-grams). It names the source language of a
translation whose caller left it out, before any invoice where the text is at hand.

The model loads once per process (about 0.7 s), in a background thread started when a
local engine that needs it is built, so no request waits for it on the event loop
unless one comes in the first second after start-up.
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import re
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from satsgate.domain.languages import UnknownLanguage, resolve_translation_language

# Enough text to tell languages apart; identification time is linear in the sample.
SAMPLE_CHARS = 20_000

_lock = threading.Lock()
_identifier: Any = None


def installed() -> bool:
    return importlib.util.find_spec("py3langid") is not None


def load() -> Any:
    """The model, loaded now if it is not yet (blocking: about 0.7 s the first time)."""
    global _identifier
    with _lock:
        if _identifier is None:
            from py3langid.langid import (  # type: ignore[import-untyped]
                MODEL_FILE,
                LanguageIdentifier,
            )

            _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _identifier


def warm_up() -> None:
    """Load the model in the background (no-op once loaded or when not installed)."""
    if _identifier is None and installed():
        threading.Thread(target=load, name="language-id-load", daemon=True).start()


@dataclass(frozen=True)
class Detected:
    code: str  # as satsgate.domain.languages resolves it ("es", "no"); else langid's own
    probability: float  # 0..1 among the model's languages
    sure: bool = True  # False: too little text to tell; the likeliest of the candidates


# Below this probability the top language is a guess (a few words: "Hola", "OK").
SURE = 0.5
# Rough speaker counts (first and second language, millions): between candidates that a
# short text fits about equally, the more widely used language is the likelier one.
_SPEAKERS: Mapping[str, float] = {
    "en": 1500, "zh": 1100, "hi": 600, "es": 560, "fr": 310, "ar": 270, "pt": 260,
    "ru": 255, "id": 200, "de": 135, "ja": 125, "it": 68, "ms": 80, "tr": 88, "pl": 45,
    "uk": 40, "nl": 30, "ro": 24, "af": 17, "sv": 13, "sr": 12, "ca": 10, "bg": 8,
    "da": 6, "hr": 5.5, "no": 5, "be": 5, "gl": 3, "bs": 2.5, "sl": 2.5, "mk": 2, "eo": 2,
    "eu": 0.8, "is": 0.35,
}  # fmt: skip


_SKIPPED = re.compile(r"<(head|script|style)\b.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"<[^>]*>")


def plain_text(markup: str) -> str:
    """The text of an (X)HTML document or fragment, for identification only."""
    return html.unescape(_TAG.sub(" ", _SKIPPED.sub(" ", markup)))


def detect(
    text: str, candidates: Collection[str] = (), target: str | None = None
) -> Detected | None:
    """The language of ``text`` (its first SAMPLE_CHARS characters); None when it has no
    letters to go on. Where the top language is unsure (a few words fit many languages),
    the likeliest of ``candidates`` (if any are given), weighted by how widely each is
    spoken; ``target`` (the translation's) counts among them only when it is the top
    language, so "Hola" into English reads as Spanish, "Good morning" as English.
    Raises RuntimeError when py3langid is not installed."""
    sample = text[:SAMPLE_CHARS]
    if not any(ch.isalpha() for ch in sample):
        return None
    if not installed():
        raise RuntimeError("language identification (py3langid) is not installed")
    ranked = [(_code(code), float(p)) for code, p in load().rank(sample)]
    top, probability = ranked[0]
    if probability >= SURE or not candidates:
        return Detected(top, probability)
    among = {*candidates, top} if top == target else set(candidates)
    code, p = max(
        ((code, p) for code, p in ranked if code in among),
        key=lambda item: item[1] * _SPEAKERS.get(item[0], 1.0) ** 0.5,
        default=(top, probability),
    )
    return Detected(code, p, sure=False)


def _code(langid_code: str) -> str:
    with contextlib.suppress(UnknownLanguage):
        return resolve_translation_language(langid_code)
    return langid_code
