"""Held communications: the hold, the payer's appeal, and the operator's release or refund.

A communication the screen flags after payment (:class:`HeldForReview`) is not sent and
not refunded: :meth:`HeldRequestDesk.hold` records it (the validated request, what was
screened, the reasons) with a job row of type ``held`` that the payer polls like any
job, and answers ``CONTENT_POLICY_HELD`` with ``appeal_url``, ``held``, ``appeal_sats``,
``payment_id`` and the job's ``requestId`` / ``poll_url``. The payment stays ``serving``
(the ledger's held).

- The payer opens ``appeal_url`` (``/appeal#t=<capability token>``) and pays 1 sat for
  human review: the hold moves to ``review_requested`` (listed first to the operator).
- The operator releases it (:meth:`release`): the service's handler runs with the stored
  request (the do-not-contact list still applies; the screen does not), and its result
  becomes the job's result (``GET /api/l402/job-status?requestId=...&jobType=held``, MCP
  ``get_job_result``, and the appeal page); a failure then is refunded as any failure.
- Or refunds it (:meth:`refund`): an LNURL-withdraw refund object, in the job's FAILED
  answer, on the appeal page and on ``/recover``.
- 24 hours after the hold, an unresolved one is refund-eligible and the scheduler
  refunds it (:meth:`expire`).
- The page shows one appeal invoice at a time and replaces it with a new one in its last
  minute; the one replaced can still be paid, and it is still the hold's (an appeal
  payment's request digest is its hold id). Any appeal invoice of the hold that is paid
  counts: the first moves a held request to review.
- An appeal invoice paid when it can buy nothing (the hold was decided: released,
  refunded, expired, or is being decided; or another appeal invoice of it already
  counted) is refunded in full as an LNURL-withdraw, once (paid -> refunded, the same
  conditional move as any unused payment's refund, against the paid -> spent of the
  review), shown on the appeal page and on ``/recover`` (:meth:`refresh_appeal` on the
  page, :meth:`refund_late_appeals` on the scheduler). Appeal invoices are ordinary
  invoices on every backend (the node's hold invoices serve MCP payments only), so there
  is no invoice to cancel instead.

A release, a refund and the expiry each claim the hold with one conditional UPDATE from
its open states: exactly one of them acts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from satsgate.constant_time import texts_equal
from satsgate.errors import ApiError, ErrorCode, envelope
from satsgate.jobs.lifecycle import JobRunner
from satsgate.services.base import (
    FlatPrice,
    Params,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.comms.screening import HeldForReview, Screener
from satsgate.store import Job, JobStatus, Payment, PaymentStatus, Store
from satsgate.store.held_requests import HeldRequest

log = logging.getLogger(__name__)

APPEAL_SATS = 1
REFUND_ELIGIBLE_AFTER_S = 24 * 3600
APPEAL_PATH = "/appeal"


class HoldError(Exception):
    """An operator action that cannot be carried out; the message says why."""


class _AppealParams(Params):
    pass


async def _appeal_handler(ctx: ServiceContext, params: _AppealParams) -> ServiceResult:
    raise ApiError(ErrorCode.NOT_FOUND, "The appeal is paid on its page, not called.")


# The appeal's invoice is a payment of its own (service "appeal", 1 sat), settled through
# the node like any other and earned once it moves the hold to review_requested. Not in
# the service registry: nobody calls it.
APPEAL_SPEC: ServiceSpec[_AppealParams] = ServiceSpec(
    slug="appeal",
    tool_name="appeal",
    category="utility",
    title="Human review of a held request",
    description="1 sat: a person reviews a communication the screen held.",
    params=_AppealParams,
    price_msat=FlatPrice(APPEAL_SATS * 1000),
    handler=_appeal_handler,
)


class ReleaseRunner(Protocol):
    """The spender's handler run for a released hold (refunds on failure)."""

    async def run_released(
        self, payment: Payment, spec: ServiceSpec[Any], params: BaseModel, ctx: ServiceContext
    ) -> ServiceResult: ...


class Contexts(Protocol):
    def for_call(
        self, call_id: str, *, screener: Screener | None = None, service: str | None = None
    ) -> ServiceContext: ...


