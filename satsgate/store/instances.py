"""Instances and duty leases: several `satsgate serve` processes on one store.

An instance's row is renewed by its heartbeat (:meth:`InstanceRepository.heartbeat`);
one whose heartbeat is older than the lease is declared gone by whichever instance sees
it first (:meth:`InstanceRepository.expire`, one conditional UPDATE: of two instances
racing, one declares it). Its work in flight is then taken up by exactly one instance
at a time (:meth:`InstanceRepository.claim_recovery`, a claim with its own deadline, so
a taker that dies mid-way is replaced) and marked recovered once done. Every step of a
recovery is itself conditional (a refund is claimed once), so a recovery run twice
changes nothing the second time.

A duty lease (:class:`DutyLeaseRepository`) is a row claim: the instance that holds
``duty`` until ``expires_at`` runs it; another takes it once that has passed.
"""

from __future__ import annotations

from typing import NamedTuple

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection

_INSTANCE_COLUMNS = (
    "instance_id, host, pid, pid_ns, secret_tag, started_at, heartbeat_at, gone_at, recovering_by,"
    " recovering_until, recovered_at"
)


class InstanceRow(NamedTuple):
    instance_id: str
    host: str
    pid: int
    pid_ns: str
    secret_tag: str
    started_at: int
    heartbeat_at: int
    gone_at: int | None
    recovering_by: str | None
    recovering_until: int | None
    recovered_at: int | None


class InstanceRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def register(
        self, instance_id: str, host: str, pid: tuple[int, str], secret_tag: str, now: int
    ) -> None:
        """Record a starting instance; ``pid``: its process id and pid namespace."""
        await self._db.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO instances (instance_id, host, pid, pid_ns, secret_tag, started_at,"
                " heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (instance_id, host, pid[0], pid[1], secret_tag, now, now),
            )
        )

    async def heartbeat(self, instance_id: str, now: int) -> bool:
        """Renew the instance's lease; False when another instance has declared it gone
        (its work is being taken up: it must stop serving)."""
        count = await self._db.write_one(
            "UPDATE instances SET heartbeat_at = ? WHERE instance_id = ? AND gone_at IS NULL",
            (now, instance_id),
        )
        return count == 1

    async def leave(self, instance_id: str, now: int) -> None:
        """A clean stop: the instance is gone at once (what it leaves, if anything, is
        taken up by the next recovery rather than after a lease)."""
        await self._db.write_one(
            "UPDATE instances SET gone_at = ? WHERE instance_id = ? AND gone_at IS NULL",
            (now, instance_id),
        )

    async def expire(self, stale_before: int, now: int, *, but: str) -> list[str]:
        """Declare gone every instance but ``but`` whose heartbeat is older than
        ``stale_before`` (``stale_before`` > now: every other instance, as a SQLite
        store's only instance does at its start); the ids this call declared."""

        def run(conn: Connection) -> list[str]:
            rows = conn.execute(
                "UPDATE instances SET gone_at = ? WHERE gone_at IS NULL AND heartbeat_at < ?"
                " AND instance_id <> ? RETURNING instance_id",
                (now, stale_before, but),
            ).fetchall()
            return [str(r[0]) for r in rows]

        return await self._db.run_sync(run)

    async def declare_gone(self, instance_id: str, now: int) -> bool:
        """Declare one instance gone (its process is known to be dead); True once."""
        count = await self._db.write_one(
            "UPDATE instances SET gone_at = ? WHERE instance_id = ? AND gone_at IS NULL",
            (now, instance_id),
        )
        return count == 1

    async def claim_recovery(self, instance_id: str, taker: str, now: int, until: int) -> bool:
        """Take up a gone instance's work: True for one taker at a time (until ``until``,
        after which another may take it over)."""
        count = await self._db.write_one(
            "UPDATE instances SET recovering_by = ?, recovering_until = ?"
            " WHERE instance_id = ? AND gone_at IS NOT NULL AND recovered_at IS NULL"
            " AND (recovering_until IS NULL OR recovering_until < ? OR recovering_by = ?)",
            (taker, until, instance_id, now, taker),
        )
        return count == 1

    async def recovered(self, instance_id: str, taker: str, now: int) -> None:
        await self._db.write_one(
            "UPDATE instances SET recovered_at = ? WHERE instance_id = ? AND recovering_by = ?",
            (now, instance_id, taker),
        )

    async def unrecovered(self) -> list[str]:
        """Gone instances whose work is not taken up yet, oldest first."""

        def run(conn: Connection) -> list[str]:
            rows = conn.execute(
                "SELECT instance_id FROM instances WHERE gone_at IS NOT NULL"
                " AND recovered_at IS NULL ORDER BY gone_at"
            ).fetchall()
            return [str(r[0]) for r in rows]

        return await self._db.run_sync(run)

    async def all(self) -> list[InstanceRow]:
        """Every instance known, live ones first, newest first."""

        def run(conn: Connection) -> list[InstanceRow]:
            rows = conn.execute(
                f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE instance_id <> 'before-instances'"
                " ORDER BY CASE WHEN gone_at IS NULL THEN 0 ELSE 1 END, started_at DESC"
            ).fetchall()
            return [InstanceRow._make(r) for r in rows]

        return await self._db.run_sync(run)

    async def prune(self, recovered_before: int) -> int:
        """Forget instances recovered before ``recovered_before``; how many."""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "DELETE FROM instances WHERE recovered_at IS NOT NULL AND recovered_at < ?"
                " AND instance_id <> 'before-instances'",
                (recovered_before,),
            )
        )
        return int(cur.rowcount)


class DutyLeaseRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def claim(self, duty: str, holder: str, now_ms: int, until_ms: int) -> bool:
        """Hold ``duty`` until ``until_ms``: True when ``holder`` held it already or its
        lease had run out (one statement: of two instances claiming, one gets it)."""

        def run(conn: Connection) -> bool:
            rows = conn.execute(
                "INSERT INTO duty_leases (duty, holder, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (duty) DO UPDATE SET holder = excluded.holder,"
                " expires_at = excluded.expires_at"
                " WHERE duty_leases.holder = excluded.holder OR duty_leases.expires_at < ?"
                " RETURNING holder",
                (duty, holder, until_ms, now_ms),
            ).fetchall()
            return bool(rows)

        return await self._db.write(run)

    async def renew(self, holder: str, until_ms: int) -> None:
        """Every duty ``holder`` holds now runs until ``until_ms`` (its heartbeat)."""
        await self._db.write_one(
            "UPDATE duty_leases SET expires_at = ? WHERE holder = ?", (until_ms, holder)
        )

    async def release(self, holder: str) -> None:
        """A clean stop: the holder's duties are free at once."""
        await self._db.run_sync(
            lambda conn: conn.execute("DELETE FROM duty_leases WHERE holder = ?", (holder,))
        )

    async def holders(self) -> dict[str, tuple[str, int]]:
        """Each duty's holder and its lease's end (unix ms)."""

        def run(conn: Connection) -> dict[str, tuple[str, int]]:
            rows = conn.execute("SELECT duty, holder, expires_at FROM duty_leases").fetchall()
            return {str(r[0]): (str(r[1]), int(r[2])) for r in rows}

        return await self._db.run_sync(run)
