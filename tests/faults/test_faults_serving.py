"""The serving state in process: what a spend writes, what the answer, a refund and a
job's end move it to, what the start-up sweep refunds, and what the ledger counts."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import httpx

from satsgate.services.base import ServiceContext, ServiceResult
from satsgate.store import Job, JobStatus, PaymentStatus
from tests.conftest import ThreadedServer, until
from tests.payouts.test_refunds import NoParams, make_spec, paid_payment


async def _ok(ctx: ServiceContext, params: NoParams) -> ServiceResult:
    await asyncio.sleep(0)
    return ServiceResult({"ok": True})


def balanced(server: ThreadedServer) -> dict[str, int]:
    ledger: dict[str, int] = server.call(lambda: server.store.ledger.totals())
    assert ledger["received_msat"] == (
        ledger["earned_msat"] + ledger["refunded_msat"] + ledger["held_msat"] + ledger["open_msat"]
    ), ledger
    return ledger


async def test_an_answered_call_ends_spent(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_ok)
    payment = await paid_payment(server, client, spec, 10)
    result = server.call(lambda: server.gate.execute(payment, spec, NoParams()))
    assert result.body == {"ok": True}

    # The answer's mark is written without a wait: on PostgreSQL it commits on a lane of
    # its own, so a read on another may see the call serving for a moment.
    def status() -> PaymentStatus | None:
        row = server.call(lambda: server.store.payments.get(payment.payment_id))
        return None if row is None else row.status

    await until(lambda: status() is not PaymentStatus.SERVING)
    assert status() is PaymentStatus.SPENT
    ledger = balanced(server)
    assert ledger["held_msat"] == 0 and ledger["earned_msat"] >= 10_000


async def test_a_call_left_serving_is_held_then_refunded_at_start_up(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = make_spec(_ok)
    payment = await paid_payment(server, client, spec, 10)
    server.call(lambda: server.gate.refresh_paid(payment))
    before = balanced(server)
    # What a crash leaves: spent on its call, neither answered nor refunded.
    assert server.call(lambda: server.store.payments.spend(payment.payment_id, int(time.time())))
    held = balanced(server)
    assert held["held_msat"] == before["held_msat"] + 10_000
    assert held["earned_msat"] == before["earned_msat"]  # not earned until answered
    assert server.call(lambda: server.gate.refund_unanswered(server.store.instance_id)) == 1
    row = server.call(lambda: server.store.payments.get(payment.payment_id))
    assert row is not None and row.status is PaymentStatus.SPENT
    refunds = server.call(lambda: server.store.refunds.for_payment(payment.payment_id))
    assert [r.amount_msat for r in refunds] == [10_000]
    after = balanced(server)
    assert after["held_msat"] == before["held_msat"]
    assert after["refunded_msat"] == before["refunded_msat"] + 10_000
    assert server.call(lambda: server.gate.refund_unanswered(server.store.instance_id)) == 0  # once


async def test_a_job_is_spent_with_its_row_or_not_at_all(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    spec = replace(make_spec(_ok), mode="job", job_type="video")
    payment = await paid_payment(server, client, spec, 10)
    server.call(lambda: server.gate.refresh_paid(payment))
    now = int(time.time())

    def job(job_id: str) -> Job:
        return Job(
            job_id,
            payment.payment_id,
            spec.slug,
            "video",
            JobStatus.IN_PROGRESS,
            None,
            None,
            now,
            now,
        )

    assert server.call(lambda: server.store.payments.spend_for_job(job("job_a"), now))
    # A second spend of the same payment writes no second job.
    assert not server.call(lambda: server.store.payments.spend_for_job(job("job_b"), now))
    assert server.call(lambda: server.store.jobs.get("job_b")) is None
    row = server.call(lambda: server.store.payments.get(payment.payment_id))
    assert row is not None and row.status is PaymentStatus.SERVING
    # Its result recorded: the job completes and the payment is spent, together.
    assert server.call(
        lambda: server.store.jobs.finish("job_a", JobStatus.COMPLETED, {"ok": 1}, None, now)
    )
    row = server.call(lambda: server.store.payments.get(payment.payment_id))
    assert row is not None and row.status is PaymentStatus.SPENT
    balanced(server)
