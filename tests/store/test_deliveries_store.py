"""Delivery records: created before the send, moved forward only, settled once."""

from __future__ import annotations

from pathlib import Path

from satsgate.outreach import retention
from satsgate.outreach.retention_rules import DAY
from satsgate.store import Store
from satsgate.store.deliveries import new_delivery_id


async def test_status_moves_forward_only_and_settles_once(store: Store) -> None:
    repo = store.deliveries
    did = new_delivery_id("sms")
    assert did.startswith("msg_") and len(did) > 20
    await repo.create(
        delivery_id=did, payment_id="pay_1", channel="sms", provider="tw", country="US",
        status="sending", paid_msat=15_000,
    )  # fmt: skip
    # A report carrying the reference before the send's answer was recorded.
    got = await repo.update(
        provider="tw", delivery_id=did, provider_ref="SM1", status="sent", rank=2, final=False
    )
    assert got is not None and got.status == "sent" and got.provider_ref == "SM1"
    got = await repo.update(
        provider="tw", provider_ref="SM1", status="delivered", rank=3, final=True
    )
    assert got is not None and got.status == "delivered" and got.final and got.final_at
    # A late, lower report never moves it back; another provider's report finds nothing.
    got = await repo.update(provider="tw", provider_ref="SM1", status="sent", rank=2, final=False)
    assert got is not None and got.status == "delivered"
    assert (
        await repo.update(provider="other", provider_ref="SM1", status="failed", rank=9, final=True)
        is None
    )
    assert (await repo.find("tw", "SM1")) == got
    assert await repo.settle(did, 15_000) is True
    assert await repo.settle(did, 1) is False
    final = await repo.get(did)
    assert final is not None and final.charged_msat == 15_000
    # Nothing personal is stored: no text, no number.
    row = await store.db.run_sync(lambda c: c.execute("SELECT * FROM deliveries").fetchone())
    assert not any(isinstance(v, str) and v.startswith("+") for v in row)


async def test_retention_clears_the_provider_id_after_30_days(store: Store, tmp_path: Path) -> None:
    did = new_delivery_id("call")
    await store.deliveries.create(
        delivery_id=did, payment_id="pay_2", channel="call", provider="tw", country="GB",
        status="sending", paid_msat=60_000, rate_msat=30_000, now=1_000,
    )  # fmt: skip
    await store.deliveries.update(
        provider="tw", delivery_id=did, provider_ref="CA1", status="completed", rank=4,
        final=True, duration_s=61, answered_by="human", now=1_000,
    )  # fmt: skip
    await store.deliveries.settle(did, 60_000, now=1_000)
    await retention.sweep(store.retention, tmp_path, now=1_000 + 29 * DAY)
    kept = await store.deliveries.get(did)
    assert kept is not None and kept.provider_ref == "CA1"
    await retention.sweep(store.retention, tmp_path, now=1_000 + 31 * DAY)
    cleared = await store.deliveries.get(did)
    assert cleared is not None and cleared.provider_ref is None and cleared.answered_by is None
    # Status and amounts stay, for the ledger.
    assert (cleared.status, cleared.duration_s, cleared.charged_msat) == ("completed", 61, 60_000)
