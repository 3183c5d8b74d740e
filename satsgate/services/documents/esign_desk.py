"""The e-signature desk: follows every request e-signature sent until its signed copy is
in the customer's mailbox, or the request ended without one.

- The handler records each request it sent (:meth:`ESignDesk.record`), with the
  customer's address (the only personal data kept; the document is never stored).
- The provider's verified webhook (``DOCUMENT_COMPLETED`` ...) reaches
  :meth:`ESignDesk.on_event`; the scheduler's :meth:`ESignDesk.sweep` looks at pending
  requests every ``poll_interval_s`` of their provider, for a node whose webhook was
  lost, and the free status read looks at a pending one when it was not looked at for
  a while. Whichever sees the completion first moves the request ``pending -> signed``
  (one conditional UPDATE).
- Delivery: a ``signed`` request is claimed by one sender (a lease), the signed PDF is
  fetched from the provider and e-mailed to the customer as an attachment through the
  ``email`` engine, and the request is marked ``done`` (its address cleared) — once.
  A failed attempt (the download or the e-mail) is retried on the schedule
  RETRY_DELAYS_S (about nine hours in all); after the last the request is
  ``undeliverable`` and the operator's log says so. The payment is never touched
  again: the call was charged once, when the request was sent (the signing happened;
  a failed delivery is not refunded automatically). A sender that dies mid-delivery
  leaves its lease to run out and the sweep sends again: in that one case the
  customer may get the copy twice, never zero times.
- A request nobody completed within MAX_WATCH_S (30 days) is ``expired`` and no longer
  followed (the customer's address goes with it: the retention rule of 30 days).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from satsgate.config.settings import Settings
from satsgate.engines import EngineError, Engines
from satsgate.engines.esign import EnvelopeEvent, EnvelopeState, ESignEngine, SigningSent
from satsgate.engines.mail import Attachment, EmailEngine, OutgoingEmail
from satsgate.errors import ApiError, ErrorCode
from satsgate.services.base import DeskKey
from satsgate.store.esign import ESignRecord, ESignRepository

log = logging.getLogger(__name__)

STATUS_PATH = "/api/l402/e-signature"
DAY = 86400
MAX_WATCH_S = 30 * DAY
# Delivery attempts of the signed copy after the first: 1 min, 5 min, 30 min, 2 h, 6 h.
RETRY_DELAYS_S = (60, 300, 1800, 7200, 21600)
DELIVERY_LEASE_S = 600  # one sender's claim; past it (a sender that died) the sweep retries
STATUS_REFRESH_S = 30  # the free status read looks at the provider at most this often
MAX_SIGNED_PDF_BYTES = 40 * 1024 * 1024
ENGINE_GONE_RECHECK_S = 3600  # the provider that holds a request is no longer configured

_MESSAGES = {
    "pending": "Waiting for signatures ({signed} of {total} signed). The signed copy is "
    "e-mailed to the customer once everyone has signed.",
    "signed": "Everyone has signed; the signed copy is being e-mailed to the customer.",
    "delivering": "Everyone has signed; the signed copy is being e-mailed to the customer.",
    "done": "Everyone has signed; the signed copy was e-mailed to the customer.",
    "rejected": "A signer declined to sign; there is no signed copy.",
    "cancelled": "The signing request was cancelled; there is no signed copy.",
    "expired": "The signing request expired before everyone signed; there is no signed copy.",
    "undeliverable": "Everyone has signed, but the signed copy could not be e-mailed to the "
    "customer after several attempts.",
}


def new_request_id() -> str:
    return "sig_" + secrets.token_urlsafe(18)


def status_url(base_url: str, request_id: str) -> str:
    return f"{base_url}{STATUS_PATH}?requestId={quote(request_id)}"


class ESignDesk:
    def __init__(
        self,
        repo: ESignRepository,
        engines: Engines,
        settings: Settings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.repo = repo
        self.engines = engines
        self.settings = settings
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    def _now(self) -> int:
        return int(self._clock())

    # -- wiring ---------------------------------------------------------------------------

    def attach(self) -> None:
        """Listen to the webhooks of every e-signature engine of this node."""
        for binding in self.engines.bindings("esign"):
            # Looked up on the class: a method it defines, not whatever a proxy answers.
            if callable(getattr(type(binding.engine), "on_event", None)):
                binding.engine.on_event(self.on_event)  # type: ignore[attr-defined]

    @property
    def sweep_interval_s(self) -> float:
        """How often the scheduler runs :meth:`sweep`: the shortest poll interval of the
        engines, within 1 s and 60 s."""
        intervals = [
            float(value)
            for b in self.engines.bindings("esign")
            if isinstance(value := getattr(b.engine, "poll_interval_s", None), int | float)
        ]
        return min(60.0, max(1.0, min(intervals, default=60.0)))

    async def close(self) -> None:
        """Shutdown: deliveries under way finish or are cut (their lease runs out and a
        later sweep sends them)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _engine(self, provider: str) -> ESignEngine | None:
        for binding in self.engines.bindings("esign"):
            if getattr(binding.engine, "source", None) == provider:
                return binding.engine  # type: ignore[return-value]
        return None

    def _poll_interval(self, provider: str) -> int:
        engine = self._engine(provider)
        return int(engine.poll_interval_s) if engine is not None else ENGINE_GONE_RECHECK_S

    # -- the handler's side ---------------------------------------------------------------

    async def record(
        self,
        *,
        request_id: str,
        payment_id: str,
        sent: SigningSent,
        customer_email: str,
        signers_total: int,
    ) -> None:
        now = self._now()
        await self.repo.create(
            request_id=request_id,
            payment_id=payment_id,
            provider=sent.source,
            envelope_id=sent.envelope_id,
            customer_email=customer_email,
            signers_total=signers_total,
            next_check_at=now + self._poll_interval(sent.source),
            now=now,
        )

    # -- what moves a request on ----------------------------------------------------------

    async def on_event(self, event: EnvelopeEvent) -> None:
        """A verified webhook: the request ended at the provider."""
        record = await self.repo.find(event.source, event.envelope_id)
        if record is None:
            return  # not one of ours (or created by hand in the provider's app)
        await self._apply(record, event.status, None, background=True)

    async def _apply(
        self, record: ESignRecord, status: str, signed: int | None, *, background: bool
    ) -> None:
        now = self._now()
        if status == "completed":
            if await self.repo.mark_signed(record.request_id, record.signers_total, now):
                log.info("e-signature %s: everyone signed", record.request_id)
            if background:  # a webhook: answer the provider now, deliver meanwhile
                self._spawn(self.deliver(record.request_id))
            else:
                await self.deliver(record.request_id)
        elif status in ("rejected", "cancelled", "expired"):
            if await self.repo.end(record.request_id, status, now):
                log.info("e-signature %s: %s", record.request_id, status)
        elif signed is not None:
            await self.repo.checked(
                record.request_id, signed, now + self._poll_interval(record.provider), now
            )

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work, name="esign-deliver")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def look(self, record: ESignRecord, *, background: bool = False) -> None:
        """Ask the provider about a pending request (the poll); ``background``: a
        completion's delivery runs on its own (the status read answers meanwhile)."""
        now = self._now()
        if now - record.created_at > MAX_WATCH_S:
            await self.repo.end(record.request_id, "expired", now, "not completed in 30 days")
            return
        engine = self._engine(record.provider)
        if engine is None:
            await self.repo.checked(
                record.request_id, record.signers_signed, now + ENGINE_GONE_RECHECK_S, now
            )
            return
        try:
            state: EnvelopeState = await engine.envelope(record.envelope_id)
        except EngineError as exc:
            log.warning("e-signature %s: status check failed (%s)", record.request_id, exc.code)
            await self.repo.checked(
                record.request_id, record.signers_signed, now + int(engine.poll_interval_s), now
            )
            return
        await self._apply(record, state.status, state.signed, background=background)

    async def sweep(self) -> None:
        """The scheduler's round: due pending requests are looked at, due deliveries
        (new, retried, or left by a sender that died) are made."""
        for record in await self.repo.due(self._now()):
            try:
                if record.status == "pending":
                    await self.look(record)
                else:
                    await self.deliver(record.request_id)
            except Exception:
                log.exception("e-signature %s: the sweep failed on it", record.request_id)

    async def deliver(self, request_id: str) -> None:
        """Fetch the signed PDF and e-mail it to the customer, once (the claim)."""
        now = self._now()
        record = await self.repo.claim(request_id, DELIVERY_LEASE_S, now)
        if record is None:
            return  # delivered, being delivered, or not due
        try:
            engine = self._engine(record.provider)
            if engine is None:
                raise EngineError(
                    ErrorCode.SERVICE_ERROR, "the signing provider is no longer configured"
                )
            if not record.customer_email:
                raise EngineError(ErrorCode.SERVICE_ERROR, "no customer address is kept")
            pdf = await engine.signed_pdf(record.envelope_id, MAX_SIGNED_PDF_BYTES)
            message = OutgoingEmail(
                to=(record.customer_email,),
                subject="Your signed document",
                text=(
                    "Everyone has signed the document you sent for signature; the signed "
                    f"copy is attached.\n\nRequest: {record.request_id}\n"
                ),
                attachments=(Attachment("signed.pdf", "application/pdf", pdf),),
            )
            await self.engines.run("email", EmailEngine, lambda email, _model: email.send(message))
        except EngineError as exc:
            done = self._now()
            attempt = record.attempts  # this one included
            retry_at = (
                done + RETRY_DELAYS_S[attempt - 1] if attempt <= len(RETRY_DELAYS_S) else None
            )
            await self.repo.delivery_failed(
                request_id, f"{exc.code}: {exc.message}", retry_at, done
            )
            if retry_at is None:
                log.error(
                    "e-signature %s: the signed copy could not be e-mailed after %d attempts (%s)",
                    request_id,
                    attempt,
                    exc.code,
                )
            else:
                log.warning(
                    "e-signature %s: delivery attempt %d failed (%s); retrying",
                    request_id,
                    attempt,
                    exc.code,
                )
            return
        await self.repo.delivered(request_id, self._now())
        log.info("e-signature %s: signed copy e-mailed", request_id)

    # -- the free status read -------------------------------------------------------------

    async def status(self, request_id: str) -> dict[str, Any]:
        record = await self.repo.get(request_id)
        if record is None:
            raise ApiError(
                ErrorCode.SIGNING_REQUEST_NOT_FOUND, "No e-signature request with this requestId."
            )
        if record.status == "pending" and self._now() - record.updated_at >= STATUS_REFRESH_S:
            await self.look(record, background=True)
            record = await self.repo.get(request_id) or record
        return self.body(record)

    def body(self, record: ESignRecord) -> dict[str, Any]:
        signed = record.signers_total if record.completed_at else record.signers_signed
        body: dict[str, Any] = {
            "success": True,
            "requestId": record.request_id,
            "status": "signed" if record.status == "delivering" else record.status,
            "final": record.final,
            "signers": record.signers_total,
            "signed": signed,
            "message": _MESSAGES[record.status].format(signed=signed, total=record.signers_total),
            "created_at": record.created_at,
            "completed_at": record.completed_at,
            "delivered_at": record.delivered_at,
            "status_url": status_url(self.settings.public_base_url, record.request_id),
        }
        return body


# The e-signature desk in a handler's context: ``ctx.desk(ESIGN_DESK)``.
ESIGN_DESK: DeskKey[ESignDesk] = DeskKey("e-signature desk")
