"""BTC-pegged rates: fiat-cost services re-quoted hourly from a BTC price source.

The spec's numbers (TTS characters per sat, SMS and call rates per
destination, the AI-call AI cost, the voice-bridge cost) are the fixed
fallback, taken as quoted at :data:`REFERENCE_BTC_USD`. :meth:`Rates.refresh`
(scheduled hourly by the app) fetches the BTC price from
``settings.engines["price_source"]`` and records a snapshot; a failure keeps
the last good snapshot (or the fallback).

What was quoted is what is charged: the gate re-prices a paid call before
running it (the request its 402 priced keeps that quote, by its digest, for
:data:`QUOTE_KEPT_S`: another instance's book, or one started on the fallback after a
restart, may price it higher) and refuses (with a full refund) a changed request
that prices higher than was paid. So a price must not rise between the 402 and the
call: every pegged price is the *lowest* over the last :data:`KEPT_SNAPSHOTS` snapshots. A call
used within an hour of its quote (invoices expire after 10 minutes) therefore
never prices above its quote; a price increase reaches callers one refresh
late, a decrease at once.

The rate book is app-scoped: :class:`Rates` (created by ``create_app``, under
``appkeys.RATES``) holds the app's current :class:`RateBook`, which price functions
take next to the request's params (``ServiceSpec.price_msat(params, book)``). A
book only ever holds validated numbers and is replaced, never mutated in place,
so a quote priced with one book stays consistent while a refresh installs the next.
The book also carries the app's telephony destination table
(:class:`~satsgate.domain.telephony.Destinations`: the built-in table or
``[telephony] rates_file``), fixed for the app's life: every book a :class:`Rates`
installs keeps it, so whatever prices by destination with a book prices by the app's
table.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import httpx

from satsgate.config.settings import Settings
from satsgate.domain.telephony import BUILTIN, Destinations

log = logging.getLogger(__name__)

REFERENCE_BTC_USD: Final = 100_000.0
KEPT_SNAPSHOTS: Final = 3
# How long after its 402 the request a payment was quoted for keeps that quote where a
# rate book prices it higher (the hourly refresh's span: within it, one instance's book
# never rises above its own quote either). A credential used later is priced now.
QUOTE_KEPT_S: Final = 3600
# A live price this far from the reference is treated as a broken source.
MIN_FACTOR, MAX_FACTOR = 0.2, 5.0
FETCH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Snapshot:
    btc_usd: float
    fetched_at: float
    source: str

    @property
    def sats_factor(self) -> float:
        """Sats per fallback sat: BTC up -> fewer sats for the same fiat cost."""
        return REFERENCE_BTC_USD / self.btc_usd


@dataclass(frozen=True)
class RateBook:
    snapshots: tuple[Snapshot, ...] = ()
    # The destinations SMS, calls, fax and the voice bridge are served to and priced by.
    destinations: Destinations = BUILTIN

    @property
    def factor(self) -> float:
        """The multiplier applied to fallback sat prices: the lowest of the kept snapshots."""
        if not self.snapshots:
            return 1.0
        return min(s.sats_factor for s in self.snapshots)

    def msat(self, fallback_msat: float) -> int:
        """A fiat-cost price in msat at these rates (rounded up)."""
        return math.ceil(fallback_msat * self.factor)

    def chars_per_sat(self, fallback_chars_per_sat: float) -> float:
        """Characters per sat at these rates (BTC up -> more characters per sat)."""
        return fallback_chars_per_sat / self.factor

    def with_snapshot(self, snapshot: Snapshot) -> RateBook:
        return replace(self, snapshots=(*self.snapshots, snapshot)[-KEPT_SNAPSHOTS:])

    def describe(self) -> dict[str, Any]:
        latest = self.snapshots[-1] if self.snapshots else None
        return {
            "referenceBtcUsd": REFERENCE_BTC_USD,
            "btcUsd": latest.btc_usd if latest else None,
            "updatedAt": int(latest.fetched_at) if latest else None,
            "factor": self.factor,
            "fallback": latest is None,
        }


# The spec's fixed fallback rates: no BTC price snapshot yet (or no price source), and
# the built-in destination table. What prices where no app exists (tests, tools).
FALLBACK: Final = RateBook()


class Rates:
    """One app's BTC rate book: ``book`` is the one in force; ``refresh`` (hourly) installs
    the next. Owned by the app (``app[RATES]``); never shared through module state.
    ``destinations``: the app's telephony table, kept by every book installed."""

    def __init__(self, destinations: Destinations = BUILTIN) -> None:
        self._book = replace(FALLBACK, destinations=destinations)

    @property
    def book(self) -> RateBook:
        return self._book

    @property
    def destinations(self) -> Destinations:
        return self._book.destinations

    def install(self, book: RateBook) -> None:
        """Install a rate book's BTC snapshots (a refresh, or a test's known price); the
        destination table stays the app's."""
        self._book = replace(book, destinations=self._book.destinations)

    async def refresh(self, http: httpx.AsyncClient, settings: Settings) -> bool:
        """Fetch the BTC price and record a snapshot. Never raises; True if rates were
        updated.

        Schedule hourly (and once at start). Without ``engines.price_source`` the
        fixed fallback rates stay in force.
        """
        source = _source(settings)
        if source is None:
            return False
        url, path = source
        try:
            resp = await http.get(
                url, timeout=FETCH_TIMEOUT_S, headers={"Accept": "application/json"}
            )
            resp.raise_for_status()
            price = parse_price(resp.json(), path)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning(
                "BTC price refresh from %s failed (%s); keeping the current rates", url, exc
            )
            return False
        self.install(self._book.with_snapshot(Snapshot(price, time.time(), url)))
        log.info("BTC price %.0f USD from %s; pegged factor %.4f", price, url, self._book.factor)
        return True


