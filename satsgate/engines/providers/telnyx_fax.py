"""The fax engine of the telnyx provider kind (Programmable Fax): a fax sent and its
status followed by webhook or, when webhooks are late, by polling; faxes received on the
inbound numbers, their documents fetched only from the allowed hosts."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from satsgate.engines.config import ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.fax import (
    FaxRequest,
    FaxState,
    FaxStatus,
    InboundFax,
    InboundHandler,
    InboundRequest,
)
from satsgate.engines.providers.telnyx_client import TelnyxClient
from satsgate.engines.providers.telnyx_parsing import count_or_none, reported_e164, reported_time
from satsgate.engines.providers.upstream import cause_of
from satsgate.engines.registry import EarlyAsks, EngineDeps
from satsgate.errors import ErrorCode

log = logging.getLogger("satsgate.engines.providers.telnyx")  # one logger for the kind

MAX_REDIRECTS = 3
# Fax statuses (providers.md) -> the four the payer sees.
_FAX_STATUS: Mapping[str, FaxStatus] = {
    "queued": "queued",
    "media.processed": "queued",
    "media.processing": "queued",
    "initiated": "sending",
    "originated": "sending",
    "sending": "sending",
    "sending.started": "sending",
    "delivered": "delivered",
    "failed": "failed",
}
_FAX_EVENT_STATUS: Mapping[str, FaxStatus] = {
    "fax.queued": "queued",
    "fax.media.processed": "queued",
    "fax.sending.started": "sending",
    "fax.delivered": "delivered",
    "fax.failed": "failed",
}
_REASON_RE = re.compile(r"^[a-z0-9_.\- ]{1,64}$")
_RANK: Mapping[FaxStatus, int] = {"queued": 0, "sending": 1, "delivered": 2, "failed": 2}


@dataclass
class _FaxWatch:
    state: FaxState
    version: int = 0
    returned: int = -1  # the version wait() last returned
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    touched: float = field(default_factory=time.monotonic)
    followed: bool = False  # this process sent the fax or waits on it
    ask_now: bool = False  # a webhook about it reached another instance: poll now


class TelnyxFax(TelnyxClient):
    """The ``fax`` engine (satsgate.engines.fax) on the REST core: sending, receiving, and
    the fax events of the webhooks."""

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        super().__init__(config, deps)
        self._faxes: dict[str, _FaxWatch] = {}
        self._inbound_handler: InboundHandler | None = None
        self._unwatched: list[Callable[[str], None]] = []
        # Faxes whose status another instance heard before this one had Telnyx's answer
        # to the send: the follow asks Telnyx as it starts.
        self._asked_early = EarlyAsks()

    # -- fax: sending --------------------------------------------------------------------

    async def send(self, request: FaxRequest) -> FaxState:
        body = {
            "connection_id": self.fax_connection_id,
            "media_url": request.media_url,
            "to": request.to,
            "from": self.fax_from,
            "webhook_url": self.webhook_url(request.reference),
            "client_state": base64.b64encode(request.reference.encode()).decode(),
            "store_media": False,
        }
        data = await self.request("POST", "/faxes", "fax", body)
        fax_id = str(data.get("id") or "")
        if not fax_id:
            raise self._failed("fax", ErrorCode.SERVICE_ERROR, "answer without an id", False)
        state = _fax_state(fax_id, data)
        watch = self._faxes.get(fax_id)
        if watch is None:  # a webhook may have come before this answer
            watch = self._faxes[fax_id] = _FaxWatch(state)
        watch.followed = True
        if self._asked_early.take(fax_id):
            watch.ask_now = True
        return watch.state

    async def wait(self, fax_id: str, timeout_s: float) -> FaxState:
        watch = self._faxes.get(fax_id)
        if watch is None:  # after a restart: what the provider says now
            watch = self._faxes[fax_id] = _FaxWatch(await self._fetch_fax(fax_id))
        watch.followed = True
        deadline = time.monotonic() + timeout_s
        while watch.version == watch.returned and not watch.state.final:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            quiet = False
            if not watch.ask_now:
                watch.changed.clear()
                try:
                    await asyncio.wait_for(watch.changed.wait(), min(left, self.status_poll_s))
                except TimeoutError:
                    quiet = watch.version == watch.returned
            if watch.ask_now or quiet:
                # Heard at another instance, or no webhook for a while (the fallback when
                # webhooks are lost): ask.
                watch.ask_now = False
                try:
                    self._update(fax_id, await self._fetch_fax(fax_id))
                except EngineError as exc:
                    log.info("telnyx %s: fax status poll failed: %s", self.config.name, exc.code)
        watch.returned = watch.version
        watch.touched = time.monotonic()
        state = watch.state
        if state.final:
            self._faxes.pop(fax_id, None)
        self._prune()
        return state

    async def _fetch_fax(self, fax_id: str) -> FaxState:
        return _fax_state(fax_id, await self.request("GET", f"/faxes/{fax_id}", "fax"))

    def _update(self, fax_id: str, state: FaxState) -> None:
        watch = self._faxes.get(fax_id)
        if watch is None:
            self._faxes[fax_id] = _FaxWatch(state, version=1)
            self._prune()
            return
        if watch.state.final or state == watch.state:
            return  # a final status stays; duplicates change nothing
        if _RANK[state.status] < _RANK[watch.state.status]:
            return  # out of order: Telnyx does not order its webhooks
        watch.state = state
        watch.version += 1
        watch.changed.set()

    def on_unwatched(self, listener: Callable[[str], None]) -> None:
        """UpstreamWatches: a status event of a fax no wait of this process follows."""
        self._unwatched.append(listener)

    def ask_now(self, upstream_id: str) -> None:
        """UpstreamWatches: the wait following the fax asks Telnyx for its status now."""
        watch = self._faxes.get(upstream_id)
        if watch is None:
            self._asked_early.add(upstream_id)
        elif not watch.state.final:
            watch.ask_now = True
            watch.changed.set()

    def _prune(self) -> None:
        cutoff = time.monotonic() - 3600
        for fax_id in [k for k, w in self._faxes.items() if w.touched < cutoff]:
            del self._faxes[fax_id]

    # -- fax: receiving -------------------------------------------------------------------

    def inbound_numbers(self) -> tuple[str, ...]:
        return self._inbound

    def unsupported(self, request: object) -> str | None:
        """Before any invoice: receive-fax in a country none of the inbound numbers is in."""
        if isinstance(request, InboundRequest):
            countries = set()
            for number in self._inbound:
                try:
                    countries.add(self.deps.destinations.destination(number).country)
                except ValueError:
                    continue
            if request.country not in countries:
                return f"no inbound fax number in {request.country} on this node"
        return None

    def on_inbound(self, handler: InboundHandler) -> None:
        self._inbound_handler = handler

    def _media_allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        api = urlsplit(self.base_url)
        if parts.scheme != "https" and not (parts.scheme == "http" and api.scheme == "http"):
            return False
        return any(host == h or host.endswith("." + h) for h in self.media_hosts if h)

    async def download(self, fax: InboundFax, max_bytes: int) -> bytes:
        url = fax.media_url
        for _ in range(MAX_REDIRECTS + 1):
            if not self._media_allowed(url):
                log.warning("telnyx %s: inbound fax media on a host not allowed", self.config.name)
                raise EngineError(ErrorCode.SERVICE_ERROR, "The received fax could not be fetched.")
            # The key goes only to the API's own host (a presigned storage URL needs none).
            same_host = urlsplit(url).netloc == urlsplit(self.base_url).netloc
            headers = self._headers() if same_host else {}
            try:
                async with self.http.stream("GET", url, headers=headers) as resp:
                    if resp.status_code in (301, 302, 303, 307, 308):
                        url = urljoin(url, resp.headers.get("location", ""))
                        continue
                    if resp.status_code != 200:
                        break
                    declared = resp.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > max_bytes:
                        raise EngineError(ErrorCode.SERVICE_ERROR, "The received fax is too large.")
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in resp.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise EngineError(
                                ErrorCode.SERVICE_ERROR, "The received fax is too large."
                            )
                        chunks.append(chunk)
                    return b"".join(chunks)
            except httpx.HTTPError as exc:
                log.warning("telnyx %s: inbound fax download (%s)", self.config.name, cause_of(exc))
                break
        raise EngineError(ErrorCode.SERVICE_ERROR, "The received fax could not be fetched.")

    # -- fax: webhook events --------------------------------------------------------------

    def _on_fax_event(
        self, event_type: str, payload: dict[str, Any], data: Mapping[str, Any]
    ) -> None:
        fax_id = str(payload.get("fax_id") or "")
        if not fax_id:
            return
        direction = payload.get("direction")
        if event_type == "fax.received" or (
            direction == "inbound" and payload.get("status") == "received"
        ):
            self._on_inbound_fax(fax_id, payload, data)
            return
        if direction == "inbound":
            return  # an inbound fax's progress events: only the received one matters
        status = _FAX_EVENT_STATUS.get(event_type) or _FAX_STATUS.get(str(payload.get("status")))
        if status is None:
            return
        watch = self._faxes.get(fax_id)
        if watch is None or not watch.followed:
            for listener in self._unwatched:
                listener(fax_id)
        self._update(fax_id, _fax_state(fax_id, {**payload, "status": status}))

    def _on_inbound_fax(
        self, fax_id: str, payload: Mapping[str, Any], data: Mapping[str, Any]
    ) -> None:
        media_url = str(payload.get("media_url") or "")
        to = reported_e164(payload.get("to"))
        if not media_url or not to:
            log.warning("telnyx %s: inbound fax event without media or number", self.config.name)
            return
        handler = self._inbound_handler
        if handler is None:
            log.warning("telnyx %s: inbound fax with no inbox to take it", self.config.name)
            return
        fax = InboundFax(
            fax_id=fax_id,
            to=to,
            sender=reported_e164(payload.get("from")) or "",
            pages=count_or_none(payload.get("page_count")),
            media_url=media_url,
            received_at=reported_time(data.get("occurred_at")),
        )
        # Answered at once (Telnyx retries a slow webhook); the inbox fetches the document.
        self.spawn(handler(fax))


def _fax_state(fax_id: str, data: Mapping[str, Any]) -> FaxState:
    status = _FAX_STATUS.get(str(data.get("status")), "queued")
    reason = ""
    if status == "failed":
        raw = str(data.get("failure_reason") or "").lower()
        reason = raw.replace("_", " ") if _REASON_RE.match(raw) else "not delivered"
    return FaxState(fax_id, status, count_or_none(data.get("page_count")), reason)
