"""Free operations on async jobs: the status check and the result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from satsgate.errors import ApiError, ErrorCode, without_refund_secrets
from satsgate.jobs.lifecycle import JOB_TYPES, KEPT_FOR_RETRY, status_body
from satsgate.operations.answers import JobStatusBody
from satsgate.operations.base import Call, HttpRoute, OperationEnv, OperationSpec
from satsgate.payments.proof import proves
from satsgate.store import Job, JobStatus

REWORK_HINT = (
    "The rework_token (for the free retry, or POST /api/decline-retry) is shown to the payer "
    "only: poll with the Authorization header the call was paid with (or, for a payment made "
    "with create_payment, its paymentId)."
)

# A job type: one of JOB_TYPES (checked by _known_type; the schema lists them).
JobType = Annotated[str, WithJsonSchema({"type": "string", "enum": [*JOB_TYPES]})]


def _known_type(value: str | None) -> str | None:
    if value is not None and value not in JOB_TYPES:
        raise ValueError(f"must be one of {', '.join(JOB_TYPES)}")
    return value


class JobQuery(BaseModel):
    """GET /api/l402/job-status: the job id in any of the spec's spellings."""

    model_config = ConfigDict(extra="forbid", title="job status query")

    requestId: str = Field(
        min_length=1,
        max_length=200,
        validation_alias=AliasChoices("requestId", "jobId", "job_id"),
        description="Job id (requestId, jobId or job_id).",
    )
    jobType: JobType | None = Field(None, description="Job type.")
    paymentId: str | None = Field(
        None,
        max_length=200,
        description="A payment made with create_payment: its paymentId shows a failed job's "
        "refund link (an HTTP payment's payer polls with its credential instead).",
    )

    _known = field_validator("jobType")(_known_type)


class JobArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", title="job arguments")

    requestId: str = Field(
        min_length=1, max_length=200, description="The requestId / jobId of the submission."
    )
    jobType: str = Field(
        description="The job type from the submission.", json_schema_extra={"enum": [*JOB_TYPES]}
    )

    _known = field_validator("jobType")(_known_type)


class JobResultArgs(JobArgs):
    model_config = ConfigDict(title="job result arguments")

    paymentId: str | None = Field(
        None, max_length=200, description="Optional: the payment that bought the job."
    )


async def find_job(
    env: OperationEnv, job_id: str, job_type: str | None, payment_id: str | None = None
) -> Job:
    job = await env.jobs.get(job_id)
    if (
        job is None
        or (job_type is not None and job.job_type != job_type)
        or (payment_id is not None and job.payment_id != payment_id)
    ):
        raise ApiError(
            ErrorCode.NOT_FOUND,
            f"No job {job_id!r}" + (f" of type {job_type}." if job_type else "."),
        )
    return job


def untrusted(env: OperationEnv, job: Job) -> bool:
    """The spec says so, or the gate marked the stored result (the spec may be gone)."""
    if job.status is not JobStatus.COMPLETED:
        return False
    spec = env.by_slug.get(job.service)
    marked = isinstance(job.result, dict) and job.result.get("untrusted_output") is True
    return marked or (spec is not None and spec.untrusted_output)


async def _payer_asks(env: OperationEnv, job: Job, call: Call, payment_id: str | None) -> bool:
    """The caller proved the job's payment: the credential it was paid with (HTTP) or,
    for a payment made with create_payment, its paymentId (satsgate.payments.proof)."""
    if job.status is not JobStatus.FAILED:
        return False
    payment = await env.gate.get_payment(job.payment_id)
    return payment is not None and proves(
        env.gate.verifier, payment, authorization=call.authorization, payment_id=payment_id
    )


async def job_body(env: OperationEnv, job: Job, refund_shown: bool = False) -> JobStatusBody:
    """The poll answer; a failed job's refund link, rework_token and paymentId only for
    its payer (``refund_shown``). A job the upstream refused on content
    (CONTENT_FILTERED_RETRY) shows its payment's free-retry window as it is now
    (ReworkDesk.job_error)."""
    body = status_body(job, env.jobs.progress(job.job_id))
    desk = env.gate.spender.rework
    if desk is not None and job.error is not None and job.error.get("error_code") == KEPT_FOR_RETRY:
        shown = await desk.job_error(job.payment_id, job.error)
        body = {**{k: v for k, v in body.items() if k not in job.error}, **shown}
    if not refund_shown:
        body = without_refund_secrets(body)  # a job id alone shows no refund link
        # Nor the token that retries or declines for a refund, nor the paymentId (an MCP
        # payment's proof: it would show the token and its refund to anyone).
        hidden = {"rework_token", "paymentId"} & body.keys()
        if hidden:
            body = {k: v for k, v in body.items() if k not in hidden}
        if "rework_token" in hidden:
            body["rework_token_hint"] = REWORK_HINT
    status = JobStatusBody.model_validate(body)
    status._untrusted = untrusted(env, job)
    return status


async def job_status(env: OperationEnv, args: JobQuery | JobArgs, call: Call) -> JobStatusBody:
    """One status check; FAILED is a status here, not a failure."""
    job = await find_job(env, args.requestId, args.jobType)
    payment_id = args.paymentId if isinstance(args, JobQuery) else None
    return await job_body(env, job, await _payer_asks(env, job, call, payment_id))


async def job_result(env: OperationEnv, args: JobResultArgs, call: Call) -> JobStatusBody:
    job = await find_job(env, args.requestId, args.jobType, args.paymentId)
    return await job_body(env, job, await _payer_asks(env, job, call, args.paymentId))


def _failed(result: JobStatusBody) -> bool:
    return result.status == "FAILED"


def _untrusted(result: JobStatusBody) -> bool:
    return result._untrusted


JOB_STATUS: OperationSpec[JobQuery, JobStatusBody] = OperationSpec(
    name="check_job_status",
    title="Check a job",
    description="One status check of an asynchronous job: IN_PROGRESS, COMPLETED (with "
    "result) or FAILED (with the error and its refund; CONTENT_FILTERED_RETRY instead keeps "
    "the payment for a free retry). Free.",
    params=JobQuery,
    tool_params=JobArgs,
    result=JobStatusBody,
    handler=job_status,
    http=HttpRoute(
        "GET",
        "/api/l402/job-status",
        example="GET /api/l402/job-status?requestId=<requestId>&jobType=<jobType>",
        payer_credential=True,
        summary="Status and result of an async job (check_job_status, get_job_result).",
        llms="`GET {url}?requestId=<requestId>&jobType=<jobType>` (the poll_url of a 202)",
    ),
    tool="check_job_status",
    untrusted=_untrusted,
)

JOB_RESULT: OperationSpec[JobResultArgs, JobStatusBody] = OperationSpec(
    name="get_job_result",
    title="Get a job's result",
    description="The result of an asynchronous job; a FAILED job is a tool error carrying "
    "its refund. Free.",
    params=JobResultArgs,
    result=JobStatusBody,
    handler=job_result,
    tool="get_job_result",
    untrusted=_untrusted,
    tool_failure=_failed,
)


async def job_result_body(env: OperationEnv, job: Job, payment_id: str | None) -> JobStatusBody:
    """get_job_result's answer for ``job`` (await_result's too): the refund link shown when
    ``payment_id`` proves an MCP payment."""
    return await job_body(env, job, await _payer_asks(env, job, _MCP_CALL, payment_id))


@dataclass(frozen=True)
class _NoCredential:
    authorization: tuple[str, ...] = ()

    def limit(self, rule: str) -> None:
        return None


_MCP_CALL = _NoCredential()
