"""Prices: the spec's rates as functions, used by the services and by /api/estimate-cost.

Internally msat. The rates the spec calls BTC-pegged ("about N chars/sat") are
the fixed fallback values here; the 402 quote is what is charged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from satsgate.domain.languages import (
    RARE_LANGUAGES,
    TRANSCRIPTION_LANGUAGES,
    TRANSLATION_LANGUAGES,
    TranslationLanguage,
    translation_engine,
)
from satsgate.domain.telephony import Destination, served_number, validation_context
from satsgate.errors import ApiError, ErrorCode, invalid_params
from satsgate.services.base import FlatPrice, PerPagePrice, ServiceSpec
from satsgate.services.catalog.models import MODELS_BY_ID
from satsgate.services.catalog.rates import RateBook
from satsgate.services.catalog.routing import select_model

MSAT = 1000

# Characters per sat for per-character tiers (fallback rates).
# Text: best 10 chars/sat (min 15), standard 1000 (min 5). The better tier is "listed at 5":
# 100 chars/sat with a 5 sat minimum, so a short request costs the listed 5.
TEXT_CHARS_PER_SAT = {6: 10, 1: 100, 31: 1000}
TEXT_MIN_SATS = {6: 15, 31: 5, 1: 5}
# Text-to-speech, BTC-pegged fallback (rates.py scales them).
TTS_CHARS_PER_SAT = {43: 106, 33: 16, 34: 16, 3: 5}
# Tier names of the speech models besides best / better / standard.
TTS_TIER_NAMES = {"premium": 33, "premium-mini": 34, "mini": 34, "global": 43, "studio": 3}
# Audiobook: the price list's "about 1 sat per 33 characters" for the default (premium)
# tier; the global and studio tiers keep their speech rates. Minimum 500.
AUDIOBOOK_CHARS_PER_SAT = {43: 106, 33: 33, 34: 33, 3: 5}
AUDIOBOOK_MIN_SATS = 500
TRANSLATE_MSAT_PER_CHAR = 1  # 0.001 sat per character on the standard engine
# Routed targets go to the better text tier: 100 chars/sat.
TRANSLATE_ROUTED_MSAT_PER_CHAR = 10
TRANSLATE_MIN_SATS = 1
TRANSLATE_EPUB_MIN_SATS = 50
RARE_TRANSLATE_BASE_SATS = 50
RARE_TRANSLATE_MSAT_PER_CHAR = 2  # 0.002 sat per character
MULTILINGUAL_ANSWER_CHARS = 2000
MULTILINGUAL_MARGIN_PERCENT = 15
MULTILINGUAL_MIN_SATS = 2
VIDEO_SATS_PER_SECOND = {"768p": 250, "2K": 400}
MUSIC_SATS_PER_SECOND = 5
MUSIC_LYRICS_ADDON_SATS = 25
TRANSCRIPTION_SATS_PER_MINUTE = 10
TRANSCRIBE_TRANSLATE_HEADROOM_SATS = 5
TRANSCRIBE_TRANSLATE_MARGIN_PERCENT = 15
# AI calls: the destination's telephony rate plus the AI cost per minute (BTC-pegged);
# "from about 150 sats per minute" on the cheapest routes. Minimum 50.
AI_CALL_AI_SATS_PER_MINUTE = 120
AI_CALL_MIN_SATS = 50
# Voice bridge: telephony plus speech recognition and synthesis per minute.
VOICE_BRIDGE_SATS_PER_MINUTE = 20
PER_PASS_SATS = 100


# Per-recipient e-mail (the catalog's e-mail model, 28).
EMAIL_SATS = 200
# Image generation by tier (model id), at 1K; the better tier (8) costs more at 2K.
IMAGE_TIER_SATS = {16: 1200, 8: 150, 2: 100}
IMAGE_2K_SATS = {8: 300}


PER_PAGE_SATS = {"ocr": 10, "receipt-ocr": 25}
_PAGES_NOTE = "A PDF is counted by its pages, an image is one page."
OCR_PRICE = PerPagePrice(PER_PAGE_SATS["ocr"] * MSAT, "ocr", _PAGES_NOTE)
RECEIPT_OCR_PRICE = PerPagePrice(PER_PAGE_SATS["receipt-ocr"] * MSAT, "receipt-ocr", _PAGES_NOTE)


def per_chars_msat(chars: int, chars_per_sat: int, minimum_sats: int = 1) -> int:
    """Exact msat for ``chars`` at ``chars_per_sat``, never below the minimum."""
    return max(minimum_sats * MSAT, math.ceil(chars * MSAT / chars_per_sat))


def image_price_sats(model_id: int, resolution: str = "1K") -> int:
    """A generated image on this tier at this resolution (IMAGE_TIER_SATS, IMAGE_2K_SATS)."""
    if resolution in ("2K", "4K") and model_id in IMAGE_2K_SATS:
        return IMAGE_2K_SATS[model_id]
    return IMAGE_TIER_SATS[model_id]


def per_chars_float_msat(chars: int, chars_per_sat: float, minimum_sats: int = 1) -> int:
    """As :func:`per_chars_msat` for a (BTC-pegged) fractional rate."""
    return max(minimum_sats * MSAT, math.ceil(chars * MSAT / chars_per_sat))


def with_margin_msat(amount_msat: int, percent: int) -> int:
    return -(-amount_msat * (100 + percent) // 100)


# Metered text (payment sessions): each model's token limit (its context window), and its
# per-token rate derived from the catalog price: the price of the longest input the model
# takes (TEXT_MAX_INPUT_CHARS_BY_MODEL at its chars/sat) spread over its token limit.
TEXT_TOKEN_LIMIT = {6: 262_144, 1: 32_768, 31: 32_768}
TEXT_MAX_INPUT_CHARS_BY_MODEL = {6: 900_000, 1: 120_000, 31: 120_000}


def text_token_rate_msat(model_id: int) -> float:
    """msat per token (prompt and completion alike) for metered text on this model."""
    max_price_msat = TEXT_MAX_INPUT_CHARS_BY_MODEL[model_id] * MSAT / TEXT_CHARS_PER_SAT[model_id]
    return max_price_msat / TEXT_TOKEN_LIMIT[model_id]


def text_tokens_msat(model_id: int, tokens: int, margin_percent: int = 0) -> int:
    """What ``tokens`` cost on this model when metered (rounded up to the msat):
    tokens x (price at the input limit / token limit) x (1 + margin). Exact integers."""
    numerator = tokens * TEXT_MAX_INPUT_CHARS_BY_MODEL[model_id] * MSAT * (100 + margin_percent)
    denominator = TEXT_CHARS_PER_SAT[model_id] * TEXT_TOKEN_LIMIT[model_id] * 100
    return -(-numerator // denominator)


def text_msat(model_id: int, chars: int) -> int:
    """Text generation: input characters at the model's rate, never below its minimum."""
    return per_chars_msat(chars, TEXT_CHARS_PER_SAT[model_id], TEXT_MIN_SATS[model_id])


