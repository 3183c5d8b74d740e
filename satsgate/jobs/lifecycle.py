"""Asynchronous jobs: a paid call that answers 202 at once and finishes in the background.

The job row is written in the same transaction as the spend of its payment, so a
poll never finds nothing and a crash never leaves a spent payment without its job.
A job ends exactly once (IN_PROGRESS -> COMPLETED or FAILED, one conditional
UPDATE); a FAILED job carries the error envelope with
its refund. Jobs still IN_PROGRESS when satsgate starts were lost with the
process that ran them: they are failed and refunded at start-up, except those
whose work runs on a remote platform and saved a resume state (the platform's
prediction id, ``ServiceContext.job_state``): a restart takes those up again
(``resume_jobs``), waiting for the same prediction, so a paid job is neither lost
nor run twice. At shutdown such jobs are left IN_PROGRESS, unrefunded, for the
next start.

One failure is not refunded: ``CONTENT_FILTERED_RETRY`` (the upstream refused on
content, the payment is kept for a free retry: satsgate.payments.rework). Such a job
ends FAILED with that envelope and no refund; its payment stays serving until the
window's retry, decline or expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ValidationError

from satsgate.cluster.events import ClusterEvents
from satsgate.errors import ApiError, ErrorCode
from satsgate.jobs.callbacks import CallbackSender, callback_body
from satsgate.store import Job, JobCallback, JobRepository, JobStatus

if TYPE_CHECKING:
    from satsgate.services.catalog.rates import RateBook

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
    # A communication held for review (CONTENT_POLICY_HELD): COMPLETED with the call's
    # result once the operator releases it, FAILED with the refund otherwise.
    "held",
)
# A job failure whose payment is kept, not refunded (a free-retry window opened).
KEPT_FOR_RETRY = ErrorCode.CONTENT_FILTERED_RETRY
POLL_INTERVAL_MS = 5000
MAX_WAIT_MS = 600_000


# Every job's progress runs from 0 to this.
PROGRESS_TOTAL = 100.0


@dataclass
class Progress:
    progress: float = 0.0
    total: float = PROGRESS_TOTAL
    message: str = ""


JobWork = Callable[[Callable[[float, str], None]], Awaitable[dict[str, Any]]]
FailureRefund = Callable[[str], Awaitable[dict[str, Any] | None]]


# The channel a job's progress and end go out on to the other instances (PostgreSQL).
JOB_EVENTS = "satsgate_jobs"
# A job's progress goes out at most this often (its end always goes out).
_PROGRESS_EVERY_S = 0.5
# A waiter for a job running elsewhere reads its row again at least this often, in case
# an event was lost (the listener reconnecting); without events, once a second.
_REMOTE_POLL_S = 5.0
# Progress kept of jobs running elsewhere; past this, the entry heard of longest ago goes
# (an end lost while the listener reconnected, or a gone instance's jobs, leave entries).
_REMOTE_KEPT = 10_000


class JobRunner:
    def __init__(
        self,
        jobs: JobRepository,
        base_url: str,
        callbacks: CallbackSender | None = None,
        events: ClusterEvents | None = None,
    ) -> None:
        self._jobs = jobs
        self._base_url = base_url
        self._callbacks = callbacks
        # Several instances: a job's progress and end are published, and those of jobs
        # running on other instances heard (a waiter here wakes when they change).
        self._events = events
        self._published_at: dict[str, float] = {}
        # Jobs running on other instances: the latest progress heard of each (for polls
        # and waiters here; at most _REMOTE_KEPT, the longest unheard dropped first), and
        # for those someone here follows, the event that wakes them and how many follow.
        self._remote_progress: dict[str, Progress] = {}
        self._remote_changed: dict[str, asyncio.Event] = {}
        self._remote_followers: dict[str, int] = {}
        if events is not None:
            events.on(JOB_EVENTS, self._heard)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._progress: dict[str, Progress] = {}
        self._changed: dict[str, asyncio.Event] = {}
        # Payment ids of running jobs that shutdown leaves for the next start (their
        # cancellation is neither a failure nor a reason to refund).
        self._suspended: set[str] = set()
        self._resumed: set[str] = set()  # payment ids of jobs taken up after a restart

    def state_for(self, payment_id: str) -> JobStateStore:
        """The resume state of the job of ``payment_id`` (ServiceContext.job_state)."""
        return JobStateStore(self._jobs, payment_id)

    def suspended(self, payment_id: str) -> bool:
        """Whether this payment's job is being put aside by shutdown, to resume later."""
        return payment_id in self._suspended

    async def adopt(self, job: Job, work: JobWork, refund_on_failure: FailureRefund) -> None:
        """Run ``work`` for a job row that already exists (one taken up after a restart)."""
        self._resumed.add(job.payment_id)
        self.start(job, work, refund_on_failure)

    def resumed(self, payment_id: str) -> bool:
        """Whether this payment's job was taken up again after a restart (its payment is
        serving: the start-up refund of unanswered calls leaves it alone)."""
        return payment_id in self._resumed

    async def of_payment(self, payment_id: str) -> Job | None:
        return await self._jobs.latest_of_payment(payment_id)

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
            # The HMAC key of this job's signed callbacks (satsgate.jobs.callbacks): only here.
            **({"callback_secret": job.callback.secret} if job.callback else {}),
        }

    def accepted_headers(self, job: Job) -> dict[str, str]:
        return {
            "X-Job-Id": job.job_id,
            "X-Poll-Url": self.poll_url(job),
            "X-Poll-Interval-Ms": str(POLL_INTERVAL_MS),
        }

    def prepare(
        self,
        *,
        payment_id: str,
        service: str,
        job_type: str,
        callback: tuple[str, str | None] | None = None,
    ) -> Job:
        """A new job's row, not yet written: the spender writes it in the transaction
        that spends its payment (``PaymentRepository.spend_for_job``), then
        :meth:`start` runs it. ``callback``: the caller's callback_url and callback_id."""
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
            JobCallback(callback[0], callback[1], secrets.token_hex(32)) if callback else None,
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
                self._publish(job.job_id, state, ended=False)

        try:
            result = await work(report)
        except asyncio.CancelledError:
            if job.payment_id in self._suspended:
                raise  # left IN_PROGRESS with its resume state, for the next start
            await asyncio.shield(
                self._fail(
                    job,
                    ApiError(
                        ErrorCode.L402_UPSTREAM_FAILED,
                        "The job was interrupted; the payment was refunded.",
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
                    ErrorCode.L402_UPSTREAM_FAILED,
                    "The job failed after payment; the payment was refunded.",
                ),
                refund_on_failure,
                str(exc),
            )
        else:
            await self._finish(job, JobStatus.COMPLETED, result, None)
        finally:
            self._tasks.pop(job.job_id, None)
            self._resumed.discard(job.payment_id)
            self._progress.pop(job.job_id, None)
            self._signal(job.job_id)  # the row says how it ended; the waiters read it
            self._changed.pop(job.job_id, None)
            self._publish(job.job_id, None, ended=True)

    async def _fail(
        self, job: Job, exc: ApiError, refund_on_failure: FailureRefund, reason: str | None = None
    ) -> None:
        if exc.refund is None and exc.code != KEPT_FOR_RETRY:
            exc.refund = await refund_on_failure(reason or exc.message)
        await self._finish(job, JobStatus.FAILED, None, exc.envelope())

    async def _finish(
        self,
        job: Job,
        status: JobStatus,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
    ) -> bool:
        """End ``job`` once; its callback, if it has one, is owed from the same commit."""
        now = int(time.time())
        ended = replace(job, status=status, result=result, error=error, updated_at=now)
        body = callback_body(ended, status_body(ended, None)) if job.callback else None
        done = await self._jobs.finish(job.job_id, status, result, error, now, body)
        if done and body is not None and self._callbacks is not None:
            self._callbacks.kick()
        return done

    def _publish(self, job_id: str, progress: Progress | None, *, ended: bool) -> None:
        if self._events is None:
            return
        now = time.monotonic()
        if ended:
            self._published_at.pop(job_id, None)
        elif now - self._published_at.get(job_id, 0.0) < _PROGRESS_EVERY_S:
            return
        else:
            self._published_at[job_id] = now
        event: dict[str, Any] = {"job": job_id, "ended": ended}
        if progress is not None:
            event.update(progress=progress.progress, total=progress.total,
                         message=progress.message[:500])  # fmt: skip
        self._events.publish(JOB_EVENTS, json.dumps(event))

    def _heard(self, payload: str) -> None:
        """A job's event from any instance: for a job running elsewhere, its progress
        kept here and its followers woken."""
        event = json.loads(payload)
        job_id = str(event["job"])
        if job_id in self._tasks:
            return  # ours: already signalled
        self._remote_progress.pop(job_id, None)  # re-inserted last: the newest heard
        if not event.get("ended"):
            self._remote_progress[job_id] = Progress(
                float(event["progress"]), float(event["total"]), str(event["message"])
            )
            if len(self._remote_progress) > _REMOTE_KEPT:
                del self._remote_progress[next(iter(self._remote_progress))]
        changed = self._remote_changed.get(job_id)
        if changed is not None:
            changed.set()

    def _signal(self, job_id: str) -> None:
        event = self._changed.get(job_id)
        if event is not None:
            event.set()

    async def get(self, job_id: str) -> Job | None:
        return await self._jobs.get(job_id)

    def progress(self, job_id: str) -> Progress | None:
        """The job's latest progress, whichever instance runs it; None once it has ended
        (or before anything was heard of a job running elsewhere)."""
        return self._progress.get(job_id) or self._remote_progress.get(job_id)

    @contextlib.contextmanager
    def following(self, job_id: str) -> Iterator[None]:
        """While inside, :meth:`wait_change` on a job running elsewhere wakes at its
        events (several followers of one job share them)."""
        self._remote_followers[job_id] = self._remote_followers.get(job_id, 0) + 1
        self._remote_changed.setdefault(job_id, asyncio.Event())
        try:
            yield
        finally:
            self._remote_followers[job_id] -= 1
            if not self._remote_followers[job_id]:
                del self._remote_followers[job_id]
                del self._remote_changed[job_id]

    async def wait_change(self, job_id: str, timeout_s: float) -> None:
        """Wait until the job reports progress or ends, or the timeout passes. A job
        running on another instance (followed, see :meth:`following`): until its event
        comes (a read of its row at least every few seconds), or every second without
        events."""
        event = self._changed.get(job_id)
        if event is not None:  # a job of this instance
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
            event.clear()
            return
        remote = self._remote_changed.get(job_id)
        if self._events is None or remote is None:
            await asyncio.sleep(min(timeout_s, 1.0))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(remote.wait(), min(timeout_s, _REMOTE_POLL_S))
        remote.clear()

    async def fail_orphans(
        self, refund_for: Callable[[Job], Awaitable[dict[str, Any] | None]], served_by: str
    ) -> int:
        """Jobs a gone instance (``served_by``) left IN_PROGRESS are failed and refunded."""
        count = 0
        for job in await self._jobs.in_progress(served_by):
            if job.job_id in self._tasks:
                continue
            exc = ApiError(
                ErrorCode.L402_UPSTREAM_FAILED,
                "The job was lost in a restart; the payment was refunded.",
            )
            exc.refund = await refund_for(job)
            if await self._finish(job, JobStatus.FAILED, None, exc.envelope()):
                count += 1
        return count

    async def fail_unstarted(self, payment_id: str, refund: dict[str, Any] | None) -> bool:
        """The job of ``payment_id`` whose row was written with its spend but never
        started here (the store's answer to the spend was cut): failed with its refund,
        once. False when it has no such job."""
        for job in await self._jobs.in_progress(self._jobs.instance_id):
            if job.payment_id != payment_id or job.job_id in self._tasks:
                continue
            exc = ApiError(
                ErrorCode.L402_UPSTREAM_FAILED,
                "The job could not be started; the payment was refunded.",
            )
            exc.refund = refund
            return await self._finish(job, JobStatus.FAILED, None, exc.envelope())
        return False

    async def close(self) -> None:
        """Cancel the running jobs: failed and refunded, except those with a resume state,
        which stay IN_PROGRESS for the next start to take up."""
        running = {job_id for job_id, task in self._tasks.items() if not task.done()}
        if running:
            for job, _state in await self._jobs.resumable(self._jobs.instance_id):
                if job.job_id in running:
                    self._suspended.add(job.payment_id)
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class JobStateStore:
    """ServiceContext.job_state of a job: its resume state in the jobs table."""

    def __init__(self, jobs: JobRepository, payment_id: str) -> None:
        self._jobs = jobs
        self._payment_id = payment_id

    async def load(self) -> dict[str, Any] | None:
        return await self._jobs.resume_state(self._payment_id)

    async def save(self, state: dict[str, Any]) -> None:
        await self._jobs.save_resume(self._payment_id, state, int(time.time()))


class ResumableSpec(Protocol):
    def parse(self, body: Any, book: RateBook) -> BaseModel: ...


# (job, its service, the params rebuilt from the resume state, the gone instance that ran
# it) -> whether it was taken up here
Resume = Callable[[Job, Any, BaseModel, str], Awaitable[bool]]


async def resume_jobs(
    jobs: JobRepository,
    specs: Mapping[str, ResumableSpec],
    resume: Resume,
    book: RateBook,
    served_by: str,
) -> int:
    """Before the orphans are failed: take up every IN_PROGRESS job of the gone instance
    ``served_by`` whose resume state names a remote prediction; its saved params
    validate against the app's rate ``book`` (its destinations), as when it was paid.
    The rest are left to ``fail_orphans``."""
    count = 0
    for job, state in await jobs.resumable(served_by):
        spec = specs.get(job.service)
        if spec is None or not state.get("prediction_id") or "params" not in state:
            continue
        try:
            params = spec.parse(state["params"], book)
        except ValidationError:
            log.warning("job %s: its saved params no longer validate; not resumed", job.job_id)
            continue
        if await resume(job, spec, params, served_by):
            count += 1
    return count


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
    elif job.status is JobStatus.IN_PROGRESS:
        if progress is not None:
            body["progress"] = {
                "progress": progress.progress,
                "total": progress.total,
                "message": progress.message,
            }
        body["poll_interval_ms"] = POLL_INTERVAL_MS
    return body
