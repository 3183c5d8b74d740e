"""Free tools: model catalog, job status and results, await_result, planned services,
confirm_ai_call (the AI-call confirmation, shared with HTTP in services.ai_calls), and
voice_bridge_say, poll_voice_bridge and end_voice_bridge (a voice-bridge session's
follow-ups, shared with HTTP in services.voice_bridge).

``await_result`` waits and streams ``notifications/progress`` only when the
response can be an SSE stream and the request carries ``_meta.progressToken``;
otherwise it answers one status check, as the spec says.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from satsgate.errors import ApiError
from satsgate.jobs import JOB_TYPES, status_body
from satsgate.mcp import results
from satsgate.mcp.context import CallContext, ToolEnv
from satsgate.payments.proof import proves, without_refund_secrets
from satsgate.services import ai_calls, voice_bridge
from satsgate.services.catalog import CATEGORIES, MODELS_BY_ID, list_models_document
from satsgate.services.comms import AiCallAnswers, AiCallId
from satsgate.services.voice_bridge import (
    VoiceBridgeEndParams,
    VoiceBridgePollParams,
    VoiceBridgeSayParams,
)
from satsgate.store import Job, JobStatus

# The spec: await_result waits about 4 minutes per call.
AWAIT_TIMEOUT_S = 240.0
# While waiting: look at the job at least this often, and keep the stream alive.
_POLL_S = 1.0
_KEEPALIVE_S = 15.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListModelsArgs(_Strict):
    model_config = ConfigDict(title="list_models arguments")

    category: str | None = Field(
        None, description=f"Only this category: one of {', '.join(CATEGORIES)}."
    )


class ModelPricingArgs(_Strict):
    model_config = ConfigDict(title="get_model_pricing arguments")

    modelId: int | str = Field(description="A numeric model id, e.g. 53.")


class JobArgs(_Strict):
    model_config = ConfigDict(title="job arguments")

    requestId: str = Field(
        min_length=1, max_length=200, description="The requestId / jobId of the submission."
    )
    jobType: str = Field(
        description="The job type from the submission.", json_schema_extra={"enum": [*JOB_TYPES]}
    )

    @field_validator("jobType")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in JOB_TYPES:
            raise ValueError(f"must be one of {', '.join(JOB_TYPES)}")
        return value


class JobResultArgs(JobArgs):
    model_config = ConfigDict(title="job result arguments")

    paymentId: str | None = Field(
        None, max_length=200, description="Optional: the payment that bought the job."
    )


class NoArgs(_Strict):
    model_config = ConfigDict(title="no arguments")


class ConfirmAiCallArgs(_Strict):
    model_config = ConfigDict(title="confirm_ai_call arguments")

    sessionId: AiCallId = Field(description="The session_id of the pending_confirm answer.")
    answers: AiCallAnswers | None = Field(
        None, description="Answers to the clarification questions, by question (at most 50)."
    )


# -- models ---------------------------------------------------------------------------------


async def list_models(env: ToolEnv, args: ListModelsArgs, ctx: CallContext) -> dict[str, Any]:
    if args.category is not None and args.category not in CATEGORIES:
        raise ApiError(
            "L402_INVALID_PARAMS",
            f"Unknown category {args.category!r}.",
            extra={"categories": list(CATEGORIES)},
        )
    return results.success(list_models_document(args.category))


async def get_model_pricing(
    env: ToolEnv, args: ModelPricingArgs, ctx: CallContext
) -> dict[str, Any]:
    raw = args.modelId
    if isinstance(raw, str) and not raw.strip().isdigit():
        raise ApiError(
            "L402_INVALID_PARAMS",
            f"modelId must be a numeric model id, not {raw!r}; see list_models.",
        )
    model = MODELS_BY_ID.get(int(raw))
    if model is None:
        raise ApiError("NOT_FOUND", f"No model {raw}; see list_models for the ids.")
    body: dict[str, Any] = {
        "id": model.id,
        "name": model.name,
        "type": model.type,
        "sats": model.price_sats,
        "isDefault": model.is_default,
        "category": model.category,
        "tier": model.tier,
        "pricing": model.pricing,
    }
    if model.price_note:
        body["priceNote"] = model.price_note
    return results.success(body)


# -- jobs -----------------------------------------------------------------------------------


async def _find_job(env: ToolEnv, args: JobArgs, payment_id: str | None = None) -> Job:
    job = await env.jobs.get(args.requestId)
    if (
        job is None
        or job.job_type != args.jobType
        or (payment_id is not None and job.payment_id != payment_id)
    ):
        raise ApiError("NOT_FOUND", f"No {args.jobType} job {args.requestId!r}.")
    return job


def _status(env: ToolEnv, job: Job, refund_shown: bool = False) -> dict[str, Any]:
    """The poll answer; a failed job's refund link only for its payer (``refund_shown``)."""
    body = status_body(job, env.jobs.progress(job.job_id))
    return body if refund_shown else without_refund_secrets(body)


