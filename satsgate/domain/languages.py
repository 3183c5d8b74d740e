"""Language data: transcription (13), translation (119, ISO 639) and rare-language tables.

Callers may name a language by ISO 639 code (639-1, or 639-3 where there is no
639-1 code), by English name, or by a locale tag (``pt-BR`` -> ``pt``); all
are case-insensitive. :func:`resolve_translation_language` and friends return
the canonical code or raise :class:`UnknownLanguage` (a ValueError, so pydantic
reports it as L402_INVALID_PARAMS before any invoice).

Translation engines: the target picks the engine. ``standard`` is the
standard text tier (1 sat per 1000 characters); ``routed`` targets, where the
standard engine is weak, go to the better text tier and cost more
(see :mod:`satsgate.services.catalog.pricing`).

Rare languages (translate-rare-language): the 452 rows of ``data/rare_languages.tsv``, a
generated file. The list is satsgate's earlier table plus the target languages of two
published many-language MT systems that the 119 do not already cover, until there are 452:

1. The earlier table (302): kept, except ``nah`` (Nahuatl) and ``oto`` (Otomi), which are ISO
   639-5 codes of language families, not languages. ``tpw`` (Tupi), retired from ISO 639-3 in
   2023, is ``tpn`` now; ``mix`` is one language, Mixtepec Mixtec, and is named so. The old
   spellings still resolve.
2. NLLB-200: ``FAIRSEQ_LANGUAGE_CODES`` in transformers' ``models/nllb/tokenization_nllb.py``
   (202 codes, 196 languages once the script is dropped) adds 17.
3. MADLAD-400: the ``language:`` list of the madlad400-3b-mt model card (419 entries, the
   largest languages first; arXiv 2309.04662), in that order, adds 135 and stops at ``cbk``
   (Chavacano, entry 389); the 25 languages after it are left out for the count.

In 2 and 3, 639-1 codes become 639-3, retired codes their replacement (``ajp`` -> ``apc``),
and these are skipped: what the 119 cover (their codes and aliases, and the standard variety a
main macrolanguage code stands for, e.g. ``arb``, ``npi``, ``pbt``); what is not a living
ISO 639-3 language (``zxx``, ``ber``, ``grc``, ``ang``, ``tlh``); a macrolanguage one of whose
members is listed (``aka``, ``chm``, ``bik``, ``kv``, ``din``). Names: the earlier table's
English name, else the ISO 639-3 reference name (pycountry 26.2.16). The ISO name, the 639-1
code and retired codes are accepted too, unless one already names a language of the 119
(``Haitian`` stays ``ht``). 22 of the earlier table's languages are also among the 119 under
their 639-3 code (``glg`` and ``gl``); they stay, so every code and name resolves as before.

Tiers: no language has a measured chrF here, so none is ``good`` or ``fair`` (tiers that
come with a measurement and its chrF) and chrF is null. ``unverified`` (325): NLLB-200 or
MADLAD-400 lists it as a target. ``experimental`` (127): neither does; only the earlier
table had it. The earlier ``good``/``fair`` tiers had no measurement behind them.
"""

from __future__ import annotations

import unicodedata
from importlib import resources
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, StringConstraints

Engine = Literal["standard", "routed"]


class UnknownLanguage(ValueError):
    pass


# The 13 transcription languages of the spec.
TRANSCRIPTION_LANGUAGES: Final[dict[str, str]] = {
    "en": "English", "zh": "Chinese", "hi": "Hindi", "es": "Spanish", "ar": "Arabic",
    "fr": "French", "pt": "Portuguese", "ru": "Russian", "de": "German", "ja": "Japanese",
    "ko": "Korean", "it": "Italian", "nl": "Dutch",
}  # fmt: skip

# code: English name. "|" separates further accepted names.
_TRANSLATION: Final[str] = """
af Afrikaans;sq Albanian;am Amharic;ar Arabic;hy Armenian;as Assamese;az Azerbaijani;
eu Basque;be Belarusian;bn Bengali|Bangla;bs Bosnian;bg Bulgarian;my Burmese|Myanmar;
ca Catalan;ceb Cebuano;zh Chinese|Mandarin|Simplified Chinese|Traditional Chinese;
co Corsican;hr Croatian;cs Czech;da Danish;nl Dutch|Flemish;en English;eo Esperanto;
et Estonian;fi Finnish;fr French;fy Frisian|Western Frisian;gl Galician;ka Georgian;
de German;el Greek;gu Gujarati;ht Haitian Creole|Haitian;ha Hausa;haw Hawaiian;
he Hebrew;hi Hindi;hmn Hmong;hu Hungarian;is Icelandic;ig Igbo;id Indonesian;ga Irish;
it Italian;ja Japanese;jv Javanese;kn Kannada;kk Kazakh;km Khmer;rw Kinyarwanda;
ko Korean;ku Kurdish;ky Kyrgyz;lo Lao;la Latin;lv Latvian;lt Lithuanian;
lb Luxembourgish;mk Macedonian;mg Malagasy;ms Malay;ml Malayalam;mt Maltese;mi Maori;
mr Marathi;mn Mongolian;ne Nepali;no Norwegian|Norwegian Bokmal;ny Chichewa|Nyanja;
or Odia|Oriya;ps Pashto;fa Persian|Farsi;pl Polish;pt Portuguese;pa Punjabi;
ro Romanian;ru Russian;sm Samoan;gd Scottish Gaelic|Gaelic;sr Serbian;st Sesotho;
sn Shona;sd Sindhi;si Sinhala;sk Slovak;sl Slovenian;so Somali;es Spanish;su Sundanese;
sw Swahili;sv Swedish;tl Tagalog|Filipino;tg Tajik;ta Tamil;tt Tatar;te Telugu;th Thai;
tr Turkish;tk Turkmen;uk Ukrainian;ur Urdu;ug Uyghur;uz Uzbek;vi Vietnamese;cy Welsh;
xh Xhosa;yi Yiddish;yo Yoruba;zu Zulu;yue Cantonese;bo Tibetan;dv Dhivehi|Maldivian;
fo Faroese;ti Tigrinya;om Oromo;qu Quechua;gn Guarani;ln Lingala;tn Tswana|Setswana
"""

