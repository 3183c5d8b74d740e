"""The 30-second dedup cache: a repeat of the same request with the same credential
gets the first response again, with no second spend.

Keyed by (payment hash, request digest), so only a holder of the credential can
ever see a cached response. A request that arrives while the first is still
running waits for it instead of being refused. Bounded by entry count and bytes.

Cost: every paid call begins an entry and every lookup evicts, so both are O(1).
Finished entries queue in a deque in the order they finished (the window runs from
the first response), so eviction looks only at the oldest. A dict alone would not
do: taking its oldest key walks past the slots of deleted keys, and an OrderedDict
rebuilds its node table on every resize (~10 µs a call at 10,000 entries).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from satsgate.services.base import ServiceResult

Key = tuple[str, str]


class _Entry:
    """One call's place in the cache: running (no outcome yet), then finished."""

    __slots__ = ("outcome", "size", "stored_at", "waiters")

    def __init__(self, stored_at: float) -> None:
        self.stored_at = stored_at  # time.monotonic() of begin, then of the first outcome
        self.outcome: ServiceResult | BaseException | None = None
        # Futures of repeats that arrived while the call ran, made only for them:
        # the first call itself never needs one.
        self.waiters: list[asyncio.Future[ServiceResult]] = []
        self.size = 0  # bytes counted in DedupCache._bytes while the entry is held


def _settled(future: asyncio.Future[ServiceResult], outcome: ServiceResult | BaseException) -> None:
    if future.done():  # a waiter given up (cancelled) by its caller
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
        future.exception()  # mark retrieved: no "never retrieved" warning
    else:
        future.set_result(outcome)


class DedupCache:
    def __init__(
        self, window_s: float, max_entries: int = 10_000, max_bytes: int = 256 * 1024 * 1024
    ) -> None:
        self._window_s = window_s
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: dict[Key, _Entry] = {}
        # Finished entries, oldest outcome first. An item whose key was since dropped
        # or begun anew is stale: skipped when it reaches the front.
        self._finished: deque[tuple[Key, _Entry]] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def _evict(self, now: float) -> None:
        finished = self._finished
        while finished:
            key, entry = finished[0]
            if self._entries.get(key) is not entry:
                finished.popleft()  # stale: already dropped or replaced
                continue
            expired = now - entry.stored_at > self._window_s
            over = len(self._entries) > self._max_entries or self._bytes > self._max_bytes
            if not (expired or over):
                break
            finished.popleft()
            self._drop(key, entry)

    def _drop(self, key: Key, entry: _Entry) -> None:
        del self._entries[key]
        self._bytes -= entry.size

    def lookup(self, key: Key) -> asyncio.Future[ServiceResult] | None:
        """The first call's outcome as a future (still pending while that call runs),
        if within the window; None if there was no such call."""
        now = time.monotonic()
        self._evict(now)
        entry = self._entries.get(key)
        if entry is None:
            return None
        future: asyncio.Future[ServiceResult] = asyncio.get_running_loop().create_future()
        if entry.outcome is None:
            entry.waiters.append(future)
        elif now - entry.stored_at > self._window_s:
            return None
        else:
            _settled(future, entry.outcome)
        return future

    def begin(self, key: Key) -> None:
        """A first call starts: repeats from now on wait for its outcome."""
        earlier = self._entries.get(key)
        if earlier is not None:  # an expired outcome not yet evicted: replaced
            self._drop(key, earlier)
        self._entries[key] = _Entry(time.monotonic())

    def _finished_now(
        self, key: Key, outcome: ServiceResult | BaseException, size: int
    ) -> None:
        entry = self._entries.get(key)
        if entry is None or entry.outcome is not None:
            return
        entry.outcome = outcome
        entry.size = size
        self._bytes += size
        entry.stored_at = time.monotonic()  # the window runs from the first outcome
        waiters, entry.waiters = entry.waiters, []
        for future in waiters:
            _settled(future, outcome)
        self._finished.append((key, entry))
        self._evict(entry.stored_at)  # keep the bounds even when nothing is looked up

    def finish(self, key: Key, result: ServiceResult) -> None:
        body = result.body
        size = len(body) if isinstance(body, (str, bytes)) else _rough_size(body)
        self._finished_now(key, result, size)

    def fail(self, key: Key, exc: BaseException) -> None:
        """The first call failed after payment: repeats get the same error (and refund)."""
        self._finished_now(key, exc, 0)

    def forget(self, key: Key) -> None:
        """Drop an entry whose call never ran (nothing was spent): its waiters are
        cancelled, and run again under the spend rule."""
        entry = self._entries.get(key)
        if entry is not None:
            self._drop(key, entry)
            for future in entry.waiters:
                future.cancel()


def _rough_size(body: dict[str, object]) -> int:
    """Bytes a cached JSON body holds, roughly: its string values dominate (base64 files)."""
    return 64 + sum(len(k) + (len(v) if isinstance(v, str) else 16) for k, v in body.items())
