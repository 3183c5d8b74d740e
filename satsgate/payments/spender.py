"""The spender: spend a payment once, run its call, refund what was not earned.

The spend rule: after every check of the credential (see the verifier), the call
is re-priced; a payment that covers less is refunded in full and refused. Then
one conditional UPDATE (``... SET status = 'serving' WHERE ... AND status =
'paid'``), checked by its rowcount, decides who is served; the handler runs only
after it. After the spend every failure carries a refund of the whole payment, and
a call that delivered less than was paid is refunded the difference.

``serving`` (spent, unanswered) becomes ``spent`` once the call's outcome is
recorded: its refund (in the refund's transaction), a job's result (with the job's
end), or a synchronous answer (a statement joining the group commit after the
response, never waited for). A job's row is written in the transaction of its
spend. At start-up :meth:`Spender.refund_unanswered` refunds in full every call a
crash left ``serving`` (a synchronous result is not stored, so there is nothing to
fetch; a finished job's result is, and its payment is already ``spent``).

A payment created through an HTTP challenge (``via = 'http'``) is spent only with
its credential (the proof of payment); its paymentId alone, which anyone who saw
its checkout link or a log may know, spends nothing. A payment created through
MCP ``create_payment`` is spent with its paymentId, the MCP caller's handle.

The same request with the same payment within the dedup window gets the first
outcome again, with no second spend.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from pydantic import BaseModel

from satsgate.engines import EngineError
from satsgate.errors import ApiError, ErrorCode
from satsgate.jobs.lifecycle import FailureRefund, JobWork
from satsgate.payments import l402
from satsgate.payments.dedup import DedupCache
from satsgate.payments.rework import ReworkDesk
from satsgate.payments.spent_refunds import EcashRefunds, PaidStream, Refunder, SpentRefunds
from satsgate.payments.verifier import Verified
from satsgate.services.base import (
    JobState,
    Params,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
    request_digest,
)
from satsgate.services.catalog.rates import QUOTE_KEPT_S, Rates
from satsgate.services.comms.screening import HeldForReview
from satsgate.store import Job, Payment, PaymentStatus

log = logging.getLogger(__name__)

AnySpec = ServiceSpec[Any]
Progress = Callable[[float, str], None]


class SpendablePayments(Protocol):
    """The payments repository's spend rule and point reads."""

    async def spend(self, payment_id: str, now: int) -> bool:
        """paid -> serving; True for exactly one caller."""
        ...

    async def spend_token(
        self, payment_hash: str, token_id: str, service: str, price_msat: int, now: int
    ) -> Payment | None:
        """paid -> serving for this token's payment if it covers ``price_msat``; the row."""
        ...

    async def spend_for_job(self, job: Job, now: int) -> bool:
        """paid -> serving and the job's row, in one transaction; True for one caller."""
        ...

    def answered(self, payment_id: str) -> None:
        """serving -> spent once the answer went out (not waited for)."""
        ...

    async def serving(self, served_by: str) -> list[Payment]:
        """Payments instance ``served_by`` spent on calls whose answer or refund is not
        recorded."""
        ...

    async def adopt(self, payment_id: str, gone: str) -> bool:
        """A call the gone instance was serving is served on here; True for one taker."""
        ...

    async def unserved_in_doubt(self) -> list[Payment]:
        """Spends the store's connection cut that did commit: spent, never served."""
        ...

    def resolved(self, payment: Payment) -> None: ...

    async def get(self, payment_id: str) -> Payment | None: ...

    async def get_by_hash(self, payment_hash: str) -> Payment | None: ...


class PaidRefresher(Protocol):
    """Asks the node about an unpaid row before it is refused (the settlements)."""

    async def refresh_paid(self, payment: Payment) -> Payment: ...


