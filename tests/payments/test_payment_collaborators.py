"""The gate's collaborators against small hand-written fakes (maps), no server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel

from satsgate.engines import Engines
from satsgate.errors import ApiError, ErrorCode
from satsgate.jobs.lifecycle import FailureRefund, JobWork
from satsgate.lightning.backend import InvoiceState, InvoiceStatus, Settlement
from satsgate.payments import challenger
from satsgate.payments.challenger import Challenger
from satsgate.payments.l402 import RootKeys
from satsgate.payments.settlements import Settlements
from satsgate.payments.spender import Progress, Spender
from satsgate.services.base import (
    FlatPrice,
    JobState,
    Params,
    PrecheckMemo,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.catalog.rates import Rates
from satsgate.store import Job, Payment, PaymentStatus


def _payment(status: PaymentStatus = PaymentStatus.PAID, amount_msat: int = 5000) -> Payment:
    now = int(time.time())
    return Payment(
        "pay_1",
        "ab" * 32,
        "lnbcrt1",
        "fake",
        amount_msat,
        status,
        now,
        now + 600,
        now,
        None,
        "00",
        "11",
        "d",
        "",
        "http",
    )


class FakePayments:
    """A map of payments with the store's conditional transitions."""

    def __init__(self, *payments: Payment) -> None:
        self.rows = {p.payment_id: p for p in payments}

    def _by_hash(self, payment_hash: str) -> Payment | None:
        return next((p for p in self.rows.values() if p.payment_hash == payment_hash), None)

    async def get(self, payment_id: str) -> Payment | None:
        return self.rows.get(payment_id)

    async def get_by_hash(self, payment_hash: str) -> Payment | None:
        return self._by_hash(payment_hash)

    async def spend(self, payment_id: str, now: int) -> bool:
        await asyncio.sleep(0)  # other writers come between two calls, never inside one
        row = self.rows.get(payment_id)
        if row is None or row.status is not PaymentStatus.PAID:
            return False
        self.rows[payment_id] = row._replace(status=PaymentStatus.SERVING, spent_at=now)
        return True

    async def spend_for_job(self, job: Job, now: int) -> bool:
        return await self.spend(job.payment_id, now)

    def answered(self, payment_id: str) -> None:
        row = self.rows[payment_id]
        if row.status is PaymentStatus.SERVING:
            self.rows[payment_id] = row._replace(status=PaymentStatus.SPENT)

    async def serving(self, served_by: str) -> list[Payment]:
        return [p for p in self.rows.values() if p.status is PaymentStatus.SERVING]

    async def adopt(self, payment_id: str, gone: str) -> bool:
        return payment_id in self.rows

    async def unserved_in_doubt(self) -> list[Payment]:
        return []  # these fakes never lose a commit

    def resolved(self, payment: Payment) -> None:
        pass

    async def spend_token(
        self, payment_hash: str, token_id: str, service: str, price_msat: int, now: int
    ) -> Payment | None:
        row = self._by_hash(payment_hash)
        if row is None or row.token_id != token_id or row.amount_msat < price_msat:
            return None
        return self.rows[row.payment_id] if await self.spend(row.payment_id, now) else None

    async def mark_paid(
        self,
        payment_hash: str,
        received_msat: int,
        paid_at: int,
        cursor: tuple[str, int] | None = None,
    ) -> bool:
        row = self._by_hash(payment_hash)
        if row is None or row.status is not PaymentStatus.UNPAID:
            return False
        self.rows[row.payment_id] = row._replace(status=PaymentStatus.PAID, paid_at=paid_at)
        return True