# Targets the standard engine handles poorly: routed to the better tier.
_ROUTED = "co haw hmn la mi sm yi dv fo ti om qu gn ln tn bo ug tt tk ht st sn ny"
ROUTED_TARGETS: Final[frozenset[str]] = frozenset(_ROUTED.split(" "))

# Other spellings of codes: legacy ISO codes, 639-2/3 codes, macrolanguage members.
_CODE_ALIASES: Final[dict[str, str]] = {
    "iw": "he", "jw": "jv", "in": "id", "ji": "yi", "nb": "no", "nn": "no", "fil": "tl",
    "zho": "zh", "cmn": "zh", "eng": "en", "spa": "es", "fra": "fr", "fre": "fr", "deu": "de",
    "ger": "de", "por": "pt", "rus": "ru", "jpn": "ja", "kor": "ko", "ita": "it", "nld": "nl",
    "dut": "nl", "ara": "ar", "hin": "hi", "tur": "tr", "pol": "pl", "ukr": "uk", "vie": "vi",
    "fas": "fa", "per": "fa", "pes": "fa", "zsm": "ms", "msa": "ms", "swa": "sw", "swh": "sw",
    "tgl": "tl", "heb": "he", "ell": "el", "gre": "el", "ces": "cs", "cze": "cs", "ron": "ro",
    "rum": "ro", "hun": "hu", "swe": "sv", "dan": "da", "fin": "fi", "nor": "no", "nob": "no",
}  # fmt: skip


def _parse(table: str) -> tuple[dict[str, str], dict[str, str]]:
    names: dict[str, str] = {}
    lookup: dict[str, str] = {}
    for entry in table.replace("\n", "").split(";"):
        code, _, spelled = entry.strip().partition(" ")
        all_names = spelled.split("|")
        names[code] = all_names[0]
        lookup[code] = code
        for name in all_names:
            lookup[name.lower()] = code
    return names, lookup


TRANSLATION_LANGUAGES, _TRANSLATION_LOOKUP = _parse(_TRANSLATION)
assert len(TRANSLATION_LANGUAGES) == 119, len(TRANSLATION_LANGUAGES)
assert set(TRANSLATION_LANGUAGES) >= ROUTED_TARGETS


def translation_engine(code: str) -> Engine:
    """The engine a translation into ``code`` uses (and so its price)."""
    return "routed" if code in ROUTED_TARGETS else "standard"


def _normalize(value: str) -> str:
    return " ".join(value.strip().replace("_", "-").split()).lower()


def _lookup(value: str, table: dict[str, str], what: str) -> str:
    key = _normalize(value)
    if not key:
        raise UnknownLanguage(f"{what}: a language is required")
    candidates = [key, _CODE_ALIASES.get(key, "")]
    if "-" in key:  # locale tag: pt-br -> pt, zh-hant-tw -> zh
        primary = key.split("-", 1)[0]
        candidates += [primary, _CODE_ALIASES.get(primary, "")]
    for candidate in candidates:
        if candidate and candidate in table:
            return table[candidate]
    raise UnknownLanguage(f"{what}: unsupported language {value.strip()!r}")


def resolve_translation_language(value: str) -> str:
    """One of the 119: an ISO 639 code, English name or locale tag -> canonical code."""
    return _lookup(value, _TRANSLATION_LOOKUP, "translation")


def resolve_transcription_language(value: str) -> str:
    """One of the 13 transcription languages (or ``auto``) -> canonical code."""
    if _normalize(value) == "auto":
        return "auto"
    code = _lookup(value, _TRANSLATION_LOOKUP, "transcription")
    if code not in TRANSCRIPTION_LANGUAGES:
        raise UnknownLanguage(
            f"transcription: {value.strip()!r} is not one of " + ", ".join(TRANSCRIPTION_LANGUAGES)
        )
    return code