class JobQueue(Protocol):
    """Runs a spent job-mode call in the background (the job runner)."""

    def prepare(
        self,
        *,
        payment_id: str,
        service: str,
        job_type: str,
        callback: tuple[str, str | None] | None = None,
    ) -> Job:
        """The job's row, to be written with the spend."""
        ...

    def start(self, job: Job, work: JobWork, refund_on_failure: FailureRefund) -> None:
        """Run a job whose row is written."""
        ...

    def accepted_body(self, job: Job) -> dict[str, Any]: ...

    def accepted_headers(self, job: Job) -> dict[str, str]: ...

    def state_for(self, payment_id: str) -> JobState:
        """The job's resume state (ServiceContext.job_state)."""
        ...

    def suspended(self, payment_id: str) -> bool:
        """Whether shutdown is putting this payment's job aside for the next start."""
        ...

    async def fail_unstarted(self, payment_id: str, refund: dict[str, Any] | None) -> bool:
        """Fail, with its refund, the job of a spend whose answer was cut (never run)."""
        ...

    async def adopt(self, job: Job, work: JobWork, refund_on_failure: FailureRefund) -> None:
        """Run the work of an existing job row (taken up after a restart)."""
        ...

    def resumed(self, payment_id: str) -> bool:
        """Whether this payment's job was taken up again after a restart."""
        ...

    async def of_payment(self, payment_id: str) -> Job | None:
        """The newest job the payment bought, if any."""
        ...

    def poll_url(self, job: Job) -> str: ...


class HoldDecisions(Protocol):
    """Hold invoices (see :mod:`satsgate.payments.holds`): a hold payment is settled
    after its call succeeded and canceled (given back) otherwise."""

    def running(self, payment: Payment) -> None: ...

    def stopped(self, payment: Payment) -> None: ...

    async def settle(self, payment: Payment) -> bool: ...

    async def cancel(self, payment: Payment, reason: str) -> dict[str, Any] | None: ...


class HeldRequests(Protocol):
    """Communications the screen held (satsgate.outreach.held_requests.HeldRequestDesk)."""

    async def hold(
        self, payment: Payment, spec: AnySpec, params: BaseModel, held: HeldForReview
    ) -> ApiError:
        """Record the held request; the CONTENT_POLICY_HELD error to answer."""
        ...

    async def held_again(self, payment_id: str) -> ApiError | None:
        """The hold's answer again for a repeat of a held call (None: not held)."""
        ...

    async def open_payment_ids(self) -> set[str]:
        """Payments of open holds: serving on purpose."""
        ...


class HandlerContexts(Protocol):
    """Makes the context a handler runs with; ``rates`` is the app's BTC rate book."""

    @property
    def rates(self) -> Rates: ...

    def for_call(
        self,
        call_id: str,
        progress: Progress | None = None,
        job_state: JobState | None = None,
        *,
        service: str | None = None,
    ) -> ServiceContext: ...


