"""``HEAD /api/l402/<slug>``: a service's price in headers, with no invoice and no write.

An agent (or a directory crawling Nostr announcements) learns what a call costs before
deciding to make it, without the 402's invoice, payment row or rate-limit token:

- ``X-L402-Price-Sats``: what a call costs; for a service priced by its input, the
  least any valid call is charged now (whole sats, rounded up, as invoices are);
- ``X-L402-Price-Range-Sats``: ``<min>-<max>`` for a price with a known top, ``<min>-``
  (open-ended) for a price that grows with the input; the same number twice for a
  flat price;
- ``X-L402-Price-Model``: the price shape's model (``flat``, ``per_character``, ...).

The 402 quote of the actual request stays the price that is charged.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from satsgate.engines import Engines
from satsgate.errors import ErrorCode
from satsgate.services.base import ServiceSpec, sats_for_msat
from satsgate.services.catalog.rates import RateBook

PRICE = "X-L402-Price-Sats"
RANGE = "X-L402-Price-Range-Sats"
MODEL = "X-L402-Price-Model"


def price_range_sats(spec: ServiceSpec[Any], book: RateBook) -> tuple[int, int | None]:
    """(lowest, highest or None when open-ended) price of one call at the rate ``book``,
    in sats."""
    shape = spec.price_shape
    low = sats_for_msat(shape.minimum_msat(book))
    if shape.model == "flat":
        return low, low
    return low, None


def price_headers(spec: ServiceSpec[Any], book: RateBook) -> dict[str, str]:
    low, high = price_range_sats(spec, book)
    return {
        PRICE: str(low),
        RANGE: f"{low}-{'' if high is None else high}",
        MODEL: spec.price_shape.model,
        "Cache-Control": "public, max-age=60",
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Expose-Headers": f"{PRICE}, {RANGE}, {MODEL}",
    }


def price_probe(spec: ServiceSpec[Any], engines: Engines, book: RateBook) -> web.Response:
    """200 with the price headers at the app's rate ``book``; 503 (X-Error-Code
    SERVICE_UNAVAILABLE) when no engine serves the service here, since a POST would be
    refused before any invoice."""
    headers = price_headers(spec, book)
    if not spec.is_available(engines):
        headers["X-Error-Code"] = ErrorCode.SERVICE_UNAVAILABLE
        return web.Response(status=503, headers=headers)
    return web.Response(status=200, headers=headers)
