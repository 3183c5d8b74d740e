"""Publishing the announcement: a background task, never in the way of a request.

At start (once the app runs), every ``republish_interval_s`` (24 h) and on a price
change (:meth:`Listing.changed_from`, at most every ``min_republish_interval_s``), a new
event is signed; each relay has its own task that sends the newest event over a
websocket (NIP-01 ``["EVENT", ...]``, waiting for its ``["OK", id, accepted, message]``)
with ``timeout_s`` for the whole exchange. A relay that is down, refuses or hangs is
retried with exponential backoff (5 s doubling to 1 h, with jitter), and a newer event
replaces the one it has not taken. Nothing here runs on a request's path; the event's
content (the schemas) is built once, in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from aiohttp import web
from nostr_sdk import Keys

from satsgate.appkeys import NOSTR_STATUS
from satsgate.config.nostr import NostrConfig
from satsgate.config.settings import Settings
from satsgate.discovery.documents import Catalog
from satsgate.nostr import announcement
from satsgate.nostr.announcement import Listing
from satsgate.nostr.keys import ensure_keys, npub

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 5.0
MAX_BACKOFF_S = 3600.0


# What one attempt to publish at a relay came to.
Outcome = Literal["published", "refused", "unreachable"]


@dataclass
class RelayState:
    url: str
    state: str = "pending"  # pending, published, refused, unreachable
    detail: str = ""
    published_id: str = ""
    published_at: float | None = None
    attempts: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "state": self.state,
            "detail": self.detail,
            "publishedEventId": self.published_id or None,
            "publishedAt": int(self.published_at) if self.published_at else None,
            "attempts": self.attempts,
        }


class Announcer:
    """Signs the announcement and keeps every relay up to date with the newest one."""

    def __init__(
        self,
        *,
        settings: Settings,
        config: NostrConfig,
        keys: Keys,
        catalog: Callable[[], Catalog],
    ) -> None:
        self.settings = settings
        self.config = config
        self.keys = keys
        self.npub = npub(keys)
        self._catalog = catalog
        self.relays = {url: RelayState(url) for url in config.relays}
        self._wake = {url: asyncio.Event() for url in config.relays}
        self.event_json = ""
        self.event_id = ""
        self.created_at = 0
        self.reason = ""
        self.published_listing: Listing | None = None
        self._signed_at = 0.0  # time.monotonic() of the newest event
        self._content: str | None = None
        self.events_signed = 0

    # -- the event ------------------------------------------------------------------------

    async def sign_current(self, reason: str) -> None:
        """Sign a new event from the catalog as it is now and hand it to every relay."""
        catalog = self._catalog()
        if self._content is None:
            self._content = await asyncio.to_thread(
                announcement.content, catalog, self.config.max_content_bytes
            )
        prices = announcement.listing(catalog)
        tags = announcement.tags(self.settings, self.config, catalog, prices)
        # An addressable event replaces an older one only with a later created_at.
        self.created_at = max(announcement.now(), self.created_at + 1)
        self.event_json = announcement.sign(self.keys, tags, self._content, self.created_at)
        self.event_id = str(json.loads(self.event_json)["id"])
        self.published_listing = prices
        self._signed_at = time.monotonic()
        self.reason = reason
        self.events_signed += 1
        log.info("nostr: announcement %s signed (%s)", self.event_id[:12], reason)
        for wake in self._wake.values():
            wake.set()

    async def check(self) -> None:
        """Republish when the last event is old, or the prices changed (see config)."""
        age = time.monotonic() - self._signed_at
        if age >= self.config.republish_interval_s:
            await self.sign_current("daily refresh")
            return
        if self.published_listing is None:
            await self.sign_current("start")
            return
        prices = announcement.listing(self._catalog())
        changed = prices.changed_from(self.published_listing, self.config.price_change_pct)
        if changed and age >= self.config.min_republish_interval_s:
            await self.sign_current("price change")

    # -- the relays ---------------------------------------------------------------------------

    async def run(self) -> None:
        """The whole life of the announcements (cancel to stop)."""
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            tasks = [
                asyncio.create_task(self._relay(url, session), name=f"nostr relay {url}")
                for url in self.relays
            ]
            try:
                try:
                    await self.sign_current("start")
                except Exception:
                    log.exception("nostr: the announcement could not be built")
                while True:
                    await asyncio.sleep(self.config.check_interval_s)
                    try:
                        await self.check()
                    except Exception:
                        log.exception("nostr: the announcement could not be rebuilt")
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def _relay(self, url: str, session: aiohttp.ClientSession) -> None:
        state, wake = self.relays[url], self._wake[url]
        backoff = FIRST_BACKOFF_S
        while True:
            event_id, event_json = self.event_id, self.event_json
            if not event_id or state.published_id == event_id:
                wake.clear()
                if self.event_id == event_id:
                    await wake.wait()
                continue
            state.attempts += 1
            outcome, detail = await self._send(session, url, event_id, event_json)
            state.detail = detail
            if outcome == "published":
                state.state, state.published_id = "published", event_id
                state.published_at = time.time()
                backoff = FIRST_BACKOFF_S
                log.info("nostr: %s took announcement %s", url, event_id[:12])
                continue
            state.state = outcome
            log.warning("nostr: %s: %s; retrying in about %.0f s", url, detail, backoff)
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _send(
        self, session: aiohttp.ClientSession, url: str, event_id: str, event_json: str
    ) -> tuple[Outcome, str]:
        """(published, refused or unreachable; what the relay said or what went wrong),
        within timeout_s."""
        try:
            async with asyncio.timeout(self.config.timeout_s):
                async with session.ws_connect(url, autoping=True, max_msg_size=1 << 20) as ws:
                    await ws.send_str(f'["EVENT",{event_json}]')
                    async for msg in ws:
                        if msg.type != aiohttp.WSMsgType.TEXT:
                            break
                        reply = json.loads(msg.data)
                        if isinstance(reply, list) and reply[:2] == ["OK", event_id]:
                            message = str(reply[3]) if len(reply) > 3 else ""
                            if reply[2] is True or message.startswith("duplicate:"):
                                return "published", message or "accepted"
                            return "refused", f"refused: {message}"
                    return "unreachable", "the relay closed the connection without an OK"
        except TimeoutError:
            return "unreachable", f"no answer within {self.config.timeout_s:g} s"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return "unreachable", f"{type(exc).__name__}: {exc}"

    def describe(self) -> dict[str, Any]:
        """For the operator: who we are, what was signed last, and each relay's state."""
        return {
            "npub": self.npub,
            "pubkey": self.keys.public_key().to_hex(),
            "eventId": self.event_id or None,
            "createdAt": self.created_at or None,
            "reason": self.reason or None,
            "relays": [state.describe() for state in self.relays.values()],
        }


NOSTR = web.AppKey("nostr_announcer", Announcer)


def install(app: web.Application, settings: Settings, catalog: Callable[[], Catalog]) -> None:
    """With [discovery.nostr] relays set: the key (created now, so its npub is known at
    start) and the background task, started with the app and never waited for."""
    config = NostrConfig.from_discovery(settings.discovery)
    if not config.enabled:
        return
    keys = ensure_keys(settings.data_dir)
    app[NOSTR] = announcer = Announcer(settings=settings, config=config, keys=keys, catalog=catalog)
    app[NOSTR_STATUS] = announcer.describe

    async def announcing(app: web.Application) -> AsyncIterator[None]:
        announcer = app[NOSTR]
        log.info(
            "nostr: announcing as %s to %d relay(s): %s",
            announcer.npub,
            len(config.relays),
            ", ".join(config.relays),
        )
        task = asyncio.create_task(announcer.run(), name="nostr announcements")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(announcing)
