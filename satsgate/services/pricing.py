"""Prices: the spec's rates as functions, used by the services and by /api/estimate-cost.

Internally msat. The rates the spec calls BTC-pegged ("about N chars/sat") are
the fixed fallback values here; the 402 quote is what is charged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from satsgate.errors import ApiError
from satsgate.services.catalog import MODELS_BY_ID

MSAT = 1000

# Characters per sat for per-character tiers (fallback rates).
TEXT_CHARS_PER_SAT = {6: 10, 31: 1000}
TEXT_MIN_SATS = {6: 15, 31: 5, 1: 5}
TTS_CHARS_PER_SAT = {43: 106, 33: 16, 34: 16, 3: 5}
TRANSLATE_MSAT_PER_CHAR = 1  # 0.001 sat per character on the standard engine
VIDEO_SATS_PER_SECOND = {"768p": 250, "2K": 400}
MUSIC_SATS_PER_SECOND = 5
TRANSCRIPTION_SATS_PER_MINUTE = 10
FLAT_SATS = {
    "email": 200,
    "voice-cloning": 7500,
    "html-to-pdf": 50,
    "render-card": 5,
    "file-conversion": 100,
    "merge-pdf": 100,
    "remove-background": 44,
    "upscale-image": 5,
    "restore-face": 25,
    "detect-nsfw": 2,
    "detect-objects": 5,
    "remove-object": 130,
    "colorize-image": 5,
    "deblur-image": 110,
    "image-edit": 200,
    "vision": 21,
}
PER_PAGE_SATS = {"ocr": 10, "receipt-ocr": 25}


def per_chars_msat(chars: int, chars_per_sat: int, minimum_sats: int = 1) -> int:
    """Exact msat for ``chars`` at ``chars_per_sat``, never below the minimum."""
    return max(minimum_sats * MSAT, math.ceil(chars * MSAT / chars_per_sat))


def image_price_sats(model_id: int, resolution: str = "1K") -> int:
    if model_id == 8 and resolution in ("2K", "4K"):
        return 300
    price = MODELS_BY_ID[model_id].price_sats
    assert price is not None
    return price


def resolve_tier_model(category: str, model: str | int | None, default: int) -> int:
    """Model selection: None -> default, tier name -> that tier's model, id -> pinned."""
    if model is None or model == "":
        return default
    if isinstance(model, str) and not model.isdigit():
        for m in MODELS_BY_ID.values():
            if m.category == category and m.tier == model:
                return m.id
        raise ApiError("L402_INVALID_PARAMS", f"No {model!r} tier in category {category}.")
    model_id = int(model)
    if model_id not in MODELS_BY_ID or MODELS_BY_ID[model_id].category != category:
        raise ApiError("L402_INVALID_PARAMS", f"Model {model_id} is not a {category} model.")
    return model_id


# -- /api/estimate-cost -------------------------------------------------------------------


class _Estimate(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _NoParams(_Estimate):
    pass


class _ModelParam(_Estimate):
    model: str | None = None


class _ImageEdit(_Estimate):
    resolution: Literal["1K", "2K", "4K"] = "1K"
    model: str | None = None  # deprecated, ignored


class _Music(_Estimate):
    seconds: int = Field(60, ge=15, le=300)


class _Tts(_Estimate):
    model: str | None = None
    chars: int = Field(ge=1, le=5000)


class _Translate(_Estimate):
    chars: int = Field(ge=1)
    targetLanguage: str | None = None


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
    price_msat: Callable[[Any], int]
    unit: str


def _flat(slug: str) -> Estimator:
    return Estimator(_NoParams, lambda _p: FLAT_SATS[slug] * MSAT, "per call")


ESTIMATORS: dict[str, Estimator] = {
    "image": Estimator(
        _ModelParam,
        lambda p: image_price_sats(resolve_tier_model("image", p.model, 16)) * MSAT,
        "per image",
    ),
    "image-edit": _flat("image-edit"),
    "music": Estimator(_Music, lambda p: p.seconds * MUSIC_SATS_PER_SECOND * MSAT, "per second"),
    "vision": _flat("vision"),
    "text-to-speech": Estimator(
        _Tts,
        lambda p: per_chars_msat(
            p.chars, TTS_CHARS_PER_SAT[resolve_tier_model("speech", p.model, 33)]
        ),
        "per character",
    ),
    "translate": Estimator(
        _Translate, lambda p: max(MSAT, p.chars * TRANSLATE_MSAT_PER_CHAR), "per character"
    ),
    "video": Estimator(
        _Video, lambda p: p.seconds * VIDEO_SATS_PER_SECOND[p.resolution] * MSAT, "per second"
    ),
    "video-from-image": Estimator(
        _Video, lambda p: p.seconds * VIDEO_SATS_PER_SECOND[p.resolution] * MSAT, "per second"
    ),
    "transcribe-audio": Estimator(
        _Minutes,
        lambda p: math.ceil(p.minutes) * TRANSCRIPTION_SATS_PER_MINUTE * MSAT,
        "per started minute",
    ),
    "ocr": Estimator(_Pages, lambda p: p.pages * PER_PAGE_SATS["ocr"] * MSAT, "per page"),
    "receipt-ocr": Estimator(
        _Pages, lambda p: p.pages * PER_PAGE_SATS["receipt-ocr"] * MSAT, "per page"
    ),
    **{
        slug: _flat(slug)
        for slug in (
            "email",
            "voice-cloning",
            "html-to-pdf",
            "render-card",
            "file-conversion",
            "remove-background",
            "upscale-image",
            "restore-face",
            "detect-nsfw",
            "detect-objects",
            "remove-object",
            "colorize-image",
            "deblur-image",
        )
    },
}


def estimate(service: str | None, query: Mapping[str, str]) -> dict[str, Any]:
    """The estimate body; raises ApiError L402_INVALID_PARAMS for unknown ids or bad params."""
    if not service:
        raise ApiError(
            "L402_INVALID_PARAMS",
            "The query parameter 'service' is required.",
            extra={"services": sorted(ESTIMATORS)},
        )
    estimator = ESTIMATORS.get(service)
    if estimator is None:
        raise ApiError(
            "L402_INVALID_PARAMS",
            f"Unknown estimate service {service!r}.",
            extra={"services": sorted(ESTIMATORS)},
        )
    try:
        params = estimator.params.model_validate(dict(query))
    except ValidationError as exc:
        fields = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
            for e in exc.errors(include_url=False, include_context=False)
        ]
        raise ApiError(
            "L402_INVALID_PARAMS",
            "Invalid estimate parameters: "
            + "; ".join(f"{f['field']}: {f['message']}" for f in fields),
            extra={"fields": fields},
        ) from None
    amount_msat = estimator.price_msat(params)
    return {
        "service": service,
        "amountSats": max(1, -(-amount_msat // MSAT)),
        "amountMsat": amount_msat,
        "unit": estimator.unit,
        "params": params.model_dump(exclude_none=True),
        "error_code": "L402_ESTIMATE_ONLY",
        "note": "Estimate only: no invoice was created. The 402 quote is authoritative.",
    }
