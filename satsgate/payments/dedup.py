"""The 30-second dedup cache: a repeat of the same request with the same credential
gets the first response again, with no second spend.

Keyed by (payment hash, request digest), so only a holder of the credential can
ever see a cached response. A request that arrives while the first is still
running waits for it instead of being refused. Bounded by entry count and bytes.

Cost, which matters because every paid call passes through here:
- a running call holds only its (usually empty) list of waiters; a future is made
  only for a repeat that arrives meanwhile;
- a finished outcome is held as a tuple of plain values (its time, size, status,
  headers) in one dict and its body in another, and no container per entry: the
  garbage collector stops tracking such tuples after its first look, and a body
  that is a flat dict (most services' results) is never tracked. Held as objects
  (an entry, a ServiceResult, a list), the outcomes of a busy 30 s would be walked by
  every full collection, and those pauses set the p99 of a paid call under load
  (bench/README.md).
  (A tuple that holds a dict is never untracked, so the body has a dict of its own.)
- finished outcomes queue in a deque in the order they finished (the window runs
  from the first outcome), so eviction looks only at the oldest.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from typing import Any

from satsgate.services.base import ServiceResult

Key = tuple[str, str]
# A finished outcome's plain parts: (sequence number, time.monotonic() of the outcome,
# bytes counted, status, content type, headers as pairs, charged msat).
_Meta = tuple[int, float, int, int, str | None, tuple[tuple[str, str], ...], int | None]


def _settle(future: asyncio.Future[ServiceResult], outcome: ServiceResult | BaseException) -> None:
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
        # Calls under way: their repeats' futures, made only when a repeat comes.
        self._running: dict[Key, list[asyncio.Future[ServiceResult]]] = {}
        self._finished: dict[Key, _Meta] = {}
        # The body of each finished outcome (a dict, str or bytes), or the exception
        # of a call that failed after payment.
        self._outcomes: dict[Key, Any] = {}
        # (key, sequence number) of finished outcomes, oldest first. An item whose key
        # was since dropped or finished anew is stale: skipped when it reaches the front.
        self._order: deque[tuple[Key, int]] = deque()
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._running) + len(self._finished)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def _evict(self, now: float) -> None:
        order, finished = self._order, self._finished
        while order:
            key, sequence = order[0]
            meta = finished.get(key)
            if meta is None or meta[0] != sequence:
                order.popleft()  # stale: already dropped or replaced
                continue
            expired = now - meta[1] > self._window_s
            over = len(self) > self._max_entries or self._bytes > self._max_bytes
            if not (expired or over):
                break
            order.popleft()
            self._drop_finished(key)

    def _drop_finished(self, key: Key) -> None:
        meta = self._finished.pop(key, None)
        if meta is not None:
            self._bytes -= meta[2]
            del self._outcomes[key]

    def _outcome(self, key: Key, meta: _Meta) -> ServiceResult | BaseException:
        body = self._outcomes[key]
        if isinstance(body, BaseException):
            return body
        _, _, _, status, content_type, headers, charged_msat = meta
        return ServiceResult(body, status, content_type, dict(headers), charged_msat)

    def lookup(self, key: Key) -> asyncio.Future[ServiceResult] | None:
        """The first call's outcome as a future (still pending while that call runs),
        if within the window; None if there was no such call."""
        now = time.monotonic()
        self._evict(now)
        waiters = self._running.get(key)
        meta = None if waiters is not None else self._finished.get(key)
        if waiters is None and (meta is None or now - meta[1] > self._window_s):
            return None
        future: asyncio.Future[ServiceResult] = asyncio.get_running_loop().create_future()
        if waiters is not None:
            waiters.append(future)
        elif meta is not None:
            _settle(future, self._outcome(key, meta))
        return future

    def begin(self, key: Key) -> None:
        """A first call starts: repeats from now on wait for its outcome."""
        self._drop_finished(key)  # an expired outcome not yet evicted: replaced
        self._running[key] = []

    def _finish(self, key: Key, outcome: ServiceResult | BaseException) -> None:
        waiters = self._running.pop(key, None)
        if waiters is None:  # forgotten, or finished already
            return
        for future in waiters:
            _settle(future, outcome)
        now = time.monotonic()  # the window runs from the first outcome
        sequence = next(self._sequence)
        if isinstance(outcome, BaseException):
            self._finished[key] = (sequence, now, 0, 0, None, (), None)
            self._outcomes[key] = outcome
        else:
            body = outcome.body
            size = len(body) if isinstance(body, (str, bytes)) else _rough_size(body)
            self._finished[key] = (
                sequence,
                now,
                size,
                outcome.status,
                outcome.content_type,
                tuple(outcome.headers.items()),
                outcome.charged_msat,
            )
            self._outcomes[key] = body
            self._bytes += size
        self._order.append((key, sequence))
        self._evict(now)  # keep the bounds even when nothing is looked up

    def finish(self, key: Key, result: ServiceResult) -> None:
        self._finish(key, result)

    def fail(self, key: Key, exc: BaseException) -> None:
        """The first call failed after payment: repeats get the same error (and refund)."""
        self._finish(key, exc)

    def forget(self, key: Key) -> None:
        """Drop an entry whose call never ran (nothing was spent): its waiters are
        cancelled, and run again under the spend rule."""
        for future in self._running.pop(key, []):
            future.cancel()


def _rough_size(body: dict[str, object]) -> int:
    """Bytes a cached JSON body holds, roughly: its string values dominate (base64 files)."""
    return 64 + sum(len(k) + (len(v) if isinstance(v, str) else 16) for k, v in body.items())
