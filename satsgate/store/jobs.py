"""Jobs: the asynchronous runs of spent calls, and their outcomes."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from satsgate.store.engine import Database
from satsgate.store.models import Job, JobStatus
from satsgate.store.sql import json_or_none

_SELECT_JOB = (
    "SELECT job_id, payment_id, service, job_type, status, result_json, error_json,"
    " created_at, updated_at FROM jobs WHERE "
)


def _jobs_where(conn: sqlite3.Connection, clause: str, args: tuple[Any, ...]) -> list[Job]:
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
        )
        for r in rows
    ]


class JobRepository:
    """Every method runs on the store thread."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def insert(self, job: Job) -> None:
        await self._db.run_sync(
            lambda conn: conn.execute(
                "INSERT INTO jobs (job_id, payment_id, service, job_type, status, result_json,"
                " error_json, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
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
                ),
            )
        )

    async def finish(
        self,
        job_id: str,
        status: JobStatus,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        now: int,
    ) -> bool:
        """IN_PROGRESS -> COMPLETED or FAILED, once."""
        cur = await self._db.run_sync(
            lambda conn: conn.execute(
                "UPDATE jobs SET status = ?, result_json = ?, error_json = ?, updated_at = ?"
                " WHERE job_id = ? AND status = 'IN_PROGRESS'",
                (str(status), json_or_none(result), json_or_none(error), now, job_id),
            )
        )
        return cur.rowcount == 1

    async def get(self, job_id: str) -> Job | None:
        jobs = await self._db.run_sync(lambda conn: _jobs_where(conn, "job_id = ?", (job_id,)))
        return jobs[0] if jobs else None

    async def in_progress(self) -> list[Job]:
        return await self._db.run_sync(lambda conn: _jobs_where(conn, "status = 'IN_PROGRESS'", ()))
