"""The free-retry window (the spec's CONTENT_FILTERED_RETRY).

When the upstream model of a paid synchronous call refuses on content (an engine's
``EngineError("CONTENT_FILTERED")``) and the payment has not reached the cap, the payment
is neither spent nor refunded: it stays ``serving`` (the ledger's held) with a window in
the store (``store/rework.py``), and the caller gets ``CONTENT_FILTERED_RETRY`` with a
``rework_token``. A retry with the same credential (L402, MPP, or the MCP paymentId) and
``reworkToken`` (or ``rework_token``) in the body, before ``rework_until``, runs the
request (changed, as it may be: same service, priced no higher than was paid) with no
new payment. Without the token: ``REWORK_TOKEN_INVALID``, nothing ran. After the
deadline: ``REWORK_EXPIRED``, nothing ran, and the payment is refunded in full at once;
a window nobody comes back to is refunded by the sweep (:meth:`ReworkDesk.expire_due`,
every minute). ``POST /api/decline-retry`` takes the refund instead of retrying.

Counting: the first call is attempt 1; ``retries_max`` (3) free retries follow. The
refusal of attempt ``retries_max + 1`` is refunded in full (``CONTENT_FILTERED`` with the
refund). Each refusal issues a new token and a deadline ``window_s`` (600 s) after it;
the previous token stops working.

The token travels outside the priced params: the faces take it out of the body before
validation (:func:`take_token`) and pass it beside the params (``rework_token``) to the
spend, so the price and the handler never see it; the dedup key gets its hash.

Exactly once: a retry claims the window with one conditional UPDATE (open -> running,
the current token, before the deadline); a decline and the expiry end it with one
conditional UPDATE from open; the refund that follows is the refund of a spent payment,
which never pays out more than was paid.

Jobs: a job whose prediction the upstream refuses on content ends FAILED with the
CONTENT_FILTERED_RETRY envelope (its poll, await_result and its callback carry it), the
payment kept as for a synchronous call. The retry is a new call on the same payment: it
answers 202 with a NEW job (its own id, poll_url and callback), whose row is written in
the claim's transaction; the window stays ``running`` until that job ends, which closes
it (answered, or failed and refunded) or reopens it (refused again, below the cap). The
refused job's reads show the window as it is now (:meth:`ReworkDesk.job_error`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import BaseModel

from satsgate.engines import EngineError
from satsgate.engines.refusals import said_by_model
from satsgate.errors import ApiError, ErrorCode
from satsgate.payments.mpp import rfc3339
from satsgate.services.base import ServiceResult, ServiceSpec
from satsgate.store import Job, Payment, PaymentStatus
from satsgate.store.rework import (
    DECLINED,
    EXPIRED,
    OPEN,
    RUNNING,
    ReworkRepository,
    ReworkWindow,
)

log = logging.getLogger(__name__)

AnySpec = ServiceSpec[Any]
Dispatch = Callable[[Payment, AnySpec, BaseModel, int], Awaitable[ServiceResult]]

TOKEN_FIELDS = ("reworkToken", "rework_token")
MAX_TOKEN_CHARS = 200

# What a refusal covers, by the engine of the service: what the caller should change.
_SCOPE_OF_ENGINE = {"image": "prompt", "image_edit": "image-or-prompt", "vision": "image-or-prompt"}
_FIX = {
    "prompt": "Rephrase the prompt: describe the scene without what the model's policy "
    "blocks (real people, violence, explicit or trademarked content), then retry.",
    "image-or-prompt": "Change the prompt, or send a different image (the model may object "
    "to either), then retry.",
    "input-or-output": "Rephrase the request or its context so that neither it nor the "
    "answer it asks for is against the model's content policy, then retry.",
}
CAUSE = (
    "The AI model refused this request under its own content policy, although the "
    "service's content screen passed it."
)


def take_token(body: Any) -> tuple[Any, str | None]:
    """Take ``reworkToken`` / ``rework_token`` out of a JSON body (not part of the priced
    params): the body without it, and the token (None without one)."""
    token: str | None = None
    if isinstance(body, dict) and (TOKEN_FIELDS[0] in body or TOKEN_FIELDS[1] in body):
        body = dict(body)
        for name in TOKEN_FIELDS:
            value = body.pop(name, None)
            if isinstance(value, str) and value and token is None:
                token = value[:MAX_TOKEN_CHARS]
    return body, token


def refusal_scope(spec: AnySpec) -> str:
    return _SCOPE_OF_ENGINE.get(spec.engine or "", "input-or-output")


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SpentRefunds(Protocol):
    """The refund service's refunds of a spent (serving) payment."""

    async def refund_spent(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None: ...

    async def latest_refund(self, payment_id: str) -> dict[str, Any] | None: ...


class PaymentReads(Protocol):
    async def get(self, payment_id: str) -> Payment | None: ...


class ReworkDesk:
    """The spender's hooks (:meth:`refused`, :meth:`retry`, :meth:`open_payment_ids`),
    the decline (:meth:`decline`) and the expiry sweep (:meth:`expire_due`)."""

    def __init__(
        self,
        *,
        windows: ReworkRepository,
        payments: PaymentReads,
        refunds: SpentRefunds,
        window_s: float = 600.0,
        retries_max: int = 3,
    ) -> None:
        self._windows = windows
        self._payments = payments
        self._refunds = refunds
        self.window_s = window_s
        self.retries_max = retries_max

    # -- the refusal ----------------------------------------------------------------------

    async def refused(self, payment: Payment, spec: AnySpec, exc: EngineError) -> ApiError | None:
        """A spent call's engine refused on content: the CONTENT_FILTERED_RETRY to answer
        (the payment stays serving; a job ends FAILED with it), or None to refund as usual
        (not a content refusal, a hold invoice or ecash, or the cap reached)."""
        if exc.code != ErrorCode.CONTENT_FILTERED or payment.mode != "invoice":
            # Windows are for invoice payments: a hold invoice cannot wait, an ecash payment
            # has no credential to retry with (both are given back as they are).
            return None
        if self.retries_max <= 0:
            return None
        try:
            return await self._open_or_reopen(payment, spec, exc)
        except Exception:  # the window could not be recorded: refund as any failure
            log.exception("payment %s: free-retry window not recorded", payment.payment_id)
            return None

    async def _open_or_reopen(
        self, payment: Payment, spec: AnySpec, exc: EngineError
    ) -> ApiError | None:
        now = time.time()
        token = secrets.token_urlsafe(32)
        until = now + self.window_s
        window = await self._windows.get(payment.payment_id)
        if window is None:
            if not await self._windows.open_first(
                payment.payment_id, spec.slug, _hash(token), until, int(now)
            ):
                return None
            attempt = 1
        elif window.state == RUNNING:
            attempt = window.attempts
            if attempt > self.retries_max:
                await self._windows.close_running(payment.payment_id, int(now))
                # The refund's answer (CONTENT_FILTERED) says the cap was reached.
                exc.extra.update(
                    {"attempt": attempt, "retries_left": 0, "retries_max": self.retries_max}
                )
                log.info("payment %s: refused at the retry cap, refunded", payment.payment_id)
                return None
            if not await self._windows.reopen(payment.payment_id, _hash(token), until, int(now)):
                return None
        else:
            return None
        retries_left = self.retries_max + 1 - attempt
        said = said_by_model(exc.extra.get("model_said"))
        scope = refusal_scope(spec)
        return ApiError(
            ErrorCode.CONTENT_FILTERED_RETRY,
            "The AI model refused this request under its content policy. The payment is "
            "kept, neither spent nor refunded: change the input and send the request again "
            "with the same payment (credential or paymentId) and reworkToken before "
            f"rework_until ({retries_left} free retr{'y' if retries_left == 1 else 'ies'} "
            "left), or POST /api/decline-retry with paymentId and rework_token for a refund.",
            extra={
                "paymentId": payment.payment_id,
                "attempt": attempt,
                "retries_left": retries_left,
                "retries_max": self.retries_max,
                "rework_until": rfc3339(int(until)),
                "rework_seconds_left": int(until - now),
                "rework_token": token,
                "cause": CAUSE,
                "fix": _FIX[scope],
                "model_said": said,
                "refusal_scope": scope,
            },
        )

    # -- the retry ------------------------------------------------------------------------

    async def retry(
        self,
        payment: Payment,
        spec: AnySpec,
        params: BaseModel,
        price_msat: int,
        dispatch: Dispatch,
        job: Job | None = None,
        *,
        token: str | None = None,
    ) -> ServiceResult | None:
        """A call on a serving payment, quoted at ``price_msat`` and carrying the rework
        ``token`` it was sent with (if any): when the payment has a
        window, run it as the free retry (or refuse it: REWORK_TOKEN_INVALID,
        REWORK_EXPIRED, a price above what was paid); None when it has none (the caller
        answers as for any used payment).

        ``job``: the retry of a job-mode call, its new job's row (not yet written): the
        claim writes it, ``dispatch`` starts it and answers the 202, and the window stays
        running until the job ends (:meth:`retry_ended`)."""
        window = await self._windows.get(payment.payment_id)
        if window is None or window.state not in (OPEN, RUNNING):
            return None
        now = time.time()
        await self._check_retry(payment, window, token, price_msat, now)
        await self._claim_retry(payment, window, now, job)
        if job is not None:  # the 202 now; the job's end closes or reopens the window
            try:
                return await dispatch(payment, spec, params, price_msat)
            except BaseException:
                await self.retry_ended(payment.payment_id)
                raise
        try:
            return await dispatch(payment, spec, params, price_msat)
        finally:
            await self.retry_ended(payment.payment_id)

    async def _check_retry(
        self,
        payment: Payment,
        window: ReworkWindow,
        token: str | None,
        price_msat: int,
        now: float,
    ) -> None:
        """Raise the ApiError that refuses this retry, if any: a retry running already,
        the window ended (its refund, at once: the caller proved the payment), the
        token not the latest one, or a price above what was paid (the window stays)."""
        if window.state == RUNNING:
            raise ApiError(
                ErrorCode.PAYMENT_ALREADY_USED,
                "A free retry of this payment is running; wait for its answer.",
            )
        until = rfc3339(int(window.rework_until))
        if now > window.rework_until:
            refund = await self.end(payment.payment_id, EXPIRED, None)
            raise ApiError(
                ErrorCode.REWORK_EXPIRED,
                "The free-retry window ended at rework_until; nothing ran. The payment is "
                "refunded in full (the refund is attached; also claimable at /recover).",
                refund=refund,
                extra={"paymentId": payment.payment_id, "rework_until": until},
            )
        if token is None or not hmac.compare_digest(_hash(token), window.token_hash):
            raise ApiError(
                ErrorCode.REWORK_TOKEN_INVALID,
                "This payment is in its free-retry window: send the rework_token of the "
                "latest CONTENT_FILTERED_RETRY answer as reworkToken in the body. Nothing "
                "ran. Without a retry the payment is refunded after rework_until.",
                extra={"paymentId": payment.payment_id, "rework_until": until},
            )
        if price_msat > payment.amount_msat:
            raise ApiError(
                ErrorCode.INVALID_INPUT,
                f"This changed request costs {price_msat // 1000} sat but "
                f"{payment.amount_msat // 1000} sat were paid: a free retry may cost no more "
                "than the payment. Nothing ran and the window stays open: retry with a "
                "request priced within the payment, or decline the retry for a refund.",
                extra={
                    "paymentId": payment.payment_id,
                    "amountSats": price_msat // 1000,
                    "paidSats": payment.amount_msat // 1000,
                    "rework_until": until,
                },
            )

    async def _claim_retry(
        self, payment: Payment, window: ReworkWindow, now: float, job: Job | None
    ) -> None:
        """Claim the open window for this retry (one statement: of concurrent retries
        with the token, one runs); raise what the loser is told."""
        if await self._windows.claim(payment.payment_id, window.token_hash, now, job):
            return
        again = await self._windows.get(payment.payment_id)
        if again is not None and again.state == RUNNING:
            raise ApiError(
                ErrorCode.PAYMENT_ALREADY_USED,
                "A free retry of this payment is running; wait for its answer.",
            )
        if again is not None and again.state == OPEN and time.time() > again.rework_until:
            raise ApiError(ErrorCode.REWORK_EXPIRED, "The free-retry window ended; nothing ran.")
        raise ApiError(ErrorCode.PAYMENT_ALREADY_USED, "Service already used.")

    async def retry_ended(self, payment_id: str) -> None:
        """A retry's call (or job) ended: answered or failed (refunded), the window is
        over. A refusal below the cap reopened it (open again, not running): then this
        changes nothing; so does a call that was no retry (no running window)."""
        await self._windows.close_running(payment_id, int(time.time()))

    # -- ends: decline, expiry ------------------------------------------------------------

    async def decline(self, payment_id: str, token: str) -> dict[str, Any]:
        """POST /api/decline-retry: the refund instead of the retry, exactly once."""
        payment = await self._payments.get(payment_id)
        window = await self._windows.get(payment_id)
        if payment is None or window is None:
            raise ApiError(ErrorCode.PAYMENT_NOT_FOUND, "No free-retry window for this paymentId.")
        if not hmac.compare_digest(_hash(token), window.token_hash):
            raise ApiError(
                ErrorCode.REWORK_TOKEN_INVALID,
                "rework_token is not this payment's current token (the one of the latest "
                "CONTENT_FILTERED_RETRY answer).",
            )
        if window.state == RUNNING:
            raise ApiError(
                ErrorCode.REFUND_NOT_AVAILABLE,
                "A free retry of this payment is running: no refund.",
            )
        if window.state != OPEN or not await self._windows.end_open(
            payment_id, DECLINED, int(time.time()), window.token_hash
        ):
            latest = await self._refunds.latest_refund(payment_id)
            raise ApiError(
                ErrorCode.REFUND_NOT_AVAILABLE,
                "This free-retry window is over: the payment was retried, declined or "
                "expired (its refund, if any, is attached).",
                refund=latest,
            )
        refund = await self._refund(payment, "declined the free retry after a content refusal")
        return {
            "success": True,
            "paymentId": payment_id,
            "amountSats": payment.amount_msat // 1000,
            "message": "The free retry was declined; the payment is refunded in full.",
            "refund": refund,
        }

    async def end(self, payment_id: str, to: str, token_hash: str | None) -> dict[str, Any] | None:
        """open -> ``to`` (declined, expired) and the refund in full; the refund object
        (or the payment's latest refund when another end won)."""
        if await self._windows.end_open(payment_id, to, int(time.time()), token_hash):
            payment = await self._payments.get(payment_id)
            if payment is not None:
                return await self._refund(payment, "the free-retry window expired")
        return await self._refunds.latest_refund(payment_id)

    async def expire_due(self) -> int:
        """The scheduled sweep: refund every window past its deadline; how many."""
        count = 0
        for payment_id in await self._windows.due(time.time()):
            if await self._windows.end_open(payment_id, EXPIRED, int(time.time()), None):
                payment = await self._payments.get(payment_id)
                if payment is not None and await self._refund(
                    payment, "the free-retry window expired"
                ):
                    count += 1
        if count:
            log.info("%d free-retry window(s) expired: refunded", count)
        return count

    async def _refund(self, payment: Payment, reason: str) -> dict[str, Any] | None:
        if payment.status is not PaymentStatus.SERVING:
            return await self._refunds.latest_refund(payment.payment_id)
        refund = await self._refunds.refund_spent(payment, payment.amount_msat, reason)
        return refund or await self._refunds.latest_refund(payment.payment_id)

    async def open_payment_ids(self) -> set[str]:
        """Payments in an open window: serving on purpose, kept across a restart."""
        return await self._windows.open_payment_ids()

    async def status_fields(self, payment: Payment) -> dict[str, Any]:
        """What the payment's status (by its paymentId) adds: the open window
        (``rework``), or after an expiry or a decline its refund: the refund object for a
        payment of the paymentId flow (the paymentId is its proof), else a pointer to
        it (an HTTP payment's refund link is shown to its credential: the same request
        again returns it)."""
        window = await self._windows.get(payment.payment_id)
        if window is None:
            return {}
        if window.state in (OPEN, RUNNING):
            if payment.status is not PaymentStatus.SERVING:
                return {}  # a retry a restart interrupted: refunded as such
            return {"rework": self._window_fields(window)}
        if window.state not in (DECLINED, EXPIRED):
            return {}
        refund = await self._refunds.latest_refund(payment.payment_id)
        if refund is None:
            return {}
        if payment.via == "mcp":
            return {"refund": refund}
        return {
            "refund_available": True,
            "refund_hint": "The free-retry window ended and the payment was refunded in "
            "full: repeat the request with its credential to receive the refund link and "
            "secret, then claim it at /recover.",
        }

    async def job_error(self, payment_id: str, error: dict[str, Any]) -> dict[str, Any]:
        """A refused job's stored CONTENT_FILTERED_RETRY envelope as its reads show it now:
        while its token is the window's current one, with ``rework_seconds_left``
        counted from now; once the window moved on (retried, declined, expired), without
        the token that no longer works, with the window's state under ``rework``, and
        after a decline or an expiry with the refund it ended in."""
        window = await self._windows.get(payment_id)
        if window is None:
            return error
        token = error.get("rework_token")
        current = (
            window.state == OPEN
            and isinstance(token, str)
            and hmac.compare_digest(_hash(token), window.token_hash)
        )
        fields = self._window_fields(window)
        if current:
            return {**error, "rework_seconds_left": fields["rework_seconds_left"]}
        shown = {k: v for k, v in error.items() if k != "rework_token"}
        shown.update(rework=fields, rework_seconds_left=0)
        if window.state in (DECLINED, EXPIRED):
            refund = await self._refunds.latest_refund(payment_id)
            ended = "declined" if window.state == DECLINED else "expired"
            shown["error"] = (
                f"The upstream model refused this job on content; the free retry was {ended} "
                "and the payment refunded in full (the refund is shown to the payer)."
            )
            if refund is not None:
                shown["refund"] = refund
        else:
            shown["error"] = (
                "The upstream model refused this job on content; the payment was then used "
                "for a free retry (its own job), so this refusal's rework_token no longer "
                "works."
            )
        return shown

    def _window_fields(self, window: ReworkWindow) -> dict[str, Any]:
        return {
            "state": window.state,
            "attempt": window.attempts,
            "retries_max": self.retries_max,
            "retries_left": max(0, self.retries_max + 1 - window.attempts),
            "rework_until": rfc3339(int(window.rework_until)),
            "rework_seconds_left": max(0, int(window.rework_until - time.time())),
        }
