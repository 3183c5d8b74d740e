"""Model selection: defaults, tiers, pinned ids, ``model: 'auto'`` and the path form.

Rules (spec, Endpoints 2 and 3):

- no ``modelId``: the service's default model;
- ``tier`` (or ``modelId``) ``best`` / ``better`` / ``standard``: that tier's model;
- a numeric ``modelId`` (number or digit string) pins that model; an id that is
  not a model of the service -> L402_INVALID_PARAMS before any invoice; a
  pinned ``modelId`` wins over ``tier``;
- ``model: 'auto'`` (text generation, image, audio) picks by the request with
  the heuristics below; the response names the choice in ``X-Route-Model`` and
  a JSON body gets ``routed: {modelId, error_code: "L402_AUTO_ROUTED"}``.

Every function here is pure and deterministic, so the 402 quote and the paid
call choose the same model and so the same price.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from satsgate.errors import ErrorCode
from satsgate.services.base import ServiceResult
from satsgate.services.catalog.models import MODELS_BY_ID

TIERS: Final = ("best", "better", "standard")
AUTO_ROUTED = ErrorCode.L402_AUTO_ROUTED
ROUTE_HEADER = "X-Route-Model"
MODEL_FIELDS: Final = ("modelId", "model_id", "model", "tier")


def select_model(
    model_id: str | int | None,
    tier: str | None,
    *,
    allowed: Sequence[int],
    default: int,
    tier_aliases: Mapping[str, int] | None = None,
) -> int:
    """The model a request asks for among ``allowed``; ValueError (-> L402_INVALID_PARAMS)."""
    if model_id is not None and model_id != "":
        if isinstance(model_id, bool):
            raise ValueError("modelId must be a number or a tier name")
        text = model_id if isinstance(model_id, int) else model_id.strip()
        if isinstance(text, int) or (text.isascii() and text.isdecimal()):
            pinned = int(text)
            if pinned not in allowed:
                raise ValueError(
                    f"model {pinned} is not a model of this service; use one of "
                    + ", ".join(str(m) for m in allowed)
                )
            return pinned
        return _by_tier(text, allowed, tier_aliases)
    if tier is not None:
        return _by_tier(tier, allowed, tier_aliases)
    return default


def _by_tier(name: str, allowed: Sequence[int], aliases: Mapping[str, int] | None) -> int:
    key = name.strip().lower()
    if aliases and key in aliases:
        return aliases[key]
    for model_id in allowed:  # ``allowed`` is listed best first
        if MODELS_BY_ID[model_id].tier == key:
            return model_id
    names = sorted({t for m in allowed if (t := MODELS_BY_ID[m].tier)} | set(aliases or ()))
    raise ValueError(f"no {name!r} tier for this service; use one of {', '.join(names)}")


# -- auto routing --------------------------------------------------------------------------

# Text generation: what a small model does badly.
_COMPLEX_TEXT = re.compile(
    r"```|\b(prove|proof|derive|step[- ]by[- ]step|analy[sz]e|debug|refactor|algorithm|"
    r"theorem|legal|contract|diagnos\w*|architecture|optimi[sz]e|reason(ing)?)\b",
    re.IGNORECASE,
)
AUTO_TEXT_LONG_CHARS = 4000
AUTO_TEXT_QUESTIONS = 3


def auto_text_model(text: str, *, has_image: bool, has_file_context: bool) -> int:
    """Text generation: vision, long inputs, documents or complex asks -> best (6);
    everything else -> standard (31).

    Complex: a code block, a reasoning or analysis verb (prove, derive, analyse,
    debug, refactor, optimise, ...), or three or more questions.
    """
    if has_image or has_file_context or len(text) > AUTO_TEXT_LONG_CHARS:
        return 6
    if _COMPLEX_TEXT.search(text) or text.count("?") >= AUTO_TEXT_QUESTIONS:
        return 6
    return 31


_TEXT_IN_IMAGE = re.compile(
    r"[\"“«].{2,}?[\"”»]|\b(typography|logo|poster|lettering)\b", re.IGNORECASE
)
AUTO_IMAGE_LONG_PROMPT = 400


def auto_image_model(prompt: str, *, references: int, max_side: int) -> int:
    """Image generation: several references or a side above 1024 -> better (8, up to 10
    references, 2K); text to render in the image or a long prompt -> best (16);
    a short plain prompt -> standard (2)."""
    if references > 1 or max_side > 1024:
        return 8
    if len(prompt) > AUTO_IMAGE_LONG_PROMPT or _TEXT_IN_IMAGE.search(prompt):
        return 16
    return 2


def auto_tts_model(
    *, voice: str | None, voice_description: str | None, language: str | None, family_of: Any
) -> int:
    """Speech: a preset voice picks its own tier; a voice description or a language other
    than English -> global (43, 602+ languages); otherwise premium (33).

    ``family_of(voice)`` returns the model id whose voice set holds ``voice``, or None.
    """
    if voice:
        owner = family_of(voice)
        if owner is not None:
            return int(owner)
    if voice_description or (language and language.lower().split("-")[0] not in ("en", "eng")):
        return 43
    return 33


def routed_result(result: ServiceResult, model_id: int) -> ServiceResult:
    """Mark an auto-routed result: X-Route-Model header, and ``routed`` in a JSON body."""
    headers = {**result.headers, ROUTE_HEADER: str(model_id)}
    body = result.body
    if isinstance(body, dict):
        body = {**body, "routed": {"modelId": model_id, "error_code": AUTO_ROUTED}}
    return replace(result, body=body, headers=headers)


# -- path form -----------------------------------------------------------------------------


def apply_path_model(body: dict[str, Any], model: str) -> dict[str, Any]:
    """``/api/m/{service}/{model}``: the body with the path's model unless the body names one.

    A body field wins: if any of modelId, model_id, model or tier is present the
    body is returned unchanged. ``auto`` becomes ``model: 'auto'``; anything
    else (an id or a tier name) becomes ``modelId``. The service's own
    validation then accepts or refuses it like any body.
    """
    if any(key in body for key in MODEL_FIELDS):
        return dict(body)
    value = model.strip()
    if value.lower() == "auto":
        return {**body, "model": "auto"}
    return {**body, "modelId": int(value) if value.isascii() and value.isdecimal() else value}
