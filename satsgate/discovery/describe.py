"""One service, described: the single function every discovery document is built from.

A service's price shape is what its ServiceSpec declares (``price_shape``: model,
unit, minimum, what sets the rate, the estimator that quotes it), so every
document reports the same shape, and its amounts come from the same numbers:

- ``minSats``: the least any call is charged now (whole sats, rounded up);
- ``amountSats``: for ``flat``, the price of every call; otherwise the price of
  the service's own example request (``amountFor: "example"``), or, when the
  example carries placeholders that cannot be priced ("<base64 PDF>"), the
  minimum (``amountFor: "minimum"``).

The 402 quote of a request is its price.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from satsgate.config.settings import Settings
from satsgate.engines import Engines
from satsgate.errors import ApiError
from satsgate.services.base import ServiceSpec, sats_for_msat
from satsgate.services.catalog.rates import RateBook
from satsgate.services.inputs.params import ServiceParams

AnySpec = ServiceSpec[Any]


def endpoint(spec: AnySpec, base_url: str) -> str:
    return f"{base_url}/api/l402/{spec.slug}"


def estimate_url(estimate: str, base_url: str) -> str:
    return f"{base_url}/api/estimate-cost?service={estimate}"


def example_price_msat(spec: AnySpec, book: RateBook) -> int | None:
    """The price of the service's own example request at the rate ``book``, or None when
    it cannot be priced."""
    try:
        params = spec.parse(dict(spec.example), book)
        if isinstance(params, ServiceParams):
            params.checked()  # the file checks the gate runs before pricing
        return spec.price_msat(params, book)
    except (ValidationError, ApiError):
        # An example with placeholders ("<base64 PDF>") is refused like any bad request.
        return None


def pricing(spec: AnySpec, base_url: str, book: RateBook) -> dict[str, Any]:
    """{model, unit, currency, minSats, amountSats, amountFor?, baseSats?, rateBy?, tiers?,
    btcPegged?, note?, estimate?} from the spec's declared price shape."""
    shape = spec.price_shape
    min_sats = sats_for_msat(shape.minimum_msat(book))
    doc: dict[str, Any] = {
        "model": shape.model,
        "unit": shape.unit,
        "currency": "sat",
        "minSats": min_sats,
    }
    if shape.model == "flat":
        doc["amountSats"] = min_sats
    else:
        # Invoices are whole sats, rounded up: this is what such a call is charged.
        example_msat = example_price_msat(spec, book)
        if example_msat is not None:
            doc["amountSats"], doc["amountFor"] = sats_for_msat(example_msat), "example"
        else:
            doc["amountSats"], doc["amountFor"] = min_sats, "minimum"
    if shape.base_sats:
        doc["baseSats"] = shape.base_sats
    if shape.rate_by:
        doc["rateBy"] = list(shape.rate_by)
    if shape.tier_min_sats:
        doc["tiers"] = [
            {"modelId": model_id, "minSats": sats} for model_id, sats in shape.tier_min_sats.items()
        ]
    if shape.btc_pegged:
        doc["btcPegged"] = True
    if shape.note:
        doc["note"] = shape.note
    if shape.estimate is not None:
        doc["estimate"] = estimate_url(shape.estimate, base_url)
    return doc


def _sats(amount: int) -> str:
    return "1 sat" if amount == 1 else f"{amount} sats"


def price_text(price: dict[str, Any]) -> str:
    """One line for people and models: '5 sats per call', 'per message by destination, from
    15 sats (example request: 15 sats); the 402 quote is the price'."""
    amount = price["amountSats"]
    if price["model"] == "flat":
        return f"{_sats(amount)} per call"
    shape = "priced per request" if price["model"] == "dynamic" else price["unit"]
    if price.get("rateBy"):
        shape += " by " + " and ".join(factor.replace("_", " ") for factor in price["rateBy"])
    text = f"{shape}, from {_sats(price['minSats'])}"
    if price.get("amountFor") == "example":
        text += f" (example request: {_sats(amount)})"
    return f"{text}; the 402 quote is the price"


def describe(spec: AnySpec, settings: Settings, engines: Engines, book: RateBook) -> dict[str, Any]:
    """GET /api/l402/<slug>: what the service does, what it costs (at the rate ``book``),
    what it takes."""
    base = settings.public_base_url
    doc: dict[str, Any] = {
        "id": spec.slug,
        "name": spec.title,
        "tool": spec.tool_name,
        "category": spec.category,
        "description": spec.description,
        "endpoint": endpoint(spec, base),
        "method": "POST",
        "mode": spec.mode,
        "pricing": pricing(spec, base, book),
        "input_schema": spec.params.model_json_schema(),
        "failure_codes": list(spec.failure_codes),
        "example": dict(spec.example),
        "available": spec.is_available(engines),
        "unavailable_reason": spec.unavailable_reason(engines),
        "untrusted_output": spec.untrusted_output,
        "models": list(spec.model_ids),
    }
    if spec.job_type is not None:
        doc["jobType"] = spec.job_type
    return doc


# -- search ---------------------------------------------------------------------------------

# Weight of a query term found in each field: a slug or tool-name hit says more
# than a word somewhere in the description.
_FIELD_WEIGHTS = (("slug", 5), ("tool", 4), ("title", 3), ("category", 2), ("description", 1))
_TERM = re.compile(r"[a-z0-9]+")


def _terms(text: str) -> list[str]:
    return _TERM.findall(text.lower())


def search(services: Iterable[AnySpec], query: str) -> list[tuple[int, AnySpec]]:
    """Services ranked by weighted term matches, best first; an empty query keeps them all."""
    terms = _terms(query)
    if not terms:
        return [(0, spec) for spec in services]
    ranked: list[tuple[int, int, AnySpec]] = []
    for order, spec in enumerate(services):
        fields = {
            "slug": spec.slug.lower(),
            "tool": spec.tool_name.lower(),
            "title": spec.title.lower(),
            "category": spec.category.lower(),
            "description": spec.description.lower(),
        }
        words = {name: set(_terms(value)) for name, value in fields.items()}
        # The query naming the service outright ("text-to-speech", "render_card") wins
        # over any service that merely shares its words ("speech-to-text").
        score = 100 if terms in (_terms(spec.slug), _terms(spec.tool_name)) else 0
        for term in terms:
            for name, weight in _FIELD_WEIGHTS:
                if term in words[name]:
                    score += 2 * weight  # a whole word
                elif term in fields[name]:
                    score += weight  # part of a word: "card" in "cards"
        if score:
            ranked.append((score, order, spec))
    ranked.sort(key=lambda item: (-item[0], item[1]))
    return [(score, spec) for score, _, spec in ranked]
