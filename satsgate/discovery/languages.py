"""/api/languages: translation price per language, the engine that serves it, measured chrF.

Languages and engines come from :mod:`satsgate.domain.languages`; every
price is computed by the pricing functions the services charge with
(``translation_msat``, ``rare_translation_msat``), so this table cannot drift
from the 402 quote. The language tables hold no chrF scores yet, so ``chrF``
is null ("where known": nowhere yet). Each rare language carries its quality tier and
``listedBy``, the published MT language lists (NLLB-200, MADLAD-400) that name it: the
tier's evidence (see :mod:`satsgate.domain.languages`).

``here`` says what this node really translates (translate-text, translate-epub): a
provider's text model takes any pair of the 119; a local engine such as Apertium only
the language pairs it has installed and those it reaches through one pivot language
(``via``), listed in ``thisNode.translation.pairs`` and, per target language, in its
``here.from``. The rare languages say the same of
translate-rare-language (``thisNode.rareTranslation``: Apertium serves a few, such as
Occitan, from the languages its pairs start from); ``thisNode.speechTranslation`` lists
the (spoken, written) pairs of transcribe-translate.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from satsgate.discovery.documents import Catalog
from satsgate.domain.languages import (
    RARE_LANGUAGES,
    RARE_LISTED_BY,
    TRANSCRIPTION_LANGUAGES,
    TRANSLATION_LANGUAGES,
    translation_engine,
)
from satsgate.engines import Engines
from satsgate.services.base import sats_for_msat
from satsgate.services.catalog.pricing import rare_translation_msat, translation_msat

LANGUAGES_VERSION = 1
# Rates are read off the price functions at a length where minimums do not bind.
_LONG_TEXT_CHARS = 1_000_000


def _standard_price(code: str) -> dict[str, Any]:
    return {
        "msatPerChar": translation_msat(_LONG_TEXT_CHARS, code) / _LONG_TEXT_CHARS,
        "minimumSats": sats_for_msat(translation_msat(1, code)),
    }


def _rare_price() -> dict[str, Any]:
    base_msat = rare_translation_msat(0)
    return {
        "baseSats": sats_for_msat(base_msat),
        "msatPerChar": (rare_translation_msat(_LONG_TEXT_CHARS) - base_msat) / _LONG_TEXT_CHARS,
    }


def served_languages(engines: Engines, engine: str, accepted: Iterable[str]) -> set[str]:
    """The codes of ``accepted`` that some binding of ``engine`` serves on this node: an
    engine's class may say which (``languages``: a frozenset of codes); one that does not
    serves every code the service accepts."""
    accepted = set(accepted)
    served: set[str] = set()
    for binding in engines.bindings(engine):
        # Looked up on the class: a set it declares, not whatever a proxy answers.
        languages = getattr(type(binding.engine), "languages", None)
        if isinstance(languages, frozenset | set):
            served |= accepted & {str(code) for code in languages}
        else:
            served |= accepted
    return served


def _this_node(engines: Engines, name: str = "translation") -> dict[str, Any]:
    """Whether this node translates (engine ``name``: ``translation`` for translate-text
    and translate-epub, ``rare_translation``, ``speech_translation``), how, and which
    pairs: ``pairs`` null means any pair (a provider's text model). An engine that serves
    some pairs only (a local one) says which: ``language_pairs()``."""
    status = engines.status(name)
    doc: dict[str, Any] = {"available": status.available, "source": status.source}
    if not status.available:
        doc["pairs"] = []
        return doc
    if status.source == "local":
        doc["label"] = status.label
    pairs: dict[tuple[str, str], str | None] | None = {}
    for binding in engines.bindings(name):
        # A method its class defines (not whatever a proxy answers); without it: any pair.
        if pairs is None or not callable(getattr(type(binding.engine), "language_pairs", None)):
            pairs = None
            break
        engine: Any = binding.engine
        listed: Iterable[tuple[str, str]] = engine.language_pairs()
        pivot = engine.pivot if callable(getattr(type(engine), "pivot", None)) else None
        for pair in listed:
            via = pivot(*pair) if pivot is not None else None
            if pair not in pairs or pairs[pair] is not None:
                pairs[pair] = via  # a binding that translates the pair directly wins
    doc["pairs"] = (
        None
        if pairs is None
        else [
            {"source": source, "target": target, **({"via": via} if via else {})}
            for (source, target), via in sorted(pairs.items())
        ]
    )
    return doc


def _here(code: str, node: dict[str, Any]) -> dict[str, Any]:
    """Translation into ``code`` on this node: ``from`` the sources it takes (null: any)."""
    if not node["available"]:
        return {"into": False, "from": []}
    if node["pairs"] is None:
        return {"into": True, "from": None}
    sources = sorted(p["source"] for p in node["pairs"] if p["target"] == code)
    return {"into": bool(sources), "from": sources}


def languages_document(catalog: Catalog, node_engines: Engines) -> dict[str, Any]:
    node = _this_node(node_engines)
    translation = [
        {
            "code": code,
            "name": name,
            "engine": translation_engine(code),
            **_standard_price(code),
            "chrF": None,
            "transcription": code in TRANSCRIPTION_LANGUAGES,
            "here": _here(code, node),
        }
        for code, name in TRANSLATION_LANGUAGES.items()
    ]
    rare_price = _rare_price()
    rare_node = _this_node(node_engines, "rare_translation")
    transcribed = served_languages(node_engines, "transcription", TRANSCRIPTION_LANGUAGES)
    rare = [
        {
            "code": code,
            "name": name,
            "engine": "rare",
            "quality": tier,
            "listedBy": list(RARE_LISTED_BY[code]),
            **rare_price,
            "chrF": None,
            "here": _here(code, rare_node),
        }
        for code, (name, tier) in RARE_LANGUAGES.items()
    ]
    engines: dict[str, dict[str, Any]] = {}
    for entry in translation:
        engine = engines.setdefault(
            entry["engine"],
            {
                "engine": entry["engine"],
                "msatPerChar": entry["msatPerChar"],
                "minimumSats": entry["minimumSats"],
                "languages": 0,
            },
        )
        engine["languages"] += 1
    engines["rare"] = {"engine": "rare", **rare_price, "languages": len(rare)}
    return {
        "version": LANGUAGES_VERSION,
        "unit": "msat per character (1000 msat = 1 sat)",
        "engines": list(engines.values()),
        # What this node translates: text (translate-text, translate-epub), into the rare
        # languages (translate-rare-language), speech (transcribe-translate; local: English
        # speech into the targets its translator reaches from English).
        "thisNode": {
            "translation": node,
            "rareTranslation": rare_node,
            "speechTranslation": _this_node(node_engines, "speech_translation"),
        },
        "translation": translation,
        "rare": rare,
        # The 13 languages transcribe-audio accepts; ``here``: this node transcribes it
        # (a local engine may cover fewer: Whisper tiny.en speaks English only).
        "transcription": [
            {"code": code, "name": name, "here": code in transcribed}
            for code, name in TRANSCRIPTION_LANGUAGES.items()
        ],
        "transcriptionEngine": node_engines.status("transcription").public(),
        "services": [
            service["id"]
            for service in catalog.services
            if "translat" in service["id"] or "translat" in service["category"]
        ],
        "estimate": catalog.url("/api/estimate-cost?service=translate&chars=1000"),
    }
