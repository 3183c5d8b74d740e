"""The kind 31402 event: one addressable announcement of this node's paid services.

Tags, in this order::

    ["d", identifier]                   the addressable event's identifier
    ["name", name]
    ["url", <public URL>] ...           1 to 10: the public URL, then [discovery.nostr] urls
    ["about", text], ["summary", text]  the same text under both names (readers differ)
    ["pmi", "l402", "lightning"]        one per accepted rail: L402,
    ["pmi", "payment"]                  the Payment scheme (MPP),
    ["pmi", "xcashu"]                   and Cashu ecash when [cashu] mints are set
    ["price", <slug>, <sats>, "sat"]    per service this node serves: the price of a call,
                                        the lowest one for a service priced by its input
    ["t", topic] ...                    l402, mpp, lightning, mcp, the services' categories,
                                        then [discovery.nostr] topics

Content: ``{"capabilities": [{"name", "description", "endpoint", "schema",
"outputSchema"}], "version"}``: per service, its slug, description, endpoint, and the
request and answer JSON Schemas of the OpenAPI document (``/api/openapi.json``), each with
the components it uses under ``$defs``. When that is larger than ``max_content_bytes``
(relays refuse large events), each schema is instead a ``$ref`` into the served OpenAPI
document. ``version`` is satsgate's version.

Only services this node can serve are announced (an unavailable one would answer 503).
The event is signed by nostr-sdk (BIP-340 Schnorr), never by hand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nostr_sdk import EventBuilder, Keys, Kind, Tag, Timestamp

from satsgate import __version__
from satsgate.config.nostr import MAX_URLS, NostrConfig
from satsgate.config.settings import Settings
from satsgate.discovery.documents import Catalog
from satsgate.discovery.openapi import openapi_document

KIND = 31402
BASE_TOPICS = ("l402", "mpp", "lightning", "mcp")
_COMPONENTS = "#/components/schemas/"


@dataclass(frozen=True)
class Listing:
    """What an announcement says about prices: sats per served service, in catalog order,
    and which of them follow the BTC rate book."""

    prices: tuple[tuple[str, int], ...]
    pegged: frozenset[str]

    def changed_from(self, published: Listing, pct: float) -> bool:
        """A service added or gone, a price that is not pegged changed at all, or a
        pegged price moved by ``pct`` percent or more (see satsgate.config.nostr)."""
        old, new = dict(published.prices), dict(self.prices)
        if old.keys() != new.keys():
            return True
        for slug, sats in new.items():
            before = old[slug]
            if sats == before:
                continue
            if slug not in self.pegged:
                return True
            if abs(sats - before) * 100 >= pct * max(before, 1):
                return True
        return False


def listing(catalog: Catalog) -> Listing:
    served = [s for s in catalog.services if s["available"]]
    return Listing(
        prices=tuple((s["id"], int(s["pricing"]["minSats"])) for s in served),
        pegged=frozenset(s["id"] for s in served if s["pricing"].get("btcPegged")),
    )


def cashu_enabled(settings: Settings) -> bool:
    """Whether Cashu ecash is accepted ([cashu] mints set), when this build has Cashu."""
    table = getattr(settings, "cashu", None)
    return isinstance(table, Mapping) and bool(table.get("mints"))


def tags(
    settings: Settings, config: NostrConfig, catalog: Catalog, prices: Listing
) -> list[list[str]]:
    urls = list(dict.fromkeys([settings.public_base_url, *config.urls]))[:MAX_URLS]
    out: list[list[str]] = [["d", config.identifier], ["name", config.name]]
    out += [["url", url] for url in urls]
    out += [["about", config.about], ["summary", config.about]]
    out += [["pmi", "l402", "lightning"], ["pmi", "payment"]]
    if cashu_enabled(settings):
        out.append(["pmi", "xcashu"])
    out += [["price", slug, str(sats), "sat"] for slug, sats in prices.prices]
    categories = (s["category"] for s in catalog.services if s["available"])
    topics = (t.lower() for t in (*BASE_TOPICS, *categories, *config.topics))
    out += [["t", topic] for topic in dict.fromkeys(topics)]
    return out


def content(catalog: Catalog, max_bytes: int) -> str:
    """The capabilities document (CPU work: run it off the event loop)."""
    doc = openapi_document(catalog, {("POST", "/api/l402/{slug}")}, "")
    components: dict[str, Any] = doc["components"]["schemas"]
    served = [s for s in catalog.services if s["available"]]
    operations = [doc["paths"][f"/api/l402/{s['id']}"]["post"] for s in served]
    for inline in (True, False):
        capabilities = []
        for service, op in zip(served, operations, strict=True):
            request_schema = op["requestBody"]["content"]["application/json"]["schema"]
            ok = op["responses"].get("200") or op["responses"]["202"]
            answer_schema = ok["content"]["application/json"]["schema"]
            capabilities.append(
                {
                    "name": service["id"],
                    "description": service["description"],
                    "endpoint": service["endpoint"],
                    "schema": _schema(request_schema, components, inline, catalog.base_url),
                    "outputSchema": _schema(answer_schema, components, inline, catalog.base_url),
                }
            )
        text = json.dumps(
            {"capabilities": capabilities, "version": __version__},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        if len(text.encode()) <= max_bytes:
            break
    return text


def _schema(
    schema: dict[str, Any], components: Mapping[str, Any], inline: bool, base_url: str
) -> dict[str, Any]:
    """``schema`` standing alone: its components under ``$defs`` (``inline``), or its
    references made absolute links into the served OpenAPI document."""
    if not inline:
        linked: dict[str, Any] = _rewrite(schema, f"{base_url}/api/openapi.json{_COMPONENTS}")
        return linked
    needed: dict[str, None] = {}
    todo = list(_refs(schema))
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed[name] = None
        todo.extend(_refs(components[name]))
    out: dict[str, Any] = _rewrite(schema, "#/$defs/")
    if "$ref" in out:  # a bare reference: give it a body to hang $defs on
        out = {"allOf": [out]}
    if needed:
        out["$defs"] = {name: _rewrite(components[name], "#/$defs/") for name in needed}
    return out


def _refs(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith(_COMPONENTS):
            yield ref[len(_COMPONENTS) :]
        for item in value.values():
            yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def _rewrite(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        return {
            k: (
                prefix + v[len(_COMPONENTS) :]
                if k == "$ref" and isinstance(v, str) and v.startswith(_COMPONENTS)
                else _rewrite(v, prefix)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_rewrite(item, prefix) for item in value]
    return value


def sign(keys: Keys, event_tags: Sequence[Sequence[str]], text: str, created_at: int) -> str:
    """The signed event as JSON (NIP-01), by nostr-sdk."""
    builder = (
        EventBuilder(Kind(KIND), text)
        .tags([Tag.parse(list(tag)) for tag in event_tags])
        .custom_created_at(Timestamp.from_secs(created_at))
    )
    event = keys.sign_event(builder.finalize_unsigned(keys.public_key()))
    return str(event.as_json())


def now() -> int:
    return int(time.time())
