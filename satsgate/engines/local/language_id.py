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
from dataclasses import dataclass
from typing import Any

from satsgate.services.languages import UnknownLanguage, resolve_translation_language

# Enough text to tell languages apart; identification is linear in the sample (~1 ms/10 kB).
SAMPLE_CHARS = 20_000

_lock = threading.Lock()
_identifier: Any = None


def installed() -> bool:
    return importlib.util.find_spec("py3langid") is not None


def _load() -> Any:
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
        threading.Thread(target=_load, name="language-id-load", daemon=True).start()


@dataclass(frozen=True)
class Detected:
    code: str  # as satsgate.services.languages resolves it ("es", "no"); else langid's own
    probability: float  # 0..1 among the model's languages


_SKIPPED = re.compile(r"<(head|script|style)\b.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"<[^>]*>")


def plain_text(markup: str) -> str:
    """The text of an (X)HTML document or fragment, for identification only."""
    return html.unescape(_TAG.sub(" ", _SKIPPED.sub(" ", markup)))


def detect(text: str) -> Detected | None:
    """The language of ``text`` (its first SAMPLE_CHARS characters); None when it has no
    letters to go on. Raises RuntimeError when py3langid is not installed."""
    sample = text[:SAMPLE_CHARS]
    if not any(ch.isalpha() for ch in sample):
        return None
    if not installed():
        raise RuntimeError("language identification (py3langid) is not installed")
    code, probability = _load().classify(sample)
    with contextlib.suppress(UnknownLanguage):
        code = resolve_translation_language(code)
    return Detected(str(code), float(probability))
