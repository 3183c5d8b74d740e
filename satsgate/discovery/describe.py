"""One service, described: the single function every discovery document is built from.

A service's price comes from its own ``price_msat``, so a new ServiceSpec shows
up with a price here without any edit:

- ``flat`` when ``price_msat`` never looks at the request (it is called with a
  stand-in that raises on any use), and ``amountSats`` is that price;
- otherwise the unit of its ``/api/estimate-cost`` estimator when one has the
  service's slug (``per_character``, ``per_second``, ...), else ``dynamic``;
  ``amountSats`` is then the price of the service's own example, when the
  example validates and prices. The 402 quote of a request is its price.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, cast

from pydantic import ValidationError

from satsgate.config import Settings
from satsgate.errors import ApiError
from satsgate.services.base import ServiceSpec, sats_for_msat
from satsgate.services.pricing import ESTIMATORS

AnySpec = ServiceSpec[Any]


def _model_of(unit: str) -> str:
    """'per started minute' -> 'per_minute'; a price per request or per call that still
    depends on the request is 'dynamic'."""
    words = unit.split()
    if len(words) >= 2 and words[0] == "per" and words[-1] not in ("call", "request"):
        return f"per_{words[-1]}"
    return "dynamic"


def endpoint(spec: AnySpec, base_url: str) -> str:
    return f"{base_url}/api/l402/{spec.slug}"


class _RequestStandIn:
    """Passed to ``price_msat`` in place of params: any use of it raises."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def flat_price_msat(spec: AnySpec) -> int | None:
    """The price when it does not depend on the request, else None."""
    try:
        return spec.price_msat(cast(Any, _RequestStandIn()))
    except Exception:  # the price reads the request (or cannot be had without one)
        return None


def example_price_msat(spec: AnySpec) -> int | None:
    """The price of the service's own example request, or None when it cannot be computed."""
    try:
        params = spec.params.model_validate(dict(spec.example))
        return spec.price_msat(params)
    except (ValidationError, ApiError, ValueError, LookupError, ArithmeticError, TypeError):
        # An example that does not validate (placeholders such as "<base64 PDF>")
        # or a price that needs more than the example gives has no example price.
        return None


def pricing(spec: AnySpec, base_url: str) -> dict[str, Any]:
    """{model, unit, currency, amountSats?, amountFor?, estimate?}."""
    amount_msat = flat_price_msat(spec)
    if amount_msat is not None:
        model, unit = "flat", "per call"
    else:
        estimator = ESTIMATORS.get(spec.slug)
        unit = estimator.unit if estimator is not None else "per request"
        model = _model_of(unit)
        amount_msat = example_price_msat(spec)
    doc: dict[str, Any] = {"model": model, "unit": unit, "currency": "sat"}
    if amount_msat is not None:
        # Invoices are whole sats, rounded up: this is what such a call is charged.
        doc["amountSats"] = sats_for_msat(amount_msat)
        if model != "flat":
            doc["amountFor"] = "example"
    if spec.slug in ESTIMATORS:
        doc["estimate"] = f"{base_url}/api/estimate-cost?service={spec.slug}"
    return doc


def _sats(amount: int) -> str:
    return "1 sat" if amount == 1 else f"{amount} sats"


def price_text(price: dict[str, Any]) -> str:
    """One line for people and models: '5 sats per call', 'per second (example request: ...)'."""
    amount = price.get("amountSats")
    if price["model"] == "flat" and amount is not None:
        return f"{_sats(amount)} per call"
    shape = "priced per request" if price["model"] == "dynamic" else price["unit"]
    if amount is None:
        return f"{shape}; the 402 quote is the price"
    return f"{shape} (example request: {_sats(amount)}); the 402 quote is the price"


def describe(spec: AnySpec, settings: Settings) -> dict[str, Any]:
    """GET /api/l402/<slug>: what the service does, what it costs, what it takes."""
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
        "pricing": pricing(spec, base),
        "input_schema": spec.params.model_json_schema(),
        "failure_codes": list(spec.failure_codes),
        "example": dict(spec.example),
        "available": spec.is_available(settings),
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
