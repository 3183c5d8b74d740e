"""Machine translation: the capability the ``translation`` and ``rare_translation``
engine names serve (translate-text, translate-epub, translate-rare-language, the second
step of transcribe-translate).

Implemented by local engines (e.g. Apertium) and by chat models of remote providers
(``engines/providers/openai.py``, ``anthropic.py``), which translate through a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

TextFormat = Literal["text", "html"]


@dataclass(frozen=True)
class TranslationRequest:
    text: str
    # ISO 639 code as satsgate.domain.languages resolves it: 639-1 where there is one
    # ("es", "pt"), else 639-3 ("haw", "ceb"; every rare language is 639-3: "tpi").
    target_language: str
    source_language: str | None = None  # same form; None: detect
    # "html": ``text`` is an XHTML/HTML fragment (an EPUB document's body); translate the
    # text nodes, keep every tag and attribute as it is.
    format: TextFormat = "text"
    # The spec model pinned by the caller (31, 1, 6: text tiers), or None: the engine's own
    # choice. Local engines ignore it; the service refuses before payment a pinned model
    # that no binding serves.
    model_id: int | None = None
    # The provider's model name for model_id (or for the engine's default); None for local.
    model_name: str | None = None


@dataclass(frozen=True)
class TranslationResult:
    text: str  # the translation, in the request's format
    # The source language as detected (or as given), same code form; None if unknown.
    source_language: str | None = None
    # The language a two-step translation went through (source -> pivot -> target), for
    # a pair the engine has no direct translation of; None when it translated directly.
    pivot_language: str | None = None


class TranslationEngine(Protocol):
    async def translate(self, request: TranslationRequest) -> TranslationResult:
        """``request.text`` in ``request.target_language``; EngineError (satsgate.engines)
        on failure, INVALID_INPUT for a language pair the engine cannot translate."""
        ...
