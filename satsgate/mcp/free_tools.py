"""The MCP-only free tools: the model catalog and await_result.

The other free tools are the free operations (satsgate.operations): their arguments,
handlers and results are declared there once, for HTTP, MCP and the documents alike.

``await_result`` waits and streams ``notifications/progress`` only when the
response can be an SSE stream and the request carries ``_meta.progressToken``;
otherwise it answers one status check, as the spec says.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from satsgate.errors import ApiError, ErrorCode
from satsgate.jobs.lifecycle import PROGRESS_TOTAL, Progress
from satsgate.mcp import results
from satsgate.mcp.context import CallContext, ToolEnv
from satsgate.operations import dump
from satsgate.operations.jobs import JobResultArgs, find_job, job_result_body
from satsgate.services.catalog.models import (
    CATEGORIES,
    MODELS_BY_ID,
    defaults_here,
    list_models_document,
    model_entry,
    model_prices,
    unavailable_models,
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


# -- models ---------------------------------------------------------------------------------


async def list_models(env: ToolEnv, args: ListModelsArgs, ctx: CallContext) -> dict[str, Any]:
    if args.category is not None and args.category not in CATEGORIES:
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"Unknown category {args.category!r}.",
            extra={"categories": list(CATEGORIES)},
        )
    return results.success(
        list_models_document(env.by_slug.values(), env.rates.book, env.engines, args.category)
    )


async def get_model_pricing(
    env: ToolEnv, args: ModelPricingArgs, ctx: CallContext
) -> dict[str, Any]:
    raw = args.modelId
    if isinstance(raw, str) and not raw.strip().isdigit():
        raise ApiError(
            ErrorCode.L402_INVALID_PARAMS,
            f"modelId must be a numeric model id, not {raw!r}; see list_models.",
        )
    model = MODELS_BY_ID.get(int(raw))
    if model is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"No model {raw}; see list_models for the ids.")
    price = model_prices(env.by_slug.values(), env.rates.book)[model.id]
    unavailable = unavailable_models(env.by_slug.values(), env.engines)
    defaults = defaults_here(env.by_slug.values(), unavailable)
    body = model_entry(model, price, unavailable.get(model.id), model.id in defaults)
    body["type"] = model.type
    return results.success(body)


# -- await_result ---------------------------------------------------------------------------


async def _outcome(
    env: ToolEnv, job: Job, payment_id: str | None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A job's answer: a FAILED job is a tool failure carrying its envelope and refund
    (the refund link for its payer only)."""
    status = await job_result_body(env, job, payment_id)
    body = {**dump(status), **(extra or {})}
    if job.status is JobStatus.FAILED:
        return results.failure_envelope(body)
    return results.success(body, untrusted=status._untrusted)


async def await_result(env: ToolEnv, args: JobResultArgs, ctx: CallContext) -> dict[str, Any]:
    job = await find_job(env, args.requestId, args.jobType, args.paymentId)
    if not ctx.can_stream or job.status is not JobStatus.IN_PROGRESS:
        return await _outcome(env, job, args.paymentId)
    jobs = env.jobs
    loop = asyncio.get_running_loop()
    deadline = loop.time() + AWAIT_TIMEOUT_S
    last_sent = -1.0
    last_write = loop.time()
    with jobs.following(job.job_id):
        while True:
            fresh = await jobs.get(job.job_id)
            if fresh is None:  # pragma: no cover - jobs are never deleted while polled
                raise ApiError(ErrorCode.NOT_FOUND, f"No {args.jobType} job {args.requestId!r}.")
            job = fresh
            if job.status is not JobStatus.IN_PROGRESS:
                if last_sent < PROGRESS_TOTAL:  # the end is the whole, for every job
                    done = "done" if job.status is JobStatus.COMPLETED else "failed"
                    await ctx.progress(PROGRESS_TOTAL, PROGRESS_TOTAL, done)
                return await _outcome(env, job, args.paymentId)
            progress = jobs.progress(job.job_id) or Progress()
            # Progress must increase with every notification: send only when it moved.
            if progress.progress > last_sent:
                await ctx.progress(progress.progress, progress.total, progress.message)
                last_sent, last_write = progress.progress, loop.time()
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
