"""The 30-second dedup cache: a repeat of the same request with the same credential
gets the first response again, with no second spend.

Keyed by (payment hash, request digest), so only a holder of the credential can
ever see a cached response. A request that arrives while the first is still
running waits for it instead of being refused. Bounded by entry count and bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass

from satsgate.services.base import ServiceResult

Key = tuple[str, str]


@dataclass
class _Entry:
    future: asyncio.Future[ServiceResult]
    stored_at: float
    size: int = 0


class DedupCache:
    def __init__(
        self, window_s: float, max_entries: int = 10_000, max_bytes: int = 256 * 1024 * 1024
    ) -> None:
        self._window_s = window_s
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()

    def _evict(self, now: float) -> None:
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            expired = entry.future.done() and now - entry.stored_at > self._window_s
            over = len(self._entries) > self._max_entries or self._bytes > self._max_bytes
            if not (expired or (over and entry.future.done())):
                break
            del self._entries[key]
            self._bytes -= entry.size

    def lookup(self, key: Key) -> asyncio.Future[ServiceResult] | None:
        """The first call's (possibly still running) result, if within the window."""
        now = time.monotonic()
        self._evict(now)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.future.done() and now - entry.stored_at > self._window_s:
            return None
        return entry.future

    def begin(self, key: Key) -> asyncio.Future[ServiceResult]:
        future: asyncio.Future[ServiceResult] = asyncio.get_running_loop().create_future()
        self._entries[key] = _Entry(future, time.monotonic())
        return future

    def finish(self, key: Key, result: ServiceResult) -> None:
        entry = self._entries.get(key)
        if entry is None or entry.future.done():
            return
        entry.future.set_result(result)
        entry.stored_at = time.monotonic()  # the window runs from the first response
        body = result.body
        entry.size = len(body) if isinstance(body, (str, bytes)) else _rough_size(body)
        self._bytes += entry.size

    def fail(self, key: Key, exc: BaseException) -> None:
        """The first call failed after payment: repeats get the same error (and refund)."""
        entry = self._entries.get(key)
        if entry is None or entry.future.done():
            return
        entry.future.set_exception(exc)
        entry.future.exception()  # mark retrieved: no "never retrieved" warning
        entry.stored_at = time.monotonic()

    def forget(self, key: Key) -> None:
        """Drop an entry whose call never ran (nothing was spent)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size
            if not entry.future.done():
                entry.future.cancel()


def _rough_size(body: dict[str, object]) -> int:
    """Bytes a cached JSON body holds, roughly: its string values dominate (base64 files)."""
    return 64 + sum(len(k) + (len(v) if isinstance(v, str) else 16) for k, v in body.items())