class Spender:
    def __init__(
        self,
        *,
        payments: SpendablePayments,
        refunds: Refunder,
        settlements: PaidRefresher,
        jobs: JobQueue,
        contexts: HandlerContexts,
        dedup_window_s: float,
        holds: HoldDecisions | None = None,
        ecash: EcashRefunds | None = None,
        held: HeldRequests | None = None,
        rework: ReworkDesk | None = None,
    ) -> None:
        self._holds = holds
        # Held communications (CONTENT_POLICY_HELD); None: a flagged call is refunded.
        self._held = held
        # The free-retry window after a content refusal (satsgate.payments.rework); None:
        # a refusal is refunded at once.
        self.rework = rework
        self._payments = payments
        self._refunds = refunds
        self._spent_refunds = SpentRefunds(refunds, holds, ecash)
        self._settlements = settlements
        self._jobs = jobs
        self._contexts = contexts
        self._dedup = DedupCache(dedup_window_s)

    async def execute_deduplicated(
        self,
        payment: Payment,
        spec: AnySpec,
        params: BaseModel,
        *,
        use_cache: bool = True,
        rework_token: str | None = None,
    ) -> tuple[ServiceResult, bool]:
        """The paymentId flow (MCP): :meth:`execute` behind the 30 s dedup cache; returns
        (result, replayed). Only a payment created through MCP ``create_payment`` is spent
        by its paymentId alone; one created through an HTTP challenge needs its
        credential (PAYMENT_INVALID, nothing spent)."""
        if payment.via != "mcp":
            raise ApiError(
                ErrorCode.PAYMENT_INVALID,
                "This payment was created by an HTTP 402 challenge: use it over HTTP with its "
                "credential (Authorization: L402 <macaroon>:<preimage>, or Payment). A "
                "paymentId alone spends only payments made with create_payment.",
            )
        return await self._deduplicated(
            payment.payment_hash,
            spec,
            params,
            lambda: self.execute(payment, spec, params, rework_token=rework_token),
            use_cache,
            rework_token,
        )

    async def execute_credential(
        self,
        verified: Verified,
        spec: AnySpec,
        params: BaseModel,
        *,
        use_cache: bool = True,
        rework_token: str | None = None,
    ) -> tuple[ServiceResult, bool]:
        """The call a verified credential pays for, behind the dedup cache.

        A macaroon verified under its derived root key is spent by one statement that
        also reads its row (paid, this token, this service, enough paid -> spent); only
        when that finds nothing is the row read to say why (or to refresh an unpaid one
        from the node), through :meth:`execute`. Raises CredentialError for a token
        whose row is gone.
        """

        async def run() -> ServiceResult:
            if verified.payment is not None:
                return await self.execute(verified.payment, spec, params, rework_token=rework_token)
            if spec.mode == "job":  # its spend writes the job's row too: see execute
                payment = await self._payments.get_by_hash(verified.payment_hash)
                if payment is None or payment.token_id != verified.token_id:
                    raise l402.CredentialError("unknown or revoked macaroon")
                return await self.execute(payment, spec, params, rework_token=rework_token)
            price_msat = self._quote_msat(spec, params)
            spent = await self._payments.spend_token(
                verified.payment_hash, verified.token_id, spec.slug, price_msat, int(time.time())
            )
            if spent is not None:
                return await self._dispatch(spent, spec, params, price_msat)
            payment = await self._payments.get_by_hash(verified.payment_hash)
            if payment is None or payment.token_id != verified.token_id:
                raise l402.CredentialError("unknown or revoked macaroon")
            return await self.execute(payment, spec, params, rework_token=rework_token)

        return await self._deduplicated(
            verified.payment_hash, spec, params, run, use_cache, rework_token
        )

    async def _deduplicated(
        self,
        payment_hash: str,
        spec: AnySpec,
        params: BaseModel,
        run: Callable[[], Awaitable[ServiceResult]],
        use_cache: bool,
        rework_token: str | None = None,
    ) -> tuple[ServiceResult, bool]:
        """``run()`` behind the 30 s dedup cache; returns (result, replayed).

        The same request with the same payment within the window gets the first
        outcome again (a result, or an error with its refund) with no second spend;
        a repeat that arrives while the first is running waits for it. Keyed by the
        payment hash, so only the payer can ever see a cached outcome.
        """
        key = (payment_hash, request_digest(spec.slug, params))
        token = rework_token
        if token is not None:
            # A free retry is never a repeat of the refused call (the params leave the
            # token out): its own key, with the token's hash. A repeat of the retry itself
            # (its answer lost) gets the retry's outcome again: for a job, the one 202
            # that names the retry's new job.
            key = (payment_hash, f"{key[1]}:{hashlib.sha256(token.encode()).hexdigest()}")
        if use_cache:
            earlier = self._dedup.lookup(key)
            if earlier is not None:
                try:
                    return await asyncio.shield(earlier), True
                except asyncio.CancelledError:
                    if not earlier.cancelled():
                        raise
                    use_cache = False  # the first attempt never ran; the spend rule decides
                except ApiError as exc:
                    exc.headers = {**exc.headers, "X-Dedup": "hit"}
                    raise
            else:
                self._dedup.begin(key)
        try:
            result = await run()
        except ApiError as exc:
            if use_cache:
                # Cache only what followed a spend (it carries a refund); the rest never ran.
                if exc.refund is not None:
                    self._dedup.fail(key, exc)
                else:
                    self._dedup.forget(key)
            raise
        except BaseException:
            if use_cache:
                self._dedup.forget(key)
            raise
        if use_cache:
            self._dedup.finish(key, result)
        return result, False

    async def execute(
        self,
        payment: Payment,
        spec: AnySpec,
        params: BaseModel,
        *,
        rework_token: str | None = None,
    ) -> ServiceResult:
        """Spend ``payment`` on one call of ``spec`` and run it (``rework_token``: the
        free-retry token the call was sent with). Raises ApiError.

        After the spend, every failure carries a refund of the whole payment; a
        call that prices below what was paid is refunded the difference.
        """
        checked = await self._paid_and_unused(payment, spec, params, rework_token)
        if isinstance(checked, ServiceResult):
            return checked  # a free retry, served in its window
        payment = checked
        price_msat = self._price_msat(payment, spec, params)
        hold = self._holds if payment.mode == "hold" else None
        await self._check_covered(payment, price_msat, hold)
        # The spend: whoever changes the row from paid is served; everyone else (a
        # replay, a concurrent refund that won) is told it was used.
        if hold is not None:
            hold.running(payment)  # before the spend: the hold watcher must not decide it
        try:
            if spec.mode == "job":  # the spend and the job's row in one transaction
                accepted = await self._submit_job(payment, spec, params, price_msat)
                if accepted is not None:
                    return accepted
                spent = False
            else:
                spent = await self._payments.spend(payment.payment_id, int(time.time()))
        except BaseException:
            if hold is not None:  # no call runs (the store away): the watcher decides it
                hold.stopped(payment)
            raise
        if spent:
            return await self._dispatch(payment, spec, params, price_msat)
        if hold is not None:
            hold.stopped(payment)
        raise ApiError(ErrorCode.PAYMENT_ALREADY_USED, "Service already used.")

    async def _paid_and_unused(
        self, payment: Payment, spec: AnySpec, params: BaseModel, rework_token: str | None
    ) -> Payment | ServiceResult:
        """The payment, refreshed, if it is paid for ``spec`` and unused; a free retry's
        result when it is one; else the ApiError its state answers (pending, expired,
        used, refunded, canceled)."""
        if payment.service != spec.slug:
            raise ApiError(
                ErrorCode.PAYMENT_INVALID,
                f"This payment is for {payment.service}, not {spec.slug}.",
            )
        payment = await self._settlements.refresh_paid(payment)
        if payment.status is PaymentStatus.UNPAID:
            if payment.expires_at <= time.time():
                raise ApiError(ErrorCode.PAYMENT_EXPIRED, "The invoice expired before it was paid.")
            raise ApiError(
                ErrorCode.PAYMENT_PENDING,
                "The invoice is not paid yet.",
                extra={"paymentId": payment.payment_id},
            )
        if payment.status is PaymentStatus.SERVING:
            if self.rework is not None:  # a free retry in its window, or refused as such
                reworked = await self._rework(payment, spec, params, rework_token)
                if reworked is not None:
                    return reworked
            if self._held is not None:
                again = await self._held.held_again(payment.payment_id)
                if again is not None:
                    raise again
            raise await self._used(payment, spec, "Service already used.")
        if payment.status in (PaymentStatus.SPENT, PaymentStatus.REFUNDED):
            # The caller proved the payment (credential, or the paymentId of an MCP
            # payment): show it its refund, e.g. of a call a restart interrupted.
            refund = await self._refunds.latest_refund(payment.payment_id)
            message = "Service already used."
            if payment.status is PaymentStatus.REFUNDED:
                message = "Service already used: this payment was refunded."
            elif refund is not None:
                message = "Service already used; this payment's refund is attached."
            raise await self._used(payment, spec, message, refund)
        if payment.status is PaymentStatus.CANCELED:
            raise ApiError(
                ErrorCode.PAYMENT_ALREADY_USED,
                "This held payment was canceled and went back to the paying wallet; "
                "nothing was charged. Create a new payment.",
            )

        return payment

    async def _check_covered(
        self, payment: Payment, price_msat: int, hold: HoldDecisions | None
    ) -> None:
        """Raise PAYMENT_INSUFFICIENT, with the whole payment back (a held one canceled, a
        settled one refunded), when the request prices above what was paid."""
        if price_msat > payment.amount_msat and hold is not None:
            canceled = await hold.cancel(payment, "the request prices above what was paid")
            if canceled is None:
                raise ApiError(ErrorCode.PAYMENT_ALREADY_USED, "Service already used.")
            raise ApiError(
                ErrorCode.PAYMENT_INSUFFICIENT,
                f"This request costs {price_msat // 1000} sat but {payment.amount_msat // 1000}"
                " sat were paid for it. The held payment was canceled: nothing was charged.",
                refund=canceled,
                extra={"amountSats": price_msat // 1000},
            )
        if price_msat > payment.amount_msat:
            refund = await self._refunds.refund_unspent(
                payment,
                f"request prices at {price_msat // 1000} sat, "
                f"{payment.amount_msat // 1000} sat were paid",
            )
            if refund is None:  # lost a race with another use: it was served or refunded
                raise ApiError(ErrorCode.PAYMENT_ALREADY_USED, "Service already used.")
            raise ApiError(
                ErrorCode.PAYMENT_INSUFFICIENT,
                f"This request costs {price_msat // 1000} sat but {payment.amount_msat // 1000}"
                " sat were paid for it. The payment was refunded in full.",
                refund=refund,
                extra={"amountSats": price_msat // 1000},
            )

    async def _rework(
        self, payment: Payment, spec: AnySpec, params: BaseModel, token: str | None
    ) -> ServiceResult | None:
        """A call on a serving payment, as a free retry (see ReworkDesk.retry): a
        synchronous one is dispatched; a job-mode one gets a new job, its row written
        with the window's claim and started like a first run's (with the retry's own
        callback)."""
        assert self.rework is not None
        price_msat = self._price_msat(payment, spec, params)
        if spec.mode != "job":
            return await self.rework.retry(
                payment, spec, params, price_msat, self._dispatch, token=token
            )
        job = self._prepare_job(payment, spec, params)

        async def start(
            payment: Payment, spec: AnySpec, params: BaseModel, price_msat: int
        ) -> ServiceResult:
            return self._start_job(job, payment, spec, params, price_msat)

        return await self.rework.retry(payment, spec, params, price_msat, start, job, token=token)

    async def _used(
        self,
        payment: Payment,
        spec: AnySpec,
        message: str,
        refund: dict[str, Any] | None = None,
    ) -> ApiError:
        """PAYMENT_ALREADY_USED for a caller that proved the payment; for a job's payment,
        with the job it bought (its 202 lost, or answered by another instance: the
        repeat finds the job to poll)."""
        job = await self._jobs.of_payment(payment.payment_id) if spec.mode == "job" else None
        if job is None:
            return ApiError(ErrorCode.PAYMENT_ALREADY_USED, message, refund=refund)
        return ApiError(
            ErrorCode.PAYMENT_ALREADY_USED,
            f"{message} This payment bought job {job.job_id}: poll its poll_url.",
            refund=refund,
            extra={
                "requestId": job.job_id,
                "jobType": job.job_type,
                "poll_url": self._jobs.poll_url(job),
            },
        )

    def _quote_msat(self, spec: AnySpec, params: BaseModel) -> int:
        """What the request costs now (whole sats, in msat) at the app's rate book."""
        return spec.quote_sats(params, self._contexts.rates.book) * 1000

    def _price_msat(self, payment: Payment, spec: AnySpec, params: BaseModel) -> int:
        """What ``payment``'s call on this request costs: the price now, but never more
        than the payment's own quote when the request is the one its 402 priced (its
        digest) and the quote is under :data:`QUOTE_KEPT_S` old. Within that time a quote
        holds even where this instance's rate book prices higher: another instance's
        book (each keeps its own), or one started on the fallback rates after a restart."""
        price_msat = self._quote_msat(spec, params)
        if (
            price_msat > payment.amount_msat
            and time.time() - payment.created_at <= QUOTE_KEPT_S
            and payment.request_digest == request_digest(spec.slug, params)
        ):
            return payment.amount_msat
        return price_msat

    async def _dispatch(
        self, payment: Payment, spec: AnySpec, params: BaseModel, price_msat: int
    ) -> ServiceResult:
        """Run a just-spent synchronous call; once it is answered, serving -> spent (a
        failure's refund has moved it already)."""
        result = await self._run_handler(
            payment,
            spec,
            params,
            price_msat,
            self._contexts.for_call(payment.payment_id, service=spec.slug),
        )
        if result.stream is not None:  # answered once the stream ends (PaidStream)
            result.stream.settle = PaidStream(
                self._spent_refunds,
                self._payments.answered,
                payment,
                min(price_msat, payment.amount_msat),
            )
            return result
        self._payments.answered(payment.payment_id)
        return result

    async def _run_handler(
        self,
        payment: Payment,
        spec: AnySpec,
        params: BaseModel,
        price_msat: int,
        ctx: ServiceContext,
    ) -> ServiceResult:
        """Run a spent call's handler: any failure refunds the whole payment."""
        try:
            result = await spec.handler(ctx, params)
        except HeldForReview as held:
            raise await self._hold(payment, spec, params, held) from None
        except ApiError as exc:
            exc.refund = await self._spent_refunds.refund(payment, payment.amount_msat, exc.message)
            raise
        except EngineError as exc:
            if self.rework is not None:  # a content refusal below the cap: not refunded
                window = await self.rework.refused(payment, spec, exc)
                if window is not None:
                    raise window from exc
            refund = await self._spent_refunds.refund(payment, payment.amount_msat, exc.message)
            raise exc.api_error(refund=refund) from exc
        except asyncio.CancelledError:
            if self._jobs.suspended(payment.payment_id):
                raise  # shutdown keeps this job for the next start: nothing is owed yet
            # The client went away mid-call; the money is still owed back.
            await asyncio.shield(
                self._spent_refunds.refund(payment, payment.amount_msat, "call cancelled")
            )
            raise
        except Exception as exc:
            log.exception("service %s failed after payment", spec.slug)
            refund = await self._spent_refunds.refund(payment, payment.amount_msat, repr(exc))
            raise ApiError(
                ErrorCode.L402_UPSTREAM_FAILED,
                "The service failed after payment; the payment was refunded.",
                refund=refund,
            ) from exc

        if spec.untrusted_output and isinstance(result.body, dict):
            result = replace(result, body={**result.body, "untrusted_output": True})
        elif spec.untrusted_output and result.stream is not None:
            result.stream.receipt["untrusted_output"] = True  # said at the stream's end
        # One refund link for all that was not earned: what was paid beyond the quote,
        # plus what the service did not deliver of it.
        earned_msat, field, reason = price_msat, "refund", "paid more than the request costs"
        if result.charged_msat is not None and result.charged_msat < price_msat:
            earned_msat = max(0, result.charged_msat)
            field, reason = "partial_refund", "the call delivered less than was quoted"
        unearned_msat = payment.amount_msat - earned_msat
        if self._holds is not None and payment.mode == "hold" and earned_msat > 0:
            # The call succeeded and earned something: only now is the held payment kept
            # (earning nothing, it is canceled below, as the full refund).
            await self._holds.settle(payment)
        if unearned_msat > 0:
            refund = await self._spent_refunds.refund(payment, unearned_msat, reason)
            if refund is not None and isinstance(result.body, dict):
                result = replace(result, body={**result.body, field: refund})
            elif refund is not None and result.stream is not None:
                result.stream.receipt[field] = refund  # said at the stream's end
        return result

    async def _hold(
        self, payment: Payment, spec: AnySpec, params: BaseModel, held: HeldForReview
    ) -> ApiError:
        """The screen held this communication: neither answered nor refunded, the payment
        stays serving (the ledger's held) until the operator's release or refund."""
        if self._held is None or spec.mode == "job":
            # No hold desk on this gate, or a job (which has its own row and answer): the
            # call is refunded instead of held.
            refund = await self._spent_refunds.refund(payment, payment.amount_msat, str(held))
            return ApiError(
                ErrorCode.CONTENT_FILTERED,
                "The communication was refused by the content screen; refunded.",
                refund=refund,
            )
        if self._holds is not None and payment.mode == "hold":
            await self._holds.settle(payment)  # a held HTLC cannot wait 24 hours
        return await self._held.hold(payment, spec, params, held)

    async def run_released(
        self, payment: Payment, spec: AnySpec, params: BaseModel, ctx: ServiceContext
    ) -> ServiceResult:
        """Run a held call the operator released (its payment still serving): a failure
        is refunded in full, a partial delivery the difference, as for any call."""
        return await self._run_handler(
            payment, spec, params, self._price_msat(payment, spec, params), ctx
        )

    async def _submit_job(
        self, payment: Payment, spec: AnySpec, params: BaseModel, price_msat: int
    ) -> ServiceResult | None:
        """Spend ``payment`` and write its job's row in one transaction, then run the job;
        the 202, or None when the spend was lost (the payment was used or refunded)."""
        job = self._prepare_job(payment, spec, params)
        if not await self._payments.spend_for_job(job, int(time.time())):
            return None
        return self._start_job(job, payment, spec, params, price_msat)

    def _prepare_job(self, payment: Payment, spec: AnySpec, params: BaseModel) -> Job:
        return self._jobs.prepare(
            payment_id=payment.payment_id,
            service=spec.slug,
            job_type=spec.job_type or spec.slug,
            callback=params.callback_target() if isinstance(params, Params) else None,
        )

    def _start_job(
        self, job: Job, payment: Payment, spec: AnySpec, params: BaseModel, price_msat: int
    ) -> ServiceResult:
        """Run a job whose row is written; the 202."""
        work, refund = self._job_work(payment, spec, params, price_msat)
        self._jobs.start(job, work, refund)
        return ServiceResult(
            self._jobs.accepted_body(job), status=202, headers=self._jobs.accepted_headers(job)
        )

    async def resume_job(self, job: Job, spec: AnySpec, params: BaseModel, gone: str) -> bool:
        """Take up a job the gone instance ``gone`` was running whose resume state names a
        remote prediction: its handler runs again here with the saved params and finds
        the prediction (it is waited for, not made again). False when the payment is not
        serving, is a hold payment (whose held HTLC a restart cannot vouch for: the orphan
        path answers it), or another instance took it up."""
        payment = await self._payments.get(job.payment_id)
        if (
            payment is None
            or payment.status is not PaymentStatus.SERVING
            or (payment.mode == "hold")
            or not await self._payments.adopt(payment.payment_id, gone)
        ):
            return False
        work, refund = self._job_work(
            payment, spec, params, self._price_msat(payment, spec, params)
        )
        await self._jobs.adopt(job, work, refund)
        return True

    def _job_work(
        self, payment: Payment, spec: AnySpec, params: BaseModel, price_msat: int
    ) -> tuple[JobWork, FailureRefund]:
        async def work(report: Progress) -> dict[str, Any]:
            ctx = self._contexts.for_call(
                payment.payment_id,
                progress=report,
                job_state=self._jobs.state_for(payment.payment_id),
                service=spec.slug,
            )
            try:
                result = await self._run_handler(payment, spec, params, price_msat, ctx)
            finally:
                # A free retry's job ended: its window closes (a refusal reopened it).
                # Not when shutdown puts the job aside: it runs on after the restart.
                if self.rework is not None and not self._jobs.suspended(payment.payment_id):
                    await asyncio.shield(self.rework.retry_ended(payment.payment_id))
            if isinstance(result.body, dict):
                return result.body
            return {"content": result.body if isinstance(result.body, str) else None}

        async def refund(reason: str) -> dict[str, Any] | None:
            issued = await self._spent_refunds.refund(payment, payment.amount_msat, reason)
            if issued is None:  # already refunded (e.g. on cancellation): show that refund
                issued = await self._refunds.latest_refund(payment.payment_id)
            return issued

        return work, refund

    async def refund_orphaned_job(self, job: Job) -> dict[str, Any] | None:
        """Refund in full the payment of a job a restart interrupted (or show the refund
        it already had, when the crash came between its refund and the job's end)."""
        payment = await self._payments.get(job.payment_id)
        if payment is None:
            return None
        refund = await self._spent_refunds.refund(
            payment, payment.amount_msat, "job lost in restart"
        )
        return refund or await self._refunds.latest_refund(payment.payment_id)

    async def refund_unanswered(self, served_by: str) -> int:
        """Once the instance ``served_by`` is gone (after its orphaned jobs): refund in
        full every call it left serving, spent but neither answered nor refunded. A
        synchronous call's result is never stored, so there is nothing to keep for the
        payer; a retry with its credential is shown the refund. Returns how many."""
        count = 0
        held = await self._held.open_payment_ids() if self._held is not None else set()
        if self.rework is not None:  # free-retry windows survive a restart
            held |= await self.rework.open_payment_ids()
        for payment in await self._payments.serving(served_by):
            if self._jobs.resumed(payment.payment_id):
                continue  # its job was taken up again (resume_job): it is being served
            if payment.payment_id in held:
                continue  # held for review: serving until the operator decides
            refund = await self._spent_refunds.refund(
                payment, payment.amount_msat, "the call was interrupted by a restart"
            )
            if refund is not None:
                count += 1
            else:
                log.error("payment %s is left serving: its refund failed", payment.payment_id)
        return count

    async def refund_unserved_in_doubt(self) -> int:
        """Spends whose answer the store's connection cut (the caller was answered 503)
        and that did commit: the call was never served, so it is refunded in full, once;
        how many."""
        count = 0
        for payment in await self._payments.unserved_in_doubt():
            refund = await self._spent_refunds.refund(
                payment, payment.amount_msat, "the store's answer to the spend was cut"
            )
            await self._jobs.fail_unstarted(payment.payment_id, refund)  # a job's spend
            self._payments.resolved(payment)
            if refund is not None:
                count += 1
        return count