class AppealInvoices(Protocol):
    """The gate's invoice issue and settlement refresh."""

    async def create_payment(
        self, spec: ServiceSpec[Any], *, amount_sats: int, digest: str, via: str
    ) -> Any: ...

    async def refresh_paid(self, payment: Payment) -> Payment: ...


class Refunds(Protocol):
    async def refund_unspent(self, payment: Payment, reason: str) -> dict[str, Any] | None: ...

    async def refund_spent(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None: ...

    async def latest_refund(self, payment_id: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Outcome:
    hold_id: str
    status: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    refund: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hold_id": self.hold_id, "status": self.status}
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        if self.refund is not None:
            out["refund"] = self.refund
        return out


class HeldIntake:
    """The held requests' door from the spender: a flagged call recorded with its job,
    its CONTENT_POLICY_HELD answer (and again for a repeat), the open holds' payments,
    and the appeal page's capability token. Built before the payment gate, which hands
    it every call the screen flags; :class:`HeldRequestDesk` does the rest."""

    def __init__(
        self, *, store: Store, jobs: JobRunner, server_secret: str, public_base_url: str
    ) -> None:
        self._repo = store.held_requests
        self._jobs = jobs
        self._secret = server_secret
        self._base = public_base_url

    # -- the capability token of the appeal page ---------------------------------------------

    def appeal_token(self, hold_id: str) -> str:
        return f"{hold_id}.{self._mac(hold_id)}"

    def appeal_url(self, hold_id: str) -> str:
        """The appeal page with the token in the fragment, which a browser never sends:
        no access log, Referer or server ever sees it (satsgate.web.appeal)."""
        return f"{self._base}{APPEAL_PATH}#t={self.appeal_token(hold_id)}"

    def hold_id_of(self, token: str) -> str | None:
        hold_id, _, mac = token.partition(".")
        if not hold_id.startswith("hold_") or len(hold_id) > 40 or not mac:
            return None
        return hold_id if texts_equal(mac, self._mac(hold_id)) else None

    def _mac(self, hold_id: str) -> str:
        key = self._secret.encode()
        return hmac.new(key, f"appeal\n{hold_id}".encode(), hashlib.sha256).hexdigest()[:32]

    # -- the hold (from the spender) ---------------------------------------------------------

    async def hold(
        self, payment: Payment, spec: ServiceSpec[Any], params: BaseModel, held: HeldForReview
    ) -> ApiError:
        """Record the held request and its job; the CONTENT_POLICY_HELD error to answer."""
        now = int(time.time())
        hold_id = f"hold_{secrets.token_hex(12)}"
        job = self._jobs.prepare(payment_id=payment.payment_id, service=spec.slug, job_type="held")
        outreach = held.outreach
        record = HeldRequest(
            hold_id=hold_id,
            payment_id=payment.payment_id,
            job_id=job.job_id,
            service=spec.slug,
            channel=outreach.channel if outreach is not None else spec.slug,
            reasons=held.reasons,
            amount_msat=payment.amount_msat,
            status="held",
            params=json.loads(params.model_dump_json(by_alias=False)),
            outreach_text=outreach.text if outreach is not None else None,
            appeal_note=None,
            appeal_payment_id=None,
            appeal_paid_at=None,
            created_at=now,
            eligible_at=now + REFUND_ELIGIBLE_AFTER_S,
            resolved_at=None,
            resolution=None,
            resolved_by=None,
            updated_at=now,
        )
        await self._repo.insert(record, job)
        log.warning("held %s (%s) for review: %s", hold_id, spec.slug, ", ".join(held.reasons))
        return self.held_error(record, job)

    def held_error(self, hold: HeldRequest, job: Job | None = None) -> ApiError:
        job_id = hold.job_id if job is None else job.job_id
        poll_url = f"{self._base}/api/l402/job-status?requestId={job_id}&jobType=held"
        return ApiError(
            ErrorCode.CONTENT_POLICY_HELD,
            "The request was held for review and not delivered: the screen flagged it "
            f"({', '.join(sorted({r.split(':')[0] for r in hold.reasons}))}). The payment is "
            "held, not refunded automatically; ask for human review at appeal_url (1 sat). "
            "Unresolved after 24 hours, it is refunded.",
            extra={
                "held": True,
                "appeal_url": self.appeal_url(hold.hold_id),
                "appeal_sats": APPEAL_SATS,
                "payment_id": hold.payment_id,
                "paymentId": hold.payment_id,
                "hold_id": hold.hold_id,
                "requestId": job_id,
                "job_id": job_id,
                "jobType": "held",
                "poll_url": poll_url,
                "refund_eligible_at": hold.eligible_at,
            },
        )

    async def held_again(self, payment_id: str) -> ApiError | None:
        """A repeat of a held call: the hold's answer again (None if it is not held)."""
        hold = await self._repo.by_payment(payment_id)
        if hold is None or not hold.open:
            return None
        return self.held_error(hold)

    async def open_payment_ids(self) -> set[str]:
        return await self._repo.open_payment_ids()

    # -- the appeal --------------------------------------------------------------------------


class HeldRequestDesk:
    """Held requests after the hold: the operator's release or refund, the payer's paid
    appeal, the 24-hour expiry, and what a restart left claimed. Built after the gate:
    it takes appeal invoices from the gate and runs a released request through the
    spender."""

    def __init__(
        self,
        *,
        intake: HeldIntake,
        store: Store,
        refunds: Refunds,
        invoices: AppealInvoices,
        runner: ReleaseRunner,
        contexts: Contexts,
        released_screener: Screener,
        by_slug: dict[str, ServiceSpec[Any]],
    ) -> None:
        self._intake = intake
        self._store = store
        self._repo = store.held_requests
        self._refunds = refunds
        self._invoices = invoices
        self._runner = runner
        self._contexts = contexts
        self._released_screener = released_screener
        self._by_slug = by_slug

    def appeal_url(self, hold_id: str) -> str:
        return self._intake.appeal_url(hold_id)

    def hold_id_of(self, token: str) -> str | None:
        return self._intake.hold_id_of(token)

    async def get(self, hold_id: str) -> HeldRequest | None:
        return await self._repo.get(hold_id)

    async def appeal_invoice(self, hold: HeldRequest, note: str | None) -> Payment:
        """The 1-sat invoice of the appeal: the current one while it can still be paid,
        else a new one. HoldError when the hold is no longer waiting for an appeal."""
        if hold.status != "held":
            raise HoldError(f"this request is {hold.status.replace('_', ' ')}")
        if hold.appeal_payment_id is not None:
            current = await self._store.payments.get(hold.appeal_payment_id)
            if current is not None:
                current = await self._invoices.refresh_paid(current)
                if current.status is PaymentStatus.PAID or (
                    current.status is PaymentStatus.UNPAID and current.expires_at > time.time() + 60
                ):
                    return current
        challenge = await self._invoices.create_payment(
            APPEAL_SPEC, amount_sats=APPEAL_SATS, digest=hold.hold_id, via="appeal"
        )
        payment: Payment = challenge.payment
        note = (note or "").strip()[:2000] or None
        if not await self._repo.set_appeal(
            hold.hold_id, payment.payment_id, note, int(time.time())
        ):
            raise HoldError("this request is no longer waiting for an appeal")
        return payment

    async def refresh_appeal(self, hold: HeldRequest) -> HeldRequest:
        """Apply every appeal invoice of the hold that is paid (the node is asked about
        the ones still open): the first moves a held request to review_requested; any
        other (paid once the hold was decided or being decided, or a second invoice paid
        after one already counted, e.g. one the page replaced in its last minute) is
        refunded in full, once."""
        if hold.appeal_payment_id is None:
            return hold
        now = time.time()
        for payment in await self.appeal_payments(hold):
            if payment.status is PaymentStatus.UNPAID and payment.expires_at > now:
                payment = await self._invoices.refresh_paid(payment)
            if payment.status is PaymentStatus.PAID:
                hold, _ = await self._apply_appeal(hold, payment)
        return hold

    async def refund_late_appeals(self) -> int:
        """The scheduler: apply every appeal payment paid and not yet applied, as
        :meth:`refresh_appeal` does (the page does it as soon as the payer looks; this
        catches the payer who does not). How many were refunded."""
        count = 0
        for hold, payment_id in await self._repo.paid_appeals():
            payment = await self._store.payments.get(payment_id)
            if payment is not None and payment.status is PaymentStatus.PAID:
                _, refunded = await self._apply_appeal(hold, payment)
                count += refunded
        return count

    async def _apply_appeal(self, hold: HeldRequest, payment: Payment) -> tuple[HeldRequest, bool]:
        """A paid appeal payment of ``hold``: it moves a held request to review (both in
        one transaction), else it bought nothing and is refunded. Each move is conditional
        on the payment being paid (paid -> spent, paid -> refunded), so of the two, and of
        concurrent callers, exactly one acts once. The hold as it is now, and whether
        this call refunded."""
        if hold.status == "held" and await self._repo.review_requested(
            hold.hold_id, payment.payment_id, int(time.time())
        ):
            log.info("review requested for %s", hold.hold_id)
            return await self._repo.get(hold.hold_id) or hold, False
        hold = await self._repo.get(hold.hold_id) or hold
        if hold.status == "held":
            # Not taken although held: the payment was spent or refunded meanwhile.
            return hold, False
        # Decided (or claimed by the operator) before this appeal was paid, or already
        # under review with another appeal payment.
        refund = await self._refunds.refund_unspent(
            payment, "appeal paid after the held request no longer needed it"
        )
        if refund is not None:
            log.info("refunded an unused appeal of %s (%s)", hold.hold_id, hold.status)
        return hold, refund is not None

    async def appeal_refunds(self, hold: HeldRequest) -> list[tuple[str, dict[str, Any]]]:
        """The refunds of the hold's appeal payments that bought nothing: (payment id,
        refund), oldest invoice first."""
        out = []
        for payment_id in await self._repo.appeal_payment_ids(hold.hold_id):
            refund = await self._refunds.latest_refund(payment_id)
            if refund is not None:
                out.append((payment_id, refund))
        return out

    async def appeal_payments(self, hold: HeldRequest) -> list[Payment]:
        """Every appeal invoice made for the hold (the current one last)."""
        out = []
        for payment_id in await self._repo.appeal_payment_ids(hold.hold_id):
            payment = await self._store.payments.get(payment_id)
            if payment is not None:
                out.append(payment)
        return out

    async def appeal_payment(self, hold: HeldRequest) -> Payment | None:
        """The appeal invoice the hold names: the current one, or the one that counted."""
        if hold.appeal_payment_id is None:
            return None
        return await self._store.payments.get(hold.appeal_payment_id)

    async def refund_state(self, refund_secret: str) -> str | None:
        """The refund's status now (open, claiming, paid, expired), by its secret."""
        refund = await self._store.refunds.get_by_k1(refund_secret)
        return None if refund is None else str(refund.status)

    async def job(self, hold: HeldRequest) -> Job | None:
        return await self._store.jobs.get(hold.job_id)

    # -- the operator ------------------------------------------------------------------------

    async def listing(self, *, open_only: bool = False) -> list[HeldRequest]:
        """Review requested first; appeals paid since the last look are picked up."""
        for hold in await self._repo.listing(open_only=True):
            if hold.status == "held" and hold.appeal_payment_id is not None:
                await self.refresh_appeal(hold)
        return await self._repo.listing(open_only=open_only)

    async def release(self, hold_id: str, *, by: str = "operator") -> Outcome:
        """Run the held request now; its result (or its failure's refund) becomes the
        job's answer. HoldError when the hold is unknown or already resolved."""
        hold = await self._claimed(hold_id, "releasing")
        payment = await self._store.payments.get(hold.payment_id)
        spec = self._by_slug.get(hold.service)
        now = int(time.time())
        if payment is not None and payment.status is not PaymentStatus.SERVING:
            # Refunded by other means meanwhile (satsgate-refund): nothing is sent.
            return await self._refund_claimed(hold, "the payment was already refunded", by)
        if payment is None or spec is None or hold.params is None:
            # Nothing left to run it with (the service is gone, or the evidence expired).
            return await self._refund_claimed(hold, "the held request can no longer be run", by)
        ctx = self._contexts.for_call(
            payment.payment_id, screener=self._released_screener, service=spec.slug
        )
        try:  # against the app's rate book (its destinations), as when it was paid
            params = spec.parse(hold.params, ctx.rate_book)
        except ValueError:
            return await self._refund_claimed(hold, "the held request no longer validates", by)
        try:
            result = await self._runner.run_released(payment, spec, params, ctx)
        except ApiError as exc:  # refunded by the spender, like any failure after payment
            error = exc.envelope()
            await self._store.jobs.finish(hold.job_id, JobStatus.FAILED, None, error, now)
            await self._repo.resolve(hold.hold_id, "failed", "failed", by, int(time.time()))
            return Outcome(hold.hold_id, "failed", error=error, refund=exc.refund)
        if isinstance(result.body, dict):
            body = dict(result.body)
        elif isinstance(result.body, str):
            body = {"content": result.body}
        else:
            body = {"content_type": result.content_type, "bytes": len(result.body)}
        await self._store.jobs.finish(
            hold.job_id, JobStatus.COMPLETED, body, None, int(time.time())
        )
        await self._repo.resolve(hold.hold_id, "released", "released", by, int(time.time()))
        log.info("released %s by %s", hold.hold_id, by)
        return Outcome(hold.hold_id, "released", result=body)

    async def refund(self, hold_id: str, *, by: str = "operator") -> Outcome:
        """Refund the held payment in full (LNURL-withdraw). HoldError when the hold is
        unknown or already resolved."""
        hold = await self._claimed(hold_id, "refunding")
        return await self._refund_claimed(hold, "held for review; refunded by the operator", by)

    async def expire(self, now: int | None = None) -> int:
        """The scheduler: refund every hold unresolved 24 hours after it was made."""
        when = int(time.time()) if now is None else now
        count = 0
        for hold in await self._repo.due(when):
            if await self._repo.claim(hold.hold_id, "refunding", when, due_before=when):
                await self._refund_claimed(
                    hold, "held for review and unresolved after 24 hours", "schedule", "expired"
                )
                count += 1
        return count

    async def finish_interrupted(self, claimed_by: str) -> int:
        """Holds the gone instance ``claimed_by`` left mid-release or mid-refund are
        refunded (a release's message may or may not have gone out; its payment is
        refunded as any call a restart interrupted)."""
        count = 0
        for hold in await self._repo.interrupted(claimed_by):
            await self._refund_claimed(hold, "the review was interrupted by a restart", "restart")
            count += 1
        return count

    async def _claimed(self, hold_id: str, to: str) -> HeldRequest:
        hold = await self._repo.get(hold_id)
        if hold is None:
            raise HoldError(f"no held request {hold_id}")
        if hold.status == "held" and hold.appeal_payment_id is not None:
            hold = await self.refresh_appeal(hold)
        if not await self._repo.claim(hold_id, to, int(time.time())):
            current = await self._repo.get(hold_id)
            state = current.status if current is not None else "gone"
            raise HoldError(f"held request {hold_id} is already {state.replace('_', ' ')}")
        return hold

    async def _refund_claimed(
        self, hold: HeldRequest, reason: str, by: str, resolution: str = "refunded"
    ) -> Outcome:
        payment = await self._store.payments.get(hold.payment_id)
        refund = None
        if payment is not None:
            refund = await self._refunds.refund_spent(payment, payment.amount_msat, reason)
            if refund is None:
                refund = await self._refunds.latest_refund(payment.payment_id)
        error = envelope(
            ErrorCode.L402_REFUND_ISSUED,
            f"The held request was not delivered and its payment was refunded ({reason}).",
            refund=refund,
            held=False,
            hold_id=hold.hold_id,
        )
        now = int(time.time())
        await self._store.jobs.finish(hold.job_id, JobStatus.FAILED, None, error, now)
        await self._repo.resolve(hold.hold_id, "refunded", resolution, by, now)
        log.info("refunded held %s (%s)", hold.hold_id, reason)
        return Outcome(hold.hold_id, "refunded", error=error, refund=refund)
