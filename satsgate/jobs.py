"""Asynchronous jobs: a paid call that answers 202 at once and finishes in the background.

The job row is written in the same transaction as the spend of its payment, so a
poll never finds nothing and a crash never leaves a spent payment without its job.
A job ends exactly once (IN_PROGRESS -> COMPLETED or FAILED, one conditional
UPDATE); a FAILED job carries the error envelope with
its refund. Jobs still IN_PROGRESS when satsgate starts were lost with the
process that ran them: they are failed and refunded at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from satsgate.errors import ApiError
from satsgate.store import Job, JobRepository, JobStatus

log = logging.getLogger(__name__)

JOB_TYPES = (
    "video",
    "video-image",
    "video-fal-standard",
    "video-fal-pro",
    "image-3d",
    "transcription",
    "epub-audiobook",
    "transcribe-translate",
    "translate-epub",
)
POLL_INTERVAL_MS = 5000
MAX_WAIT_MS = 600_000


@dataclass
class Progress:
    progress: float = 0.0
    total: float = 100.0
    message: str = ""


JobWork = Callable[[Callable[[float, str], None]], Awaitable[dict[str, Any]]]
FailureRefund = Callable[[str], Awaitable[dict[str, Any] | None]]


class JobRunner:
    def __init__(self, jobs: JobRepository, base_url: str) -> None:
        self._jobs = jobs
        self._base_url = base_url
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._progress: dict[str, Progress] = {}
        self._changed: dict[str, asyncio.Event] = {}

    def poll_url(self, job: Job) -> str:
        return f"{self._base_url}/api/l402/job-status?requestId={job.job_id}&jobType={job.job_type}"

    def accepted_body(self, job: Job) -> dict[str, Any]:
        """The 202 body: every spelling of the id the spec uses."""
        return {
            "job_id": job.job_id,
            "jobId": job.job_id,
            "requestId": job.job_id,
            "jobType": job.job_type,
            "status": "processing",
            "poll_url": self.poll_url(job),
            "poll_interval_ms": POLL_INTERVAL_MS,
            "max_wait_ms": MAX_WAIT_MS,
        }

    def accepted_headers(self, job: Job) -> dict[str, str]:
        return {
            "X-Job-Id": job.job_id,
            "X-Poll-Url": self.poll_url(job),
            "X-Poll-Interval-Ms": str(POLL_INTERVAL_MS),
        }

    def prepare(self, *, payment_id: str, service: str, job_type: str) -> Job:
        """A new job's row, not yet written: the spender writes it in the transaction
        that spends its payment (``PaymentRepository.spend_for_job``), then
        :meth:`start` runs it."""
        now = int(time.time())
        return Job(
            f"job_{secrets.token_hex(12)}",
            payment_id,
            service,
            job_type,
            JobStatus.IN_PROGRESS,
            None,
            None,
            now,
            now,
        )

    def start(self, job: Job, work: JobWork, refund_on_failure: FailureRefund) -> None:
        """Run a job whose row is written, in the background."""
        self._progress[job.job_id] = Progress()
        self._changed[job.job_id] = asyncio.Event()
        task = asyncio.create_task(self._run(job, work, refund_on_failure), name=job.job_id)
        self._tasks[job.job_id] = task

    async def submit(
        self,
        *,
        payment_id: str,
        service: str,
        job_type: str,
        work: JobWork,
        refund_on_failure: FailureRefund,
    ) -> Job:
        """Write a job's row on its own and run it (a job whose payment is already spent)."""
        job = self.prepare(payment_id=payment_id, service=service, job_type=job_type)
        await self._jobs.insert(job)
        self.start(job, work, refund_on_failure)
        return job

    async def _run(self, job: Job, work: JobWork, refund_on_failure: FailureRefund) -> None:
        def report(progress: float, message: str = "") -> None:
            state = self._progress.get(job.job_id)
            if state is not None:
                state.progress, state.message = progress, message
                self._signal(job.job_id)

        try:
            result = await work(report)
        except asyncio.CancelledError:
            await asyncio.shield(
                self._fail(
                    job,
                    ApiError(
                        "L402_UPSTREAM_FAILED", "The job was interrupted; the payment was refunded."
                    ),
                    refund_on_failure,
                )
            )
            raise
        except ApiError as exc:
            await self._fail(job, exc, refund_on_failure)
        except Exception as exc:
            log.exception("job %s (%s) failed", job.job_id, job.service)
            await self._fail(
                job,
                ApiError(
                    "L402_UPSTREAM_FAILED",
                    "The job failed after payment; the payment was refunded.",
                ),
                refund_on_failure,
                str(exc),
            )
        else:
            await self._jobs.finish(
                job.job_id, JobStatus.COMPLETED, result, None, int(time.time())
            )
        finally:
            self._tasks.pop(job.job_id, None)
            self._signal(job.job_id)

    async def _fail(
        self, job: Job, exc: ApiError, refund_on_failure: FailureRefund, reason: str | None = None
    ) -> None:
        if exc.refund is None:
            exc.refund = await refund_on_failure(reason or exc.message)
        await self._jobs.finish(
            job.job_id, JobStatus.FAILED, None, exc.envelope(), int(time.time())
        )

    def _signal(self, job_id: str) -> None:
        event = self._changed.get(job_id)
        if event is not None:
            event.set()

    async def get(self, job_id: str) -> Job | None:
        return await self._jobs.get(job_id)

    def progress(self, job_id: str) -> Progress | None:
        return self._progress.get(job_id)

    async def wait_change(self, job_id: str, timeout_s: float) -> None:
        """Wait until the job reports progress or ends, or the timeout passes."""
        event = self._changed.get(job_id)
        if event is None:
            await asyncio.sleep(min(timeout_s, 1.0))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)
        event.clear()

    async def fail_orphans(
        self, refund_for: Callable[[Job], Awaitable[dict[str, Any] | None]]
    ) -> int:
        """At start-up: jobs left IN_PROGRESS by a previous process are failed and refunded."""
        count = 0
        for job in await self._jobs.in_progress():
            if job.job_id in self._tasks:
                continue
            exc = ApiError(
                "L402_UPSTREAM_FAILED", "The job was lost in a restart; the payment was refunded."
            )
            exc.refund = await refund_for(job)
            if await self._jobs.finish(
                job.job_id, JobStatus.FAILED, None, exc.envelope(), int(time.time())
            ):
                count += 1
        return count

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def status_body(job: Job, progress: Progress | None) -> dict[str, Any]:
    """What a poll answers: status, and the result or the error with its refund."""
    body: dict[str, Any] = {
        "status": str(job.status),
        "requestId": job.job_id,
        "jobId": job.job_id,
        "jobType": job.job_type,
    }
    if job.status is JobStatus.COMPLETED:
        body["result"] = job.result
    elif job.status is JobStatus.FAILED and job.error is not None:
        body.update(job.error)
    elif progress is not None:
        body["progress"] = {
            "progress": progress.progress,
            "total": progress.total,
            "message": progress.message,
        }
        body["poll_interval_ms"] = POLL_INTERVAL_MS
    return body
