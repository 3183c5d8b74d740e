"""The daily budget of payout routing fees in the store: a grant is one statement, so
concurrent payouts are never granted more than the day's budget between them."""

from __future__ import annotations

import asyncio

from satsgate.store import Store

DAY = 20_000  # UTC days since the epoch


async def test_fifty_payouts_at_once_share_the_budget_to_the_msat(store: Store) -> None:
    fees = store.payout_fees
    grants = await asyncio.gather(*(fees.grant(DAY, 3_000, 100_000) for _ in range(50)))
    assert sum(grants) == 100_000  # never more between them
    assert sorted(grants, reverse=True)[:34] == [3_000] * 33 + [1_000]
    assert grants.count(0) == 16
    assert await fees.committed(DAY) == 100_000


async def test_what_a_payout_did_not_spend_comes_back_to_its_day(store: Store) -> None:
    fees = store.payout_fees
    assert await fees.grant(DAY, 5_000, 6_000) == 5_000
    assert await fees.grant(DAY, 5_000, 6_000) == 1_000
    assert await fees.grant(DAY, 5_000, 6_000) == 0
    await fees.release(DAY, 5_000 - 1_200)  # paid at a fee of 1.2 sat
    assert await fees.committed(DAY) == 2_200
    assert await fees.grant(DAY, 5_000, 6_000) == 3_800
    await fees.release(DAY, 0)  # nothing unspent: nothing changes
    assert await fees.committed(DAY) == 6_000
    # Each day has its own budget; an unknown day has committed nothing.
    assert await fees.committed(DAY + 1) == 0
    assert await fees.grant(DAY + 1, 5_000, 6_000) == 5_000


async def test_a_lowered_budget_grants_nothing_and_a_release_never_goes_below_zero(
    store: Store,
) -> None:
    fees = store.payout_fees
    assert await fees.grant(DAY, 5_000, 10_000) == 5_000
    assert await fees.grant(DAY, 5_000, 2_000) == 0  # the operator lowered it to 2 sat
    await fees.release(DAY, 9_999)
    assert await fees.committed(DAY) == 0
    assert await fees.grant(DAY, -5, 10_000) == 0  # a negative ask is none
