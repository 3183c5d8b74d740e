"""The queue of CPU engine jobs between gateways and ``satsgate worker`` processes
(PostgreSQL only; the table is migration 0025).

A gateway enqueues a job (its function's name, its pickled arguments, its time limit and
its payer) and waits; a worker claims the next job with ``FOR UPDATE SKIP LOCKED``, runs
it, and writes its outcome back. What holds the guarantees:

- **Fairness between payers**: a claim takes the waiting job of the payer served least
  recently (a payer with nothing claimed among its waiting and running jobs first; ties
  in order of arrival), exactly the order of the in-process pool
  (satsgate/engines/cpu_jobs.py), computed over the whole table, so one payer's twenty
  jobs hold another payer's single job up by at most the one job each worker is running.
- **A worker that dies loses nothing**: a claim is a lease (``lease_until_ms``) that the
  worker's heartbeat extends; a running job whose lease ran out is claimed again by
  another worker (``attempts`` counts the claims, at most ``max_attempts``) while it may
  still be claimed (``claim_by_ms``); else the gateway fails it (:meth:`expire`).
- **Exactly once**: every status change is a conditional UPDATE. A worker writes its
  outcome only while the job is still ``running`` under its name and attempt, so a
  result that comes back after the gateway failed the job (and the gate refunded the
  call), or after another worker took it over, changes nothing.
- **No tight polling**: an enqueue notifies ``satsgate_cpu_queued`` (workers wake), an
  outcome ``satsgate_cpu_done`` with the job's id (its gateway wakes), in the statement
  that writes them (delivered at its commit).

Times are the database's clock (``clock_timestamp()``), never a machine's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection

QUEUED_CHANNEL = "satsgate_cpu_queued"
DONE_CHANNEL = "satsgate_cpu_done"

_NOW_MS = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
_NOW_US = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"

# Why a job failed without an outcome of its function (the ``error`` column).
TIMEOUT = "timeout"  # past its time limit (on the worker, or its whole time at the gateway)
UNCLAIMED = "unclaimed"  # no worker took it while it could still run
LOST = "lost"  # its workers stopped answering, and it could not be run again


@dataclass(frozen=True)
class QueuedJob:
    id: int
    claim_by_ms: int
    deadline_ms: int


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    fn: str
    args: bytes
    limit_s: float
    quick: bool
    attempt: int
    payer: str


@dataclass(frozen=True)
class JobEnd:
    """A job that ended: ``done`` or ``error`` with the function's outcome, or
    ``failed`` / ``cancelled`` with the reason in ``error``."""

    id: int
    status: str
    outcome: bytes | None
    error: str | None


@dataclass(frozen=True)
class WorkerState:
    name: str
    host: str
    pid: int
    engines: str
    concurrency: int
    heartbeat_age_s: float
    running: int
    done: int


@dataclass(frozen=True)
class QueueState:
    workers: list[WorkerState]
    queued: int
    running: int
    oldest_wait_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "workers": [vars(w) for w in self.workers],
            "queued": self.queued,
            "running": self.running,
            "oldest_wait_s": self.oldest_wait_s,
        }


_ENQUEUE = f"""
WITH job AS (
    INSERT INTO cpu_jobs (engine, payer, quick, fn, args, limit_s, status, created_us,
                          claim_by_ms, deadline_ms)
    VALUES (?, ?, ?, ?, ?, ?, 'queued', {_NOW_US}, {_NOW_MS} + ?, {_NOW_MS} + ?)
    RETURNING id, engine, claim_by_ms, deadline_ms
)
SELECT id, claim_by_ms, deadline_ms, pg_notify('{QUEUED_CHANNEL}', engine) FROM job
"""

_CLAIM = f"""
WITH active AS (
    SELECT payer, MAX(claimed_us) AS served FROM cpu_jobs
    WHERE status IN ('queued', 'running') GROUP BY payer
), pick AS (
    SELECT j.id FROM cpu_jobs j JOIN active a ON a.payer = j.payer
    WHERE j.status IN ('queued', 'running')
      AND (j.status = 'queued' OR j.lease_until_ms < {_NOW_MS})
      AND (? = 1 OR j.engine = ANY(?))
      AND (j.quick = 1 OR ? = 1)
      AND j.claim_by_ms > {_NOW_MS}
      AND j.attempts < ?
    ORDER BY COALESCE(a.served, -1), j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE cpu_jobs AS c
SET status = 'running', worker = ?, attempts = c.attempts + 1, claimed_us = {_NOW_US},
    lease_until_ms = {_NOW_MS} + ?
FROM pick WHERE c.id = pick.id
RETURNING c.id, c.fn, c.args, c.limit_s, c.quick, c.attempts, c.payer
"""

_FINISH = f"""
WITH ended AS (
    UPDATE cpu_jobs SET status = ?, outcome = ?, error = ?, finished_ms = {_NOW_MS},
        args = NULL
    WHERE id = ? AND status = 'running' AND worker = ? AND attempts = ?
    RETURNING id
)
SELECT pg_notify('{DONE_CHANNEL}', CAST(id AS TEXT)) FROM ended
"""

_COLLECT = """
WITH ended AS (
    SELECT id, status, outcome, error FROM cpu_jobs
    WHERE id = ANY(?) AND (status IN ('failed', 'cancelled')
        OR (status IN ('done', 'error') AND outcome IS NOT NULL))
), cleared AS (
    UPDATE cpu_jobs AS c SET outcome = NULL FROM ended WHERE c.id = ended.id RETURNING c.id
)
SELECT id, status, outcome, error FROM ended
"""

_EXPIRE = f"""
UPDATE cpu_jobs SET status = 'failed', finished_ms = {_NOW_MS}, args = NULL,
    error = CASE WHEN deadline_ms <= {_NOW_MS} THEN '{TIMEOUT}'
                 WHEN attempts = 0 THEN '{UNCLAIMED}'
                 ELSE '{LOST}' END
WHERE id = ANY(?) AND status IN ('queued', 'running') AND (
    deadline_ms <= {_NOW_MS}
    OR ((status = 'queued' OR lease_until_ms < {_NOW_MS})
        AND (claim_by_ms <= {_NOW_MS} OR attempts >= ?))
)
RETURNING id, error
"""


class CpuQueueRepository:
    """The queue's statements (PostgreSQL's SQL: the queue needs it)."""

    def __init__(self, db: Engine) -> None:
        self._db = db

    async def enqueue(
        self,
        *,
        engine: str,
        payer: str,
        quick: bool,
        fn: str,
        args: bytes,
        limit_s: float,
        wait_s: float,
        grace_s: float,
    ) -> QueuedJob:
        """Queue a job and wake the workers. It may be claimed for ``wait_s`` (and
        claimed again after a lost worker within that time); after ``wait_s + limit_s
        + grace_s`` its gateway gives up on it."""
        claim_ms = round(wait_s * 1000)
        deadline_ms = round((wait_s + limit_s + grace_s) * 1000)

        def go(conn: Connection) -> QueuedJob:
            row = conn.execute(
                _ENQUEUE, (engine, payer, quick, fn, args, limit_s, claim_ms, deadline_ms)
            ).fetchone()
            return QueuedJob(int(row[0]), int(row[1]), int(row[2]))

        return await self._db.write(go)

    async def claim(
        self,
        worker: str,
        engines: Sequence[str] | None,
        *,
        long_ok: bool,
        lease_s: float,
        max_attempts: int,
    ) -> ClaimedJob | None:
        """The next job for ``worker`` (of ``engines``, None: any; a long one only when
        ``long_ok``), now running under its lease; None when none waits."""
        args = (
            engines is None,
            list(engines or ()),
            long_ok,
            max_attempts,
            worker,
            round(lease_s * 1000),
        )

        def go(conn: Connection) -> ClaimedJob | None:
            row = conn.execute(_CLAIM, args).fetchone()
            if row is None:
                return None
            return ClaimedJob(
                int(row[0]),
                str(row[1]),
                bytes(row[2]),
                float(row[3]),
                bool(row[4]),
                int(row[5]),
                str(row[6]),
            )

        return await self._db.write(go)

    async def heartbeat(
        self,
        worker: str,
        *,
        host: str,
        pid: int,
        engines: str,
        concurrency: int,
        running: int,
        done: int,
        lease_s: float,
    ) -> None:
        """The worker is alive: its row, and the leases of the jobs it runs, renewed."""
        lease_ms = round(lease_s * 1000)

        def go(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO cpu_workers (name, host, pid, engines, concurrency, started_ms,"
                f" heartbeat_ms, running, done) VALUES (?, ?, ?, ?, ?, {_NOW_MS}, {_NOW_MS},"
                " ?, ?) ON CONFLICT (name) DO UPDATE SET heartbeat_ms ="
                " EXCLUDED.heartbeat_ms, running = EXCLUDED.running, done = EXCLUDED.done",
                (worker, host, pid, engines, concurrency, running, done),
            )
            conn.execute(
                f"UPDATE cpu_jobs SET lease_until_ms = {_NOW_MS} + ?"
                " WHERE worker = ? AND status = 'running'",
                (lease_ms, worker),
            )

        await self._db.write(go)

    async def finish(
        self,
        job: ClaimedJob,
        worker: str,
        status: str,
        outcome: bytes | None,
        error: str | None = None,
    ) -> bool:
        """Write ``job``'s outcome (``done``, ``error``, or ``failed`` with a reason) and
        wake its gateway; False when the job is no longer this worker's to finish (failed
        by its gateway, or claimed again by another worker): then nothing changed."""
        args = (status, outcome, error, job.id, worker, job.attempt)
        return bool(await self._db.write(lambda conn: conn.execute(_FINISH, args).fetchall()))

    async def collect(self, ids: Sequence[int]) -> list[JobEnd]:
        """Those of ``ids`` that ended, with their outcome, each outcome handed over once:
        it is cleared as it is read, and a job whose outcome was read already is not
        returned again (two reads of one job racing, a notification's and the poll's,
        give it to one of them)."""

        def go(conn: Connection) -> list[JobEnd]:
            rows = conn.execute(_COLLECT, (list(ids),)).fetchall()
            return [
                JobEnd(int(r[0]), str(r[1]), bytes(r[2]) if r[2] is not None else None, r[3])
                for r in rows
            ]

        return await self._db.write(go)

    async def expire(self, ids: Sequence[int], max_attempts: int) -> dict[int, str]:
        """Fail those of ``ids`` whose time is up: past their deadline, or waiting (never
        claimed, or lost by their worker) when they may no longer be claimed; by id, why."""

        def go(conn: Connection) -> dict[int, str]:
            rows = conn.execute(_EXPIRE, (list(ids), max_attempts)).fetchall()
            return {int(r[0]): str(r[1]) for r in rows}

        return await self._db.write(go)

    async def cancel(self, job_id: int) -> bool:
        """The gateway stopped waiting: a job not ended yet is not run (or its outcome is
        not kept)."""
        return bool(
            await self._db.write_one(
                f"UPDATE cpu_jobs SET status = 'cancelled', finished_ms = {_NOW_MS},"
                " args = NULL WHERE id = ? AND status IN ('queued', 'running')",
                (job_id,),
            )
        )

    async def unregister(self, worker: str) -> None:
        await self._db.write_one("DELETE FROM cpu_workers WHERE name = ?", (worker,))

    async def sweep(self, keep_s: float) -> int:
        """Forget jobs ended (or abandoned past their deadline) and workers silent for
        more than ``keep_s``; how many jobs went."""
        keep_ms = round(keep_s * 1000)

        def go(conn: Connection) -> int:
            gone = conn.execute(
                f"DELETE FROM cpu_jobs WHERE (finished_ms IS NOT NULL AND finished_ms <"
                f" {_NOW_MS} - ?) OR (finished_ms IS NULL AND deadline_ms < {_NOW_MS} - ?)",
                (keep_ms, keep_ms),
            ).rowcount
            conn.execute(f"DELETE FROM cpu_workers WHERE heartbeat_ms < {_NOW_MS} - ?", (keep_ms,))
            return int(gone)

        return await self._db.write(go)

    async def state(self) -> QueueState:
        """The workers with the age of their last heartbeat, the jobs waiting and running,
        and how long the oldest waiting job has waited."""

        def go(conn: Connection) -> QueueState:
            workers = [
                WorkerState(
                    str(r[0]),
                    str(r[1]),
                    int(r[2]),
                    str(r[3]),
                    int(r[4]),
                    max(0.0, int(r[5]) / 1000),
                    int(r[6]),
                    int(r[7]),
                )
                for r in conn.execute(
                    f"SELECT name, host, pid, engines, concurrency, {_NOW_MS} - heartbeat_ms,"
                    " running, done FROM cpu_workers ORDER BY name"
                ).fetchall()
            ]
            row = conn.execute(
                "SELECT COUNT(*) FILTER (WHERE status = 'queued'),"
                " COUNT(*) FILTER (WHERE status = 'running'),"
                f" {_NOW_US} - MIN(created_us) FILTER (WHERE status = 'queued')"
                " FROM cpu_jobs WHERE status IN ('queued', 'running')"
            ).fetchone()
            oldest = None if row[2] is None else max(0.0, int(row[2]) / 1_000_000)
            return QueueState(workers, int(row[0]), int(row[1]), oldest)

        return await self._db.read(go)
