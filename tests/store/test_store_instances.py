"""Instances and duty leases in the store, on each engine: of instances racing to
declare one gone, to take up its work or to claim a duty, exactly one wins; a lease
runs out and passes on; a SQLite store takes one instance, and a second refuses to start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from satsgate.cluster.presence import MisconfiguredInstance, Presence, StoreInUse
from satsgate.store import Store
from tests.conftest import free_port, skip_unless_ci
from tests.pg_cluster import postgres_bindir, running_cluster


async def test_a_stale_instance_is_declared_gone_and_taken_up_once(store: Store) -> None:
    instances = store.instances
    await instances.register("old", "host", (1, "ns"), "tag", 100)
    await instances.register("fresh", "host", (2, "ns"), "tag", 1_000)
    declared = await asyncio.gather(
        *(instances.expire(500, 1_000, but=f"taker-{i}") for i in range(10))
    )
    assert [i for found in declared for i in found] == ["old"]  # one declarer; the fresh one lives
    assert await instances.heartbeat("fresh", 1_001)
    assert not await instances.heartbeat("old", 1_001)  # fenced: it must stop serving
    claims = await asyncio.gather(
        *(instances.claim_recovery("old", f"taker-{i}", 1_000, 1_300) for i in range(10))
    )
    assert claims.count(True) == 1
    winner = f"taker-{claims.index(True)}"
    # A taker that died mid-way is replaced once its claim's deadline has passed.
    assert not await instances.claim_recovery("old", "late", 1_200, 1_500)
    assert await instances.claim_recovery("old", "late", 1_301, 1_600)
    await instances.recovered("old", winner, 1_302)  # the replaced taker records nothing
    # (a new store's placeholder for work from before instances: the first start's)
    assert await instances.unrecovered() == ["before-instances", "old"]
    await instances.recovered("old", "late", 1_303)
    assert await instances.unrecovered() == ["before-instances"]
    assert not await instances.claim_recovery("old", "again", 9_999, 10_000)


async def test_a_duty_has_one_holder_until_its_lease_runs_out(store: Store) -> None:
    leases = store.duty_leases
    claims = await asyncio.gather(
        *(leases.claim("sweep", f"inst-{i}", 1_000, 31_000) for i in range(10))
    )
    assert claims.count(True) == 1
    holder = f"inst-{claims.index(True)}"
    assert await leases.claim("sweep", holder, 5_000, 35_000)  # its holder renews it
    assert not await leases.claim("sweep", "other", 34_999, 64_999)
    await leases.renew(holder, 60_000)  # the heartbeat renews every duty it holds
    assert not await leases.claim("sweep", "other", 59_999, 89_999)
    assert await leases.claim("sweep", "other", 60_001, 90_001)  # the holder went silent
    assert (await leases.holders())["sweep"] == ("other", 90_001)
    await leases.release("other")
    assert await leases.holders() == {}


async def test_a_sqlite_store_takes_one_instance(tmp_path: Path) -> None:
    path = tmp_path / "satsgate.db"
    first, second = Store(path), Store(path)
    await first.open()
    await second.open()
    lock = path.with_suffix(".instance-lock")
    try:
        one = Presence(first, lease_s=30, sqlite_lock=lock, server_secret="s",
                       files_dir=tmp_path / "files")  # fmt: skip
        await one.join()
        two = Presence(second, lease_s=30, sqlite_lock=lock, server_secret="s",
                       files_dir=tmp_path / "files")  # fmt: skip
        with pytest.raises(StoreInUse, match="PostgreSQL store"):
            await two.join()
        one.release_lock()  # the first process died: its lock went with it
        await two.join()  # and every instance recorded before is gone at once
        unrecovered = await second.instances.unrecovered()
        assert unrecovered == ["before-instances", first.instance_id]
        assert two.alone
        two.release_lock()
    finally:
        await first.close()
        await second.close()


async def test_an_instance_beside_another_with_a_different_secret_or_files_is_refused(
    pg_cluster: object, tmp_path: Path
) -> None:
    from tests.pg_cluster import PgCluster

    assert isinstance(pg_cluster, PgCluster)
    url = pg_cluster.new_database()
    stores = [Store(tmp_path / "unused", url) for _ in range(3)]
    for s in stores:
        await s.open()
    try:
        shared = tmp_path / "shared-files"
        live = Presence(stores[0], lease_s=30, sqlite_lock=None, server_secret="secret",
                        files_dir=shared)  # fmt: skip
        await live.join()
        other_secret = Presence(stores[1], lease_s=30, sqlite_lock=None,
                                server_secret="another", files_dir=shared)  # fmt: skip
        with pytest.raises(MisconfiguredInstance, match="server secret"):
            await other_secret.join()
        own_files = Presence(stores[2], lease_s=30, sqlite_lock=None, server_secret="secret",
                             files_dir=tmp_path / "not-shared")  # fmt: skip
        with pytest.raises(MisconfiguredInstance, match="shared files directory"):
            await own_files.join()
        # The refused ones left at once; the live one is still the only one.
        rows = await stores[0].instances.all()
        assert [r.instance_id for r in rows if r.gone_at is None] == [stores[0].instance_id]
    finally:
        for s in stores:
            await s.close()


LEASE_S = 4.0


async def _beats_fresh(store: Store, within_s: float) -> list[bool]:
    """Whether each live instance's heartbeat is younger than ``within_s``."""
    now = time.time()
    return [now - r.heartbeat_at <= within_s + 1 for r in await store.instances.all()
            if r.gone_at is None]  # fmt: skip


@pytest.mark.slow
async def test_after_an_outage_of_the_store_no_instance_declares_the_others_gone(
    tmp_path: Path,
) -> None:
    """PostgreSQL stops for several leases under two live instances and comes back: the
    heartbeats the outage kept out are no reason to declare anyone gone, so neither
    instance is fenced and nothing is taken up."""
    bindir = postgres_bindir()
    if bindir is None:
        skip_unless_ci("PostgreSQL's programs (initdb, pg_ctl) are not installed")
    assert bindir is not None
    with running_cluster(bindir, free_port()) as cluster:
        url = cluster.new_database()
        stores = [Store(tmp_path / "unused", url) for _ in range(2)]
        taken: list[str] = []

        async def take_up(gone: str) -> None:
            taken.append(gone)

        presences = [
            Presence(
                s,
                lease_s=LEASE_S,
                sqlite_lock=None,
                server_secret="s",
                files_dir=tmp_path / "files",
            )
            for s in stores
        ]
        for store in stores:
            await store.open()
        try:
            for presence in presences:
                await presence.join()
            beats = [asyncio.create_task(p.run(take_up)) for p in presences]
            await asyncio.sleep(1.0)
            await asyncio.to_thread(cluster.pause)
            await asyncio.sleep(2.5 * LEASE_S)  # heartbeats kept out for over two leases
            await asyncio.to_thread(cluster.resume)
            # Both beat again (each as soon as its pool has a connection), then a lease
            # passes in which either could judge the other.
            deadline = time.monotonic() + 30
            while not all(await _beats_fresh(stores[0], 1.0)):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
            await asyncio.sleep(LEASE_S * 1.5)
            for task in beats:
                task.cancel()
            await asyncio.gather(*beats, return_exceptions=True)
            assert not any(p.fenced.is_set() for p in presences)
            rows = await stores[0].instances.all()
            live = {r.instance_id for r in rows if r.gone_at is None}
            assert live == {s.instance_id for s in stores}
            assert [t for t in taken if t != "before-instances"] == []
        finally:
            for store in stores:
                await store.close()