def translation_msat(chars: int, target: str | None, model_id: int | None = None) -> int:
    """translate-text: the target picks the engine (standard 1 sat per 1000 characters,
    routed targets 10x); a pinned text model uses its own rate. Minimum 1 sat."""
    if model_id is not None:
        return per_chars_msat(chars, TEXT_CHARS_PER_SAT[model_id], TRANSLATE_MIN_SATS)
    routed = target is not None and translation_engine(target) == "routed"
    per_char = TRANSLATE_ROUTED_MSAT_PER_CHAR if routed else TRANSLATE_MSAT_PER_CHAR
    return max(TRANSLATE_MIN_SATS * MSAT, chars * per_char)


def translate_epub_msat(visible_chars: int, target: str) -> int:
    """translate-epub: visible characters at the target engine's rate, minimum 50."""
    return max(TRANSLATE_EPUB_MIN_SATS * MSAT, translation_msat(visible_chars, target))


def rare_translation_msat(chars: int) -> int:
    return RARE_TRANSLATE_BASE_SATS * MSAT + chars * RARE_TRANSLATE_MSAT_PER_CHAR


def multilingual_ask_msat(question_chars: int, model_id: int) -> int:
    """(question + 2000-character answer allowance) at the tier's text rate, +15%, min 2."""
    base = math.ceil(
        (question_chars + MULTILINGUAL_ANSWER_CHARS) * MSAT / TEXT_CHARS_PER_SAT[model_id]
    )
    return max(MULTILINGUAL_MIN_SATS * MSAT, with_margin_msat(base, MULTILINGUAL_MARGIN_PERCENT))