def _translation_source(value: str) -> str | None:
    """A translation's source language; None (detect it) for ``auto``."""
    return None if _normalize(value) == "auto" else resolve_translation_language(value)


def _transcription_source(value: str) -> str | None:
    """A transcription's source language; None (detect it) for ``auto``."""
    code = resolve_transcription_language(value)
    return None if code == "auto" else code


# Params field types: the language as the caller wrote it (at most 64 characters, 32 for
# the transcription codes), resolved to its canonical code; an unknown one fails
# validation with UnknownLanguage's message, before any invoice.
_NAME = StringConstraints(max_length=64)
_CODE = StringConstraints(max_length=32)
TranslationLanguage = Annotated[str, _NAME, AfterValidator(resolve_translation_language)]
TranscriptionLanguage = Annotated[str, _CODE, AfterValidator(resolve_transcription_language)]
# None after validation when the caller asked to detect the language (``auto``).
TranslationSource = Annotated[str, _NAME, AfterValidator(_translation_source)]
TranscriptionSource = Annotated[str, _CODE, AfterValidator(_transcription_source)]


# -- rare languages (translate-rare-language) ---------------------------------------------

QualityTier = Literal["good", "fair", "unverified", "experimental"]
_TIERS: Final[dict[str, QualityTier]] = {
    "good": "good", "fair": "fair", "unverified": "unverified", "experimental": "experimental",
}  # fmt: skip
# The published lists behind a language, by the letters of the data file's "listed by" column
# (P, satsgate's own earlier table, is no evidence and is not shown).
_LISTS: Final[dict[str, str]] = {"N": "NLLB-200", "M": "MADLAD-400"}


def _fold(key: str) -> str:
    """``Asháninka`` -> ``ashaninka``: names are accepted with or without diacritics."""
    return "".join(c for c in unicodedata.normalize("NFKD", key) if not unicodedata.combining(c))


def _load_rare() -> tuple[
    dict[str, tuple[str, QualityTier]], dict[str, tuple[str, ...]], dict[str, str], dict[str, str]
]:
    text = resources.files(__package__).joinpath("data/rare_languages.tsv").read_text("utf-8")
    languages: dict[str, tuple[str, QualityTier]] = {}
    listed_by: dict[str, tuple[str, ...]] = {}
    lookup: dict[str, str] = {}
    folded: dict[str, str | None] = {}  # None: two languages fold to the same key
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        code, tier, lists, name, aliases = line.split("\t")
        languages[code] = (name, _TIERS[tier])
        listed_by[code] = tuple(_LISTS[letter] for letter in lists if letter in _LISTS)
        for spelled in (code, name, *filter(None, aliases.split("|"))):
            key = _normalize(spelled)
            if lookup.setdefault(key, code) != code:
                raise ValueError(f"rare_languages.tsv: {spelled!r} names two languages")
            plain = _fold(key)
            folded[plain] = code if folded.get(plain, code) == code else None
    # A folded spelling counts only where it names one language and is no spelling itself
    # (``Tày`` folds to ``tay``, which is Atayal's code).
    unique = {key: code for key, code in folded.items() if code and key not in lookup}
    return languages, listed_by, lookup, unique


_rare, _listed_by, _RARE_LOOKUP, _RARE_FOLDED = _load_rare()
# code -> (English name, quality tier). Lookups are dict hits on keys built once here.
RARE_LANGUAGES: Final[dict[str, tuple[str, QualityTier]]] = _rare
# code -> the published MT language lists that name it (empty: only satsgate's own table).
RARE_LISTED_BY: Final[dict[str, tuple[str, ...]]] = _listed_by
assert len(RARE_LANGUAGES) == 452, len(RARE_LANGUAGES)


def resolve_rare_language(value: str) -> str:
    """A rare language or one of the 119 -> canonical code.

    Accepted, in any case: the ISO 639-3 code, the 639-1 code where there is one, the English
    name or a listed alias; then, for what matches nothing else, the name without diacritics
    (``Ashaninka``) and a tag's first part (``quy-PE``, NLLB's ``ace_Latn``). The rare table
    is asked first, as it always was, so the names it shares with the 119 (``Galician`` ->
    ``glg``) resolve as before; no other rare key is also a key of the 119.
    """
    key = _normalize(value)
    if key in _RARE_LOOKUP:
        return _RARE_LOOKUP[key]
    try:
        return resolve_translation_language(value)
    except UnknownLanguage:
        pass
    folded, primary = _fold(key), key.split("-", 1)[0]
    tried = ((folded, _RARE_LOOKUP), (folded, _RARE_FOLDED), (primary, _RARE_LOOKUP))
    for candidate, table in tried:
        if candidate in table:
            return table[candidate]
    raise UnknownLanguage(f"unsupported language {value.strip()!r}: see GET /api/languages")


RareLanguage = Annotated[str, _NAME, AfterValidator(resolve_rare_language)]


def language_name(code: str) -> str:
    if code in TRANSLATION_LANGUAGES:
        return TRANSLATION_LANGUAGES[code]
    if code in RARE_LANGUAGES:
        return RARE_LANGUAGES[code][0]
    return code
