"""Jobs: the asynchronous runs of spent calls, and their outcomes.

A job's row is written in the same transaction as the spend of its payment
(:meth:`satsgate.store.payments.PaymentRepository.spend_for_job`), and its end in the
same transaction as its payment's move from ``serving`` to ``spent``
(:meth:`JobRepository.finish`): a crash never leaves a spent payment without its job,
nor a finished job whose payment still looks unanswered.
"""

from __future__ import annotations

import json
from typing import Any

from satsgate.store.engine import Engine
from satsgate.store.rows import Job, JobCallback, JobStatus
from satsgate.store.sql import Connection, json_or_none, transaction

_SELECT_JOB = (
    "SELECT job_id, payment_id, service, job_type, status, result_json, error_json,"
    " created_at, updated_at, callback_url, callback_id, callback_secret FROM jobs WHERE "
)


# A job runs on the instance that spent its payment (or took it up: PaymentRepository.adopt).
_SERVED_BY = "payment_id IN (SELECT payment_id FROM payments WHERE served_by = ?)"


def _jobs_where(conn: Connection, clause: str, args: tuple[Any, ...]) -> list[Job]:
    rows = conn.execute(_SELECT_JOB + clause, args).fetchall()
    return [
        Job(
            r[0],
            r[1],
            r[2],
            r[3],
            JobStatus(r[4]),
            json.loads(r[5]) if r[5] else None,
            json.loads(r[6]) if r[6] else None,
            r[7],
            r[8],
            JobCallback(r[9], r[10], r[11]) if r[9] else None,
        )
        for r in rows
    ]


_INSERT_JOB = (
    "INSERT INTO jobs (job_id, payment_id, service, job_type, status, result_json,"
    " error_json, created_at, updated_at, callback_url, callback_id, callback_secret)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)


def insert_job(conn: Connection, job: Job) -> None:
    """The job's INSERT, inside the caller's transaction."""
    conn.execute(
        _INSERT_JOB,
        (
            job.job_id,
            job.payment_id,
            job.service,
            job.job_type,
            str(job.status),
            json_or_none(job.result),
            json_or_none(job.error),
            job.created_at,
            job.updated_at,
            job.callback.url if job.callback else None,
            job.callback.callback_id if job.callback else None,
            job.callback.secret if job.callback else None,
        ),
    )


class JobRepository:
    """Every method runs on the store thread."""

    def __init__(self, db: Engine, instance_id: str) -> None:
        self._db = db
        self.instance_id = instance_id  # this process's jobs are those its payments serve

    async def insert(self, job: Job) -> None:
        await self._db.run_sync(lambda conn: insert_job(conn, job))

    async def finish(
        self,
        job_id: str,
        status: JobStatus,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        now: int,
        callback_body: str | None = None,
    ) -> bool:
        """IN_PROGRESS -> COMPLETED or FAILED, once. COMPLETED moves its payment serving ->
        spent in the same transaction (the result is recorded); a failure's payment moved
        with its refund, and one whose refund could not be issued stays serving, for the
        start-up sweep to refund. ``callback_body``, for a job with a callback, enters the
        outbox in the same transaction: a job that ended is a callback owed."""

        def go(conn: Connection) -> bool:
            with transaction(conn):
                cur = conn.execute(
                    "UPDATE jobs SET status = ?, result_json = ?, error_json = ?,"
                    " updated_at = ? WHERE job_id = ? AND status = 'IN_PROGRESS'"
                    " RETURNING payment_id",
                    (str(status), json_or_none(result), json_or_none(error), now, job_id),
                )
                found = cur.fetchall()
                if not found:
                    return False
                if status is JobStatus.COMPLETED:
                    conn.execute(
                        "UPDATE payments SET status = 'spent'"
                        " WHERE payment_id = ? AND status = 'serving'",
                        (found[0][0],),
                    )
                if callback_body is not None:
                    conn.execute(
                        "INSERT INTO callback_deliveries (job_id, url, secret, body, next_at)"
                        " SELECT job_id, callback_url, callback_secret, ?, ? FROM jobs"
                        " WHERE job_id = ? AND callback_url IS NOT NULL",
                        (callback_body, now, job_id),
                    )
                return True

        return await self._db.run_sync(go)

    async def get(self, job_id: str) -> Job | None:
        jobs = await self._db.run_sync(lambda conn: _jobs_where(conn, "job_id = ?", (job_id,)))
        return jobs[0] if jobs else None

    async def latest_of_payment(self, payment_id: str) -> Job | None:
        """The newest job a payment bought (a free retry's job is newer than the first)."""
        jobs = await self._db.run_sync(
            lambda conn: _jobs_where(
                conn, "payment_id = ? ORDER BY created_at DESC LIMIT 1", (payment_id,)
            )
        )
        return jobs[0] if jobs else None

    async def in_progress(self, served_by: str) -> list[Job]:
        """IN_PROGRESS jobs that run on instance ``served_by`` (a held communication's job
        waits for the operator, not for a runner: satsgate.store.held_requests)."""
        return await self._db.run_sync(
            lambda conn: _jobs_where(
                conn,
                "status = 'IN_PROGRESS' AND job_type != 'held' AND " + _SERVED_BY,
                (served_by,),
            )
        )

    async def save_resume(self, payment_id: str, state: dict[str, Any], now: int) -> bool:
        """Record what resumes the IN_PROGRESS job of ``payment_id`` after a restart."""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE jobs SET resume_json = ?, updated_at = ?"
                " WHERE payment_id = ? AND status = 'IN_PROGRESS'",
                (json_or_none(state), now, payment_id),
            )
        )
        return cur.rowcount == 1

    async def resume_state(self, payment_id: str) -> dict[str, Any] | None:
        """The resume state of the IN_PROGRESS job of ``payment_id``, if one was saved."""
        rows = await self._db.run_sync(
            lambda conn: conn.execute(
                "SELECT resume_json FROM jobs WHERE payment_id = ? AND status = 'IN_PROGRESS'"
                " AND resume_json IS NOT NULL",
                (payment_id,),
            ).fetchall()
        )
        return dict(json.loads(rows[0][0])) if rows else None

    async def resumable(self, served_by: str) -> list[tuple[Job, dict[str, Any]]]:
        """IN_PROGRESS jobs of instance ``served_by`` with a resume state, and that state."""

        def read(conn: Connection) -> list[tuple[Job, dict[str, Any]]]:
            clause = "status = 'IN_PROGRESS' AND resume_json IS NOT NULL AND " + _SERVED_BY
            states = dict(
                conn.execute(
                    "SELECT job_id, resume_json FROM jobs WHERE " + clause, (served_by,)
                ).fetchall()
            )
            jobs = _jobs_where(conn, clause, (served_by,))
            return [(job, dict(json.loads(states[job.job_id]))) for job in jobs]

        return await self._db.run_sync(read)