class FakeRefunds:
    def __init__(self, payments: FakePayments) -> None:
        self.payments = payments
        self.issued: list[tuple[str, int, str]] = []

    async def refund_unspent(self, payment: Payment, reason: str) -> dict[str, Any] | None:
        row = self.payments.rows[payment.payment_id]
        if row.status is not PaymentStatus.PAID:  # the same race guard as the store's
            return None
        self.payments.rows[payment.payment_id] = row._replace(status=PaymentStatus.REFUNDED)
        self.issued.append(("unspent", payment.amount_msat, reason))
        return {"amount_sats": payment.amount_msat // 1000}

    async def refund_spent(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None:
        row = self.payments.rows[payment.payment_id]
        if row.status is PaymentStatus.SERVING:  # its refund is its call's outcome
            self.payments.rows[payment.payment_id] = row._replace(status=PaymentStatus.SPENT)
        self.issued.append(("spent", amount_msat, reason))
        return {"amount_sats": amount_msat // 1000}

    async def latest_refund(self, payment_id: str) -> dict[str, Any] | None:
        return None


class NoJobs:
    def prepare(
        self,
        *,
        payment_id: str,
        service: str,
        job_type: str,
        callback: tuple[str, str | None] | None = None,
    ) -> Job:
        raise AssertionError("no job-mode service here")

    def start(self, job: Job, work: JobWork, refund_on_failure: FailureRefund) -> None:
        raise AssertionError("no job-mode service here")

    def accepted_body(self, job: Job) -> dict[str, Any]:
        raise AssertionError

    def accepted_headers(self, job: Job) -> dict[str, str]:
        raise AssertionError

    def state_for(self, payment_id: str) -> JobState:
        raise AssertionError

    def suspended(self, payment_id: str) -> bool:
        return False

    async def fail_unstarted(self, payment_id: str, refund: dict[str, Any] | None) -> bool:
        return False  # no job-mode service here

    async def adopt(self, job: Job, work: JobWork, refund_on_failure: FailureRefund) -> None:
        raise AssertionError

    def resumed(self, payment_id: str) -> bool:
        return False

    async def of_payment(self, payment_id: str) -> Job | None:
        return None  # no job-mode service here

    def poll_url(self, job: Job) -> str:
        raise AssertionError


class NoContexts:
    rates = Rates()  # the fallback rates

    def for_call(
        self,
        call_id: str,
        progress: Progress | None = None,
        job_state: JobState | None = None,
        *,
        service: str | None = None,
    ) -> ServiceContext:
        return None  # type: ignore[return-value]  # the handlers here never read it


class SettledAlready:
    async def refresh_paid(self, payment: Payment) -> Payment:
        return payment


class NoParams(Params):
    pass


def _spec(handler: Any, price_msat: int = 5000) -> ServiceSpec[Any]:
    return ServiceSpec(
        slug="fake",
        tool_name="fake",
        category="utility",
        title="Fake",
        description="fake",
        params=NoParams,
        price_msat=FlatPrice(price_msat),
        handler=handler,
    )


def _spender(payments: FakePayments, refunds: FakeRefunds) -> Spender:
    return Spender(
        payments=payments,
        refunds=refunds,
        settlements=SettledAlready(),
        jobs=NoJobs(),
        contexts=NoContexts(),
        dedup_window_s=30,
    )


async def _ok(ctx: ServiceContext, params: BaseModel) -> ServiceResult:
    await asyncio.sleep(0)
    return ServiceResult({"ok": True})


async def test_concurrent_uses_of_one_payment_serve_once() -> None:
    payments = FakePayments(_payment())
    spender = _spender(payments, FakeRefunds(payments))
    spec, payment = _spec(_ok), payments.rows["pay_1"]
    outcomes = await asyncio.gather(
        *(spender.execute(payment, spec, NoParams()) for _ in range(5)), return_exceptions=True
    )
    served = [o for o in outcomes if isinstance(o, ServiceResult)]
    refused = [o for o in outcomes if isinstance(o, ApiError)]
    assert len(served) == 1 and len(refused) == 4
    assert {e.code for e in refused} == {"PAYMENT_ALREADY_USED"}


async def test_a_refund_that_wins_the_race_leaves_nothing_to_spend() -> None:
    payments = FakePayments(_payment())
    refunds = FakeRefunds(payments)
    payment = payments.rows["pay_1"]
    assert await refunds.refund_unspent(payment, "asked") is not None
    with pytest.raises(ApiError) as refused:
        await _spender(payments, refunds).execute(payment, _spec(_ok), NoParams())
    assert refused.value.code == "PAYMENT_ALREADY_USED"


async def test_underpaid_is_refunded_in_full_and_a_failure_after_the_spend_too() -> None:
    payments = FakePayments(_payment(amount_msat=5000))
    refunds = FakeRefunds(payments)
    with pytest.raises(ApiError) as short:
        await _spender(payments, refunds).execute(
            payments.rows["pay_1"], _spec(_ok, price_msat=9000), NoParams()
        )
    assert short.value.code == "PAYMENT_INSUFFICIENT" and short.value.refund is not None
    assert refunds.issued == [("unspent", 5000, "request prices at 9 sat, 5 sat were paid")]

    async def broken(ctx: ServiceContext, params: BaseModel) -> ServiceResult:
        raise RuntimeError("down")

    payments = FakePayments(_payment(amount_msat=5000))
    refunds = FakeRefunds(payments)
    with pytest.raises(ApiError) as failed:
        await _spender(payments, refunds).execute(payments.rows["pay_1"], _spec(broken), NoParams())
    assert failed.value.code == "L402_UPSTREAM_FAILED"
    assert payments.rows["pay_1"].status is PaymentStatus.SPENT
    assert [(kind, amount) for kind, amount, _ in refunds.issued] == [("spent", 5000)]


class FakeNode:
    name = "fake"

    def __init__(self, settled: list[Settlement]) -> None:
        self.settled = settled

    async def settlements(self, after: int) -> AsyncIterator[Settlement]:
        for s in self.settled:
            if s.cursor > after:
                yield s
        await asyncio.Event().wait()  # live: nothing more

    async def lookup_invoice(self, payment_hash: str) -> InvoiceStatus:
        return InvoiceStatus(payment_hash, InvoiceState.OPEN, 0)


class FakeNodeWithHistory(FakeNode):
    async def initial_cursor(self) -> int:
        return 41


class FakeCursors:
    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    async def get(self, name: str) -> int | None:
        return self.values.get(name)

    async def advance(self, name: str, value: int) -> None:
        self.values[name] = max(value, self.values.get(name, value))


async def test_the_first_cursor_is_the_nodes_when_it_has_history_else_zero() -> None:
    for node, first in ((FakeNode([]), 0), (FakeNodeWithHistory([]), 41)):
        cursors = FakeCursors()
        settlements = Settlements(node=node, payments=FakePayments(), cursors=cursors)
        assert await settlements.init_cursor() == first
        assert cursors.values == {"settle:fake": first}
        cursors.values["settle:fake"] = 50  # persisted: a restart resumes from it
        assert await settlements.init_cursor() == 50


async def test_a_settlement_wakes_its_waiter() -> None:
    unpaid = _payment(PaymentStatus.UNPAID)
    payments = FakePayments(unpaid)
    node = FakeNode([Settlement(unpaid.payment_hash, 5000, "00" * 32, 1, 3)])
    settlements = Settlements(node=node, payments=payments, cursors=FakeCursors())
    waiting = asyncio.create_task(settlements.wait_paid(unpaid, 5.0))
    await asyncio.sleep(0)
    watch = asyncio.create_task(settlements.watch())
    paid = await asyncio.wait_for(waiting, 5.0)
    watch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watch
    assert paid.status is PaymentStatus.PAID


class NoInvoices:
    """A node and a payment store the checks before payment never reach."""

    async def create_invoice(self, amount_msat: int, description: str, expiry_s: int) -> Any:
        raise AssertionError

    async def insert(self, payment: Payment) -> None:
        raise AssertionError


def _challenger() -> Challenger:
    return Challenger(
        node=NoInvoices(),
        payments=NoInvoices(),
        engines=Engines({}, {}),
        root_keys=RootKeys("secret"),
        server_secret="secret",
        network="regtest",
        public_base_url="http://127.0.0.1:1",
        invoice_expiry_s=600,
        credential_ttl_s=600,
    )


async def test_a_check_before_payment_past_its_budget_is_refused_before_any_invoice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(challenger, "PREVALIDATE_BUDGET_S", 0.2)
    seen: list[str] = []

    async def slow(params: BaseModel, memo: PrecheckMemo) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def quick(params: BaseModel, memo: PrecheckMemo) -> None:
        seen.append("checked")

    gate = _challenger()
    with pytest.raises(ApiError) as refused:
        await gate.prevalidate(replace(_spec(_ok), prevalidate=slow), NoParams())
    assert refused.value.code == ErrorCode.L402_INVALID_PARAMS
    assert "took longer than 0.2 s to check" in refused.value.message
    assert seen == ["cancelled"]  # the check was stopped, not left running
    await gate.prevalidate(replace(_spec(_ok), prevalidate=quick), NoParams())
    assert seen == ["cancelled", "checked"]