async def _payer_asks(env: ToolEnv, job: Job, payment_id: str | None) -> bool:
    """The caller proved the job's payment: the paymentId of an MCP payment (see
    satsgate.payments.proof; an HTTP payment's payer polls with its credential)."""
    if payment_id is None or job.status is not JobStatus.FAILED:
        return False
    payment = await env.gate.get_payment(job.payment_id)
    return payment is not None and proves(payment, payment_id=payment_id)


def _untrusted(env: ToolEnv, job: Job) -> bool:
    """The spec says so, or the gate marked the stored result (the spec may be gone)."""
    if job.status is not JobStatus.COMPLETED:
        return False
    spec = env.by_slug.get(job.service)
    marked = isinstance(job.result, dict) and job.result.get("untrusted_output") is True
    return marked or (spec is not None and spec.untrusted_output)


async def _outcome(
    env: ToolEnv, job: Job, payment_id: str | None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A job's answer: a FAILED job is a tool failure carrying its envelope and refund
    (the refund link for its payer only)."""
    body = {**_status(env, job, await _payer_asks(env, job, payment_id)), **(extra or {})}
    if job.status is JobStatus.FAILED:
        return results.failure_envelope(body)
    return results.success(body, untrusted=_untrusted(env, job))


async def check_job_status(env: ToolEnv, args: JobArgs, ctx: CallContext) -> dict[str, Any]:
    """One status check; FAILED is a status here, not a tool failure."""
    job = await _find_job(env, args)
    return results.success(_status(env, job), untrusted=_untrusted(env, job))


async def get_job_result(env: ToolEnv, args: JobResultArgs, ctx: CallContext) -> dict[str, Any]:
    return await _outcome(env, await _find_job(env, args, args.paymentId), args.paymentId)


async def await_result(env: ToolEnv, args: JobResultArgs, ctx: CallContext) -> dict[str, Any]:
    job = await _find_job(env, args, args.paymentId)
    if not ctx.can_stream or job.status is not JobStatus.IN_PROGRESS:
        return await _outcome(env, job, args.paymentId)
    jobs = env.jobs
    loop = asyncio.get_running_loop()
    deadline = loop.time() + AWAIT_TIMEOUT_S
    last_sent = -1.0
    last_write = loop.time()
    while True:
        fresh = await jobs.get(job.job_id)
        if fresh is None:  # pragma: no cover - jobs are never deleted while polled
            raise ApiError("NOT_FOUND", f"No {args.jobType} job {args.requestId!r}.")
        job = fresh
        progress = jobs.progress(job.job_id)
        total = progress.total if progress is not None else None
        if job.status is not JobStatus.IN_PROGRESS:
            if total is not None and last_sent < total:
                await ctx.progress(
                    total, total, "done" if job.status is JobStatus.COMPLETED else "failed"
                )
            return await _outcome(env, job, args.paymentId)
        value = progress.progress if progress is not None else 0.0
        # Progress must increase with every notification: send only when it moved.
        if value > last_sent:
            await ctx.progress(value, total, progress.message if progress is not None else "")
            last_sent, last_write = value, loop.time()
        now = loop.time()
        if now >= deadline or env.closing.is_set():
            return await _outcome(
                env,
                job,
                args.paymentId,
                {
                    "timedOut": True,
                    "message": "Still running; call await_result again.",
                },
            )
        if now - last_write >= _KEEPALIVE_S and ctx.keepalive is not None:
            await ctx.keepalive()
            last_write = now
        await jobs.wait_change(job.job_id, min(_POLL_S, deadline - now))


# -- planned services -----------------------------------------------------------------------


async def list_planned_services(env: ToolEnv, args: NoArgs, ctx: CallContext) -> dict[str, Any]:
    services = [dict(s) for s in await env.planned.planned_services()]
    services.sort(key=lambda s: -int(s.get("votes") or 0))
    return results.success({"services": services})


# -- AI calls -------------------------------------------------------------------------------


async def confirm_ai_call(
    env: ToolEnv, args: ConfirmAiCallArgs, ctx: CallContext
) -> dict[str, Any]:
    settings = env.settings
    record = await ai_calls.confirm(
        settings, env.engines, ai_calls.records_for(settings), args.sessionId, args.answers
    )
    return results.success(record)


# -- voice bridge ---------------------------------------------------------------------------
# The arguments are the HTTP params models themselves: one schema, both spellings.


async def voice_bridge_say(
    env: ToolEnv, args: VoiceBridgeSayParams, ctx: CallContext
) -> dict[str, Any]:
    settings = env.settings
    return results.success(
        await voice_bridge.say(
            settings, env.engines, voice_bridge.sessions_for(settings), args
        )
    )


async def poll_voice_bridge(
    env: ToolEnv, args: VoiceBridgePollParams, ctx: CallContext
) -> dict[str, Any]:
    settings = env.settings
    return results.success(
        await voice_bridge.poll(
            settings, env.engines, voice_bridge.sessions_for(settings), args
        )
    )


async def end_voice_bridge(
    env: ToolEnv, args: VoiceBridgeEndParams, ctx: CallContext
) -> dict[str, Any]:
    settings = env.settings
    return results.success(
        await voice_bridge.end(
            settings, env.engines, voice_bridge.sessions_for(settings), args
        )
    )
