"""Asynchronous jobs: 202 at once, polling, failure with a refund, restart recovery."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import httpx

from satsgate.engines import EngineError
from satsgate.errors import ErrorCode
from satsgate.server.app import JOBS
from satsgate.services.base import ServiceContext, ServiceResult
from satsgate.store import Job, JobStatus
from tests.conftest import ThreadedServer, dev_pay
from tests.payouts.test_refunds import NoParams, make_spec, paid_payment

RELEASE = asyncio.Event()


async def _slow_ok(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    ctx.progress(40.0, "rendering")
    await asyncio.sleep(0.3)
    ctx.progress(90.0, "encoding")
    return ServiceResult({"videoUrl": f"https://example.invalid/{params.size}.mp4"})


async def _slow_fail(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    await asyncio.sleep(0.1)
    # (A content refusal would keep the payment for a free retry: tests/jobs/test_job_rework.py.)
    raise EngineError(ErrorCode.SERVICE_ERROR, "the provider failed")


def job_spec(handler: Any) -> Any:
    return replace(make_spec(handler), mode="job", job_type="video")


async def poll(client: httpx.AsyncClient, url: str, until: str) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for _ in range(100):
        resp = await client.get(url)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        if body["status"] == until:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"job never reached {until}: {body}")


async def test_job_answers_202_then_completes(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = job_spec(_slow_ok)
    payment = await paid_payment(server, client, spec, 10)
    accepted = server.call(lambda: server.gate.execute(payment, spec, NoParams(size=1)))
    assert accepted.status == 202
    body = accepted.body
    assert body["status"] == "processing"
    assert body["job_id"] == body["jobId"] == body["requestId"]
    assert body["poll_interval_ms"] == 5000
    assert accepted.headers["X-Job-Id"] == body["job_id"]
    assert accepted.headers["X-Poll-Url"] == body["poll_url"]
    first = (await client.get(body["poll_url"])).json()
    assert first["status"] == "IN_PROGRESS"
    done = await poll(client, body["poll_url"], "COMPLETED")
    assert done["result"] == {"videoUrl": "https://example.invalid/1.mp4"}
    # Wrong job type, unknown id, bad type: clear errors, never a 500.
    wrong = await client.get(
        "/api/l402/job-status", params={"requestId": body["job_id"], "jobType": "image-3d"}
    )
    assert wrong.status_code == 404 and wrong.json()["error_code"] == "NOT_FOUND"
    assert (
        await client.get("/api/l402/job-status", params={"requestId": "job_nope"})
    ).status_code == 404
    bad = await client.get("/api/l402/job-status", params={"requestId": "x", "jobType": "nope"})
    assert bad.status_code == 400 and bad.json()["error_code"] == "L402_INVALID_PARAMS"


async def test_failed_job_carries_a_refund(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = job_spec(_slow_fail)
    challenge = server.call(
        lambda: server.gate.create_payment(spec, amount_sats=10, digest="d", via="mcp")
    )
    await dev_pay(client, challenge.payment.bolt11)
    payment = challenge.payment
    accepted = server.call(lambda: server.gate.execute(payment, spec, NoParams()))
    # The payer (the paymentId of an MCP payment) is shown the refund link.
    failed = await poll(
        client, accepted.body["poll_url"] + f"&paymentId={payment.payment_id}", "FAILED"
    )
    assert failed["error_code"] == "SERVICE_ERROR"
    assert failed["refund"]["amount_sats"] == 10
    assert failed["refund"]["lnurl_withdraw"].startswith("LNURL1")
    resp = await client.get(accepted.body["poll_url"])
    assert resp.headers["X-Error-Code"] == "SERVICE_ERROR"


async def test_jobs_lost_in_a_restart_are_failed_and_refunded(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = job_spec(_slow_ok)
    payment = await paid_payment(server, client, spec, 10)
    server.call(lambda: server.gate.refresh_paid(payment))  # settled at the node: paid
    assert server.call(lambda: server.store.payments.spend(payment.payment_id, int(time.time())))
    now = int(time.time())
    orphan = Job(
        "job_orphan_test",
        payment.payment_id,
        spec.slug,
        "video",
        JobStatus.IN_PROGRESS,
        None,
        None,
        now,
        now,
    )
    server.call(lambda: server.store.jobs.insert(orphan))  # as a crashed process left it
    jobs = server.app[JOBS]
    assert (
        server.call(
            lambda: jobs.fail_orphans(server.gate.refund_orphaned_job, server.store.instance_id)
        )
        >= 1
    )
    body = (
        await client.get("/api/l402/job-status", params={"requestId": "job_orphan_test"})
    ).json()
    assert body["status"] == "FAILED"
    assert body["error_code"] == "L402_UPSTREAM_FAILED"
    assert body["refund"]["amount_sats"] == 10