def tts_msat(book: RateBook, model_id: int, chars: int) -> int:
    """Text-to-speech at the tier's BTC-pegged characters per sat."""
    return per_chars_float_msat(chars, book.chars_per_sat(TTS_CHARS_PER_SAT[model_id]))


def audiobook_msat(book: RateBook, model_id: int, chars: int) -> int:
    rate = book.chars_per_sat(AUDIOBOOK_CHARS_PER_SAT[model_id])
    return per_chars_float_msat(chars, rate, AUDIOBOOK_MIN_SATS)


def transcription_msat(seconds: float) -> int:
    """10 sats per started minute of audio."""
    return max(1, math.ceil(seconds / 60)) * TRANSCRIPTION_SATS_PER_MINUTE * MSAT


def transcribe_translate_msat(seconds: float) -> int:
    """Transcription base plus 5 sats headroom, plus 15%."""
    base = transcription_msat(seconds) + TRANSCRIBE_TRANSLATE_HEADROOM_SATS * MSAT
    return with_margin_msat(base, TRANSCRIBE_TRANSLATE_MARGIN_PERCENT)


def video_msat(seconds: int, resolution: str) -> int:
    return seconds * VIDEO_SATS_PER_SECOND[resolution] * MSAT


def music_msat(seconds: int, lyrics_addon: bool) -> int:
    return (seconds * MUSIC_SATS_PER_SECOND + (MUSIC_LYRICS_ADDON_SATS if lyrics_addon else 0)) * (
        MSAT
    )


def _sms_to_msat(book: RateBook, to: Destination) -> int:
    return book.msat(to.sms_sats * MSAT)


def _call_minute_to_msat(book: RateBook, to: Destination) -> int:
    return book.msat(to.call_sats_per_minute * MSAT)


def _ai_call_minute_to_msat(book: RateBook, to: Destination) -> int:
    return book.msat((to.call_sats_per_minute + AI_CALL_AI_SATS_PER_MINUTE) * MSAT)


def _voice_bridge_minute_to_msat(book: RateBook, to: Destination) -> int:
    return book.msat((to.call_sats_per_minute + VOICE_BRIDGE_SATS_PER_MINUTE) * MSAT)


def _cheapest_msat(book: RateBook, price_to: Callable[[RateBook, Destination], int]) -> int:
    """The price to the cheapest destination the book's table serves, at these rates."""
    return min(price_to(book, to) for to in book.destinations.table.values())


def sms_msat(book: RateBook, phone_number: str) -> int:
    """One SMS (at most 120 characters: one segment) at the destination's pegged rate."""
    return _sms_to_msat(book, book.destinations.destination(phone_number))


def sms_min_msat(book: RateBook) -> int:
    """The cheapest SMS at these rates."""
    return _cheapest_msat(book, _sms_to_msat)


def call_msat(book: RateBook, phone_number: str, minutes: int) -> int:
    """Automated call: the destination's pegged per-minute rate times the minutes."""
    return minutes * _call_minute_to_msat(book, book.destinations.destination(phone_number))


def call_min_msat(book: RateBook) -> int:
    """The cheapest automated call at these rates: one minute to the cheapest destination."""
    return _cheapest_msat(book, _call_minute_to_msat)


def ai_call_per_minute_msat(book: RateBook, phone_number: str) -> int:
    return _ai_call_minute_to_msat(book, book.destinations.destination(phone_number))


def ai_call_msat(book: RateBook, phone_number: str, minutes: int) -> int:
    """AI call deposit: minutes times (telephony + AI) by destination, minimum 50."""
    return max(AI_CALL_MIN_SATS * MSAT, minutes * ai_call_per_minute_msat(book, phone_number))


def ai_call_min_msat(book: RateBook) -> int:
    """The cheapest AI call deposit at these rates: one minute to the cheapest destination,
    minimum 50."""
    return max(AI_CALL_MIN_SATS * MSAT, _cheapest_msat(book, _ai_call_minute_to_msat))


def voice_bridge_per_minute_msat(book: RateBook, phone_number: str) -> int:
    return _voice_bridge_minute_to_msat(book, book.destinations.destination(phone_number))


def voice_bridge_min_msat(book: RateBook) -> int:
    """The cheapest voice bridge deposit at these rates: one minute to the cheapest
    destination."""
    return _cheapest_msat(book, _voice_bridge_minute_to_msat)


