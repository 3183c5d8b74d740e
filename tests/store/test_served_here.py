"""A spent payment's call taken up again by another instance (a free retry, a held
request's release, an AI call's confirmation) is served by the instance that won the
claim, from the claim's own transaction on: only that instance's death interrupts it.
Before, the payment kept naming the instance that spent it, so that instance's death
refunded a call another instance was running, and the other's death left it to nobody."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from satsgate.store import Job, JobStatus, Payment, PaymentStatus, Store
from satsgate.store.ai_calls import AiCallRow
from satsgate.store.held_requests import HeldRequest


@pytest.fixture
async def instances(tmp_path: Path, store_url: str) -> AsyncIterator[tuple[Store, Store]]:
    a = Store(tmp_path / "satsgate.db", store_url, instance_id="inst_a")
    b = Store(tmp_path / "satsgate.db", store_url, instance_id="inst_b")
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await b.close()
        await a.close()


async def spent_at(store: Store, service: str) -> Payment:
    """A payment ``store``'s instance has spent on a call of ``service``."""
    now = int(time.time())
    payment = Payment(
        f"pay_{secrets.token_hex(16)}", secrets.token_hex(32), "", service, 21_000,
        PaymentStatus.PAID, now, now, now, None, "", "", "d", "x", "http", "lightning",
    )  # fmt: skip
    await store.payments.insert(payment)
    assert await store.payments.spend(payment.payment_id, now)
    return payment


async def serving_at(store: Store) -> set[str]:
    return {p.payment_id for p in await store.payments.serving(store.instance_id)}


async def served_by(payment: Payment, store: Store, not_by: Store) -> bool:
    """``store``'s instance serves the payment's call, and ``not_by``'s does not."""
    return payment.payment_id in await serving_at(store) and (
        payment.payment_id not in await serving_at(not_by)
    )


async def test_a_free_retry_claimed_at_another_instance_is_served_there(
    instances: tuple[Store, Store],
) -> None:
    a, b = instances
    payment = await spent_at(a, "generate-image")
    now = int(time.time())
    assert await a.rework.open_first(payment.payment_id, "generate-image", "t1", now + 600, now)
    assert await served_by(payment, a, not_by=b)
    assert await b.rework.claim(payment.payment_id, "t1", now)
    assert await served_by(payment, b, not_by=a)


async def test_a_held_request_released_at_another_instance_is_served_there(
    instances: tuple[Store, Store],
) -> None:
    a, b = instances
    payment = await spent_at(a, "send-sms")
    now = int(time.time())
    job = Job(f"job_{secrets.token_hex(8)}", payment.payment_id, "send-sms", "held",
              JobStatus.IN_PROGRESS, None, None, now, now)  # fmt: skip
    hold = HeldRequest(
        f"hold_{secrets.token_hex(8)}", payment.payment_id, job.job_id, "send-sms", "sms",
        ("screen",), payment.amount_msat, "held", {"to": "+15550100"}, None, None, None,
        None, now, now, None, None, None, now,
    )  # fmt: skip
    await a.held_requests.insert(hold, job)
    assert await b.held_requests.claim(hold.hold_id, "releasing", now)
    assert await served_by(payment, b, not_by=a)
    # A second claim (the operator's other tab, the 24-hour expiry) wins nothing.
    assert not await a.held_requests.claim(hold.hold_id, "refunding", now)
    assert await served_by(payment, b, not_by=a)


async def test_an_ai_call_confirmed_at_another_instance_is_placed_and_watched_there(
    instances: tuple[Store, Store],
) -> None:
    a, b = instances
    payment = await spent_at(a, "ai-call")
    now = int(time.time())
    row = AiCallRow(
        call_id=f"ac_{secrets.token_hex(12)}", payment_id=payment.payment_id,
        status="pending_confirm", deposit_msat=21_000, minutes=1, per_minute_msat=21_000,
        created_at=now, updated_at=now, session_id=f"acs_{secrets.token_hex(16)}",
        request={"phone_number": "+15550100"}, questions=["When?"], next_at=now + 600,
    )  # fmt: skip
    await a.ai_calls.create(row)
    active = ("placing", "calling", "redial_scheduled")
    assert row.session_id is not None
    confirmed = await b.ai_calls.confirm(row.session_id, {"When?": "8pm"}, "placing", now)
    assert confirmed is not None and confirmed.status == "placing"
    assert await served_by(payment, b, not_by=a)
    assert [r.call_id for r in await b.ai_calls.in_status(active, "inst_b")] == [row.call_id]
    assert await a.ai_calls.in_status(active, "inst_a") == []  # A never watches it
    assert await a.ai_calls.confirm(row.session_id, {}, "placing", now) is None  # once
