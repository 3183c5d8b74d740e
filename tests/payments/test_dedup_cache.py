"""The dedup cache's own rules: window, bounds, in-flight entries, replacement.

The HTTP behaviour (X-Dedup: hit, X-No-Cache, no second spend) is tested end to end
in test_gateway.py; these pin the cache's bookkeeping, which the end-to-end tests
cannot reach (30 s windows, 10,000 entries, 256 MiB).
"""

from __future__ import annotations

import gc
import time

import pytest

from satsgate.errors import ApiError, ErrorCode
from satsgate.payments.dedup import DedupCache
from satsgate.services.base import ServiceResult


def key(n: int) -> tuple[str, str]:
    return (f"hash{n}", "digest")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.monotonic under the test's hand: clock[0] is now."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    return now


async def test_a_finished_result_is_served_within_the_window_then_dropped(
    clock: list[float],
) -> None:
    cache = DedupCache(window_s=30)
    assert cache.lookup(key(1)) is None
    cache.begin(key(1))
    clock[0] += 100  # a long call: the window runs from its outcome, not its start
    cache.finish(key(1), ServiceResult({"ok": True}))
    clock[0] += 29
    hit = cache.lookup(key(1))
    assert hit is not None and hit.result().body == {"ok": True}
    clock[0] += 2
    assert cache.lookup(key(1)) is None
    assert len(cache) == 0 and cache.size_bytes == 0


async def test_a_running_call_is_never_evicted_and_repeats_wait_for_it(
    clock: list[float],
) -> None:
    cache = DedupCache(window_s=30, max_entries=2)
    cache.begin(key(0))
    for n in range(1, 6):
        cache.begin(key(n))
        cache.finish(key(n), ServiceResult({"n": n}))
    clock[0] += 1000
    waiting = cache.lookup(key(0))  # still in flight, however old or many
    assert waiting is not None and not waiting.done()
    assert len(cache) == 1
    cache.finish(key(0), ServiceResult({"n": 0}))
    assert waiting.result().body == {"n": 0}


async def test_the_entry_bound_drops_the_oldest_outcomes_first() -> None:
    cache = DedupCache(window_s=30, max_entries=3)
    for n in range(5):
        cache.begin(key(n))
        cache.finish(key(n), ServiceResult({"n": n}))
    assert len(cache) == 3
    assert cache.lookup(key(0)) is None and cache.lookup(key(1)) is None
    assert [cache.lookup(key(n)) is not None for n in (2, 3, 4)] == [True, True, True]


async def test_the_byte_bound_drops_outcomes_and_keeps_the_count_exact() -> None:
    cache = DedupCache(window_s=30, max_bytes=2500)
    for n in range(4):
        cache.begin(key(n))
        cache.finish(key(n), ServiceResult("x" * 1000))
    assert cache.size_bytes == 2000  # 4000 bytes went in; two oldest dropped
    assert cache.lookup(key(1)) is None and cache.lookup(key(3)) is not None


async def test_a_failure_after_payment_is_replayed_and_a_forgotten_call_is_not() -> None:
    cache = DedupCache(window_s=30)
    cache.begin(key(1))
    cache.fail(key(1), ApiError(ErrorCode.L402_UPSTREAM_FAILED, "boom"))
    replay = cache.lookup(key(1))
    assert replay is not None and isinstance(replay.exception(), ApiError)

    cache.begin(key(2))
    waiting = cache.lookup(key(2))
    assert waiting is not None
    cache.forget(key(2))  # nothing was spent: the next attempt must run again
    assert waiting.cancelled()
    assert cache.lookup(key(2)) is None


async def test_an_expired_outcome_is_replaced_and_its_stale_queue_item_is_skipped(
    clock: list[float],
) -> None:
    cache = DedupCache(window_s=30, max_entries=10)
    cache.begin(key(1))
    cache.finish(key(1), ServiceResult("a" * 100))
    clock[0] += 31
    # begin without a lookup first: the expired entry is still held, and is replaced
    cache.begin(key(1))
    assert cache.size_bytes == 0
    cache.finish(key(1), ServiceResult("b" * 10))
    clock[0] += 1
    hit = cache.lookup(key(1))  # evicting the stale queue item must not drop the new one
    assert hit is not None and hit.result().body == "b" * 10
    assert cache.size_bytes == 10


async def test_held_outcomes_are_not_walked_by_the_garbage_collector() -> None:
    """A busy second fills the cache with thousands of outcomes; were they tracked
    objects, every full collection would walk them all (that set the p99 of paid
    calls). Flat results, as services return them, must leave nothing tracked."""
    cache = DedupCache(window_s=30)
    results = [
        ServiceResult({"ok": True, "n": n, "image_url": f"/api/files/{n}.png"}) for n in range(2000)
    ]
    gc.collect()
    before = len(gc.get_objects())
    for n, result in enumerate(results):
        cache.begin(key(n))
        cache.finish(key(n), result)
    del results
    gc.collect()
    assert len(cache) == 2000
    assert len(gc.get_objects()) - before < 500  # one tracked object per entry: 2000
    replay = cache.lookup(key(7))
    assert replay is not None
    body = replay.result().body
    assert isinstance(body, dict) and body["n"] == 7