# -- the price source ----------------------------------------------------------------------

_PRICE_KEYS = ("USD", "usd", "price", "last", "amount", "rate_float", "rateUsd", "rate")
_CONTAINERS = ("bitcoin", "BTC", "btc", "data", "bpi", "result", "ticker")


def _find_price(doc: Any, depth: int = 0) -> float | None:
    """The BTC/USD number in the usual JSON shapes: {"USD": n}, {"bitcoin": {"usd": n}},
    {"data": {"amount": "n"}}, {"bpi": {"USD": {"rate_float": n}}}, or a bare number."""
    if isinstance(doc, bool):
        return None
    if isinstance(doc, int | float):
        return float(doc)
    if isinstance(doc, str):
        try:
            return float(doc.replace(",", ""))
        except ValueError:
            return None
    if not isinstance(doc, Mapping) or depth > 4:
        return None
    for key in (*_PRICE_KEYS, *_CONTAINERS):
        if key in doc:
            found = _find_price(doc[key], depth + 1)
            if found is not None:
                return found
    return None


def _source(settings: Settings) -> tuple[str, str | None] | None:
    """(url, dotted path or None) from engines.price_source: a URL, or {url, path}."""
    raw = settings.engines.get("price_source")
    if isinstance(raw, str) and raw:
        return raw, None
    if isinstance(raw, Mapping) and isinstance(raw.get("url"), str):
        path = raw.get("path")
        return raw["url"], path if isinstance(path, str) else None
    return None


def parse_price(doc: Any, path: str | None = None) -> float:
    """The BTC/USD price in a price-source response; ValueError if absent or implausible."""
    value: Any = doc
    if path:
        for part in path.split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise ValueError(f"no {path!r} in the price source response")
            value = value[part]
    price = _find_price(value)
    if price is None or not math.isfinite(price):
        raise ValueError("no BTC price in the price source response")
    factor = REFERENCE_BTC_USD / price if price > 0 else math.inf
    if not MIN_FACTOR <= factor <= MAX_FACTOR:
        raise ValueError(f"implausible BTC price {price}")
    return price
