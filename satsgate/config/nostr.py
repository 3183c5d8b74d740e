"""``[discovery.nostr]``: where and how often satsgate announces itself on Nostr.

    [discovery.nostr]
    relays = ["wss://relay.example.com", "wss://nos.example.org"]
    # optional:
    name = "satsgate"                  # the event's name tag
    about = "..."                      # about and summary tags (default: a sentence)
    identifier = "satsgate"            # the addressable event's d tag
    urls = ["http://xyz.onion"]        # more addresses beside the public URL (10 in all)
    topics = ["ai", "pdf"]             # t tags beside satsgate's own
    republish_interval_s = 86400       # a fresh event at least this often
    check_interval_s = 300             # how often prices are compared with the last event
    min_republish_interval_s = 3600    # a price change republishes at most this often
    price_change_pct = 10              # what counts as a price change (see below)
    timeout_s = 10                     # per relay: connect, send, wait for its OK
    max_content_bytes = 60000          # larger: schemas become links into the OpenAPI

What counts as a price change: a service added or gone, a price that is not BTC-pegged
changing at all, or a BTC-pegged price moving by ``price_change_pct`` percent or more
from the price in the last published event. The BTC rate book is refreshed hourly and
moves pegged prices by a fraction of a percent most hours: republishing on every move
would send relays an event an hour for nothing, and the 402 quote is the price anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_KEYS = {
    "relays",
    "name",
    "about",
    "identifier",
    "urls",
    "topics",
    "republish_interval_s",
    "check_interval_s",
    "min_republish_interval_s",
    "price_change_pct",
    "timeout_s",
    "max_content_bytes",
}
MAX_URLS = 10
DEFAULT_ABOUT = (
    "Pay-per-call AI, document and communication services inside a Lightning node: "
    "pay each call over L402 or the Payment scheme (MPP), or through MCP; a call that "
    "fails after payment is refunded."
)


@dataclass(frozen=True)
class NostrConfig:
    relays: tuple[str, ...] = ()
    name: str = "satsgate"
    about: str = DEFAULT_ABOUT
    identifier: str = "satsgate"
    urls: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    republish_interval_s: float = 86400.0
    check_interval_s: float = 300.0
    min_republish_interval_s: float = 3600.0
    price_change_pct: float = 10.0
    timeout_s: float = 10.0
    max_content_bytes: int = 60000

    @property
    def enabled(self) -> bool:
        return bool(self.relays)

    @classmethod
    def from_discovery(cls, discovery: Mapping[str, Any]) -> NostrConfig:
        """From the settings' ``[discovery]`` table; ValueError says what is wrong."""
        unknown_tables = set(discovery) - {"nostr"}
        if unknown_tables:
            raise ValueError(f"unknown [discovery] keys: {', '.join(sorted(unknown_tables))}")
        table = discovery.get("nostr", {})
        if not isinstance(table, Mapping):
            raise ValueError("[discovery.nostr] must be a table")
        unknown = set(table) - _KEYS
        if unknown:
            raise ValueError(f"unknown [discovery.nostr] keys: {', '.join(sorted(unknown))}")
        relays = _strings(table.get("relays", ()), "relays")
        for relay in relays:
            parsed = urlsplit(relay)
            if parsed.scheme not in ("ws", "wss") or not parsed.hostname:
                raise ValueError(f"[discovery.nostr] relays: {relay!r} is not a ws(s):// URL")
        urls = _strings(table.get("urls", ()), "urls")
        for url in urls:
            if urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"[discovery.nostr] urls: {url!r} is not an http(s) URL")
        values: dict[str, Any] = {
            "relays": tuple(dict.fromkeys(relays)),
            "urls": urls,
            "topics": _strings(table.get("topics", ()), "topics"),
        }
        for key in ("name", "about", "identifier"):
            if key in table:
                if not isinstance(table[key], str) or not table[key].strip():
                    raise ValueError(f"[discovery.nostr] {key} must be a non-empty string")
                values[key] = table[key].strip()
        for key in (
            "republish_interval_s",
            "check_interval_s",
            "min_republish_interval_s",
            "price_change_pct",
            "timeout_s",
        ):
            if key in table:
                number = float(table[key])
                if number < 0 or (key in ("timeout_s", "check_interval_s") and number <= 0):
                    raise ValueError(f"[discovery.nostr] {key} must be positive")
                values[key] = number
        if "max_content_bytes" in table:
            values["max_content_bytes"] = int(table["max_content_bytes"])
        return cls(**values)


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"[discovery.nostr] {key} must be a list of strings")
    return tuple(v.strip() for v in value if v.strip())