def resolve_tier_model(category: str, model: str | int | None, default: int) -> int:
    """Model selection: None -> default, tier name -> that tier's model, id -> pinned."""
    if model is None or model == "":
        return default
    if isinstance(model, str) and not (model.isascii() and model.isdecimal()):
        for m in MODELS_BY_ID.values():
            if m.category == category and m.tier == model:
                return m.id
        raise ApiError(ErrorCode.L402_INVALID_PARAMS, f"No {model!r} tier in category {category}.")
    model_id = int(model)
    if model_id not in MODELS_BY_ID or MODELS_BY_ID[model_id].category != category:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS, f"Model {model_id} is not a {category} model."
        )
    return model_id


# -- /api/estimate-cost -------------------------------------------------------------------


class _Estimate(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _NoParams(_Estimate):
    pass


class _ModelParam(_Estimate):
    model: str | None = None


class _Image(_ModelParam):
    resolution: Literal["1K", "2K"] = "1K"


def _image_estimate_msat(p: _Image) -> int:
    model_id = resolve_tier_model("image", p.model, 16)
    if model_id == 2 and p.resolution != "1K":
        raise ApiError(ErrorCode.L402_INVALID_PARAMS, "The standard tier (2) renders at 1K only.")
    return image_price_sats(model_id, p.resolution) * MSAT


class _ImageEdit(_Estimate):
    resolution: Literal["1K", "2K", "4K"] = "1K"
    model: str | None = None  # deprecated, ignored


class _Music(_Estimate):
    seconds: int = Field(60, ge=15, le=300)
    lyricsAddon: bool = False


class _Email(_Estimate):
    recipients: int = Field(1, ge=1, le=10)


class _Tts(_Estimate):
    model: str | None = None
    chars: int = Field(ge=1, le=5000)


class _Translate(_Estimate):
    chars: int = Field(ge=1)
    targetLanguage: TranslationLanguage | None = None


class _TranslateEpub(_Estimate):
    chars: int = Field(ge=1, le=3_000_000)
    targetLanguage: TranslationLanguage


class _Destination(_Estimate):
    to: str
    minutes: int = Field(1, ge=1, le=10)

    @field_validator("to")
    @classmethod
    def _routable(cls, value: str, info: ValidationInfo) -> str:
        """E.164 and served by the context's table (fails closed without one)."""
        return served_number(value.strip(), info)


class _Audiobook(_Estimate):
    model: str | None = None
    chars: int = Field(ge=1)


def _tts_model(model: str | None) -> int:
    try:
        return select_model(
            model, None, allowed=(33, 34, 43, 3), default=33, tier_aliases=TTS_TIER_NAMES
        )
    except ValueError as exc:
        raise ApiError(ErrorCode.L402_INVALID_PARAMS, f"model: {exc}") from None


class _Video(_Estimate):
    seconds: int = Field(ge=3, le=15)
    resolution: Literal["768p", "2K"] = "768p"
    model: str | None = None  # deprecated for resolution-priced services


class _Minutes(_Estimate):
    minutes: float = Field(gt=0, le=180)


class _Pages(_Estimate):
    pages: int = Field(1, ge=1, le=2000)


@dataclass(frozen=True)
class Estimator:
    params: type[_Estimate]
    price_msat: Callable[[Any, RateBook], int]  # (params, the app's rate book)
    unit: str


# The estimators of the prices that follow the request, by /api/estimate-cost id; a flat
# price's estimator is made from its ServiceSpec (estimators()).
UNIT_ESTIMATORS: dict[str, Estimator] = {
    "image": Estimator(_Image, lambda p, _b: _image_estimate_msat(p), "per image"),
    "music": Estimator(_Music, lambda p, _b: music_msat(p.seconds, p.lyricsAddon), "per second"),
    "email": Estimator(_Email, lambda p, _b: p.recipients * EMAIL_SATS * MSAT, "per recipient"),
    "text-to-speech": Estimator(
        _Tts, lambda p, b: tts_msat(b, _tts_model(p.model), p.chars), "per character"
    ),
    "translate": Estimator(
        _Translate, lambda p, _b: translation_msat(p.chars, p.targetLanguage), "per character"
    ),
    "translate-epub": Estimator(
        _TranslateEpub,
        lambda p, _b: translate_epub_msat(p.chars, p.targetLanguage),
        "per visible character",
    ),
    "audiobook": Estimator(
        _Audiobook, lambda p, b: audiobook_msat(b, _tts_model(p.model), p.chars), "per character"
    ),
    "transcribe-translate": Estimator(
        _Minutes, lambda p, _b: transcribe_translate_msat(p.minutes * 60), "per started minute"
    ),
    "sms": Estimator(_Destination, lambda p, b: sms_msat(b, p.to), "per message"),
    "call": Estimator(_Destination, lambda p, b: call_msat(b, p.to, p.minutes), "per minute"),
    "ai-call": Estimator(_Destination, lambda p, b: ai_call_msat(b, p.to, p.minutes), "per minute"),
    "video": Estimator(_Video, lambda p, _b: video_msat(p.seconds, p.resolution), "per second"),
    "video-from-image": Estimator(
        _Video, lambda p, _b: video_msat(p.seconds, p.resolution), "per second"
    ),
    "transcribe-audio": Estimator(
        _Minutes,
        lambda p, _b: math.ceil(p.minutes) * TRANSCRIPTION_SATS_PER_MINUTE * MSAT,
        "per started minute",
    ),
    "ocr": Estimator(_Pages, OCR_PRICE, "per page"),
    "receipt-ocr": Estimator(_Pages, RECEIPT_OCR_PRICE, "per page"),
}


def _flat_estimator(price: FlatPrice) -> Estimator:
    return Estimator(_NoParams, price, "per call")


def estimators(services: Iterable[ServiceSpec[Any]]) -> dict[str, Estimator]:
    """Every /api/estimate-cost estimator: the per-unit ones above, and one per flat-priced
    service that names an estimate id, quoting the spec's own price."""
    flat = {
        spec.price_msat.estimate: _flat_estimator(spec.price_msat)
        for spec in services
        if isinstance(spec.price_msat, FlatPrice) and spec.price_msat.estimate is not None
    }
    return {**UNIT_ESTIMATORS, **flat}


def estimate(
    estimators: Mapping[str, Estimator],
    service: str | None,
    query: Mapping[str, str],
    book: RateBook,
) -> dict[str, Any]:
    """The estimate body by one of ``estimators`` (registry.ESTIMATORS) at the app's rate
    ``book`` (its destination table checks a number); raises ApiError
    L402_INVALID_PARAMS for unknown ids or bad params."""
    if not service:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            "The query parameter 'service' is required.",
            extra={"services": sorted(estimators)},
        )
    estimator = estimators.get(service)
    if estimator is None:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"Unknown estimate service {service!r}.",
            extra={"services": sorted(estimators)},
        )
    try:
        params = estimator.params.model_validate(
            dict(query), context=validation_context(book.destinations)
        )
    except ValidationError as exc:
        raise invalid_params(exc, "estimate parameters") from None
    amount_msat = estimator.price_msat(params, book)
    return {
        "service": service,
        "amountSats": max(1, -(-amount_msat // MSAT)),
        "amountMsat": amount_msat,
        "unit": estimator.unit,
        "params": params.model_dump(exclude_none=True),
        "error_code": ErrorCode.L402_ESTIMATE_ONLY,
        "note": "Estimate only: no invoice was created. The 402 quote is authoritative.",
    }


def languages_document() -> dict[str, Any]:
    """GET /api/languages: per-language translation price and engine (chrF is measured by the
    engine; none is recorded here, so it is null)."""
    return {
        "languages": [
            {
                "code": code,
                "name": name,
                "engine": translation_engine(code),
                "satsPer1000Chars": translation_msat(1000, code) / MSAT,
                "minimumSats": TRANSLATE_MIN_SATS,
                "transcription": code in TRANSCRIPTION_LANGUAGES,
                "chrf": None,
            }
            for code, name in TRANSLATION_LANGUAGES.items()
        ],
        "rare": [
            {
                "code": code,
                "name": name,
                "quality": tier,
                "baseSats": RARE_TRANSLATE_BASE_SATS,
                "satsPer1000Chars": RARE_TRANSLATE_MSAT_PER_CHAR,
                "chrf": None,
            }
            for code, (name, tier) in RARE_LANGUAGES.items()
        ],
    }
