"""Fax send and receive on the ``fax`` engine (satsgate.engines.fax).

send-fax: the PDF is screened (its text layer and the cover text), hosted at a signed,
expiring URL on the node's public URL for the engine to fetch, and sent; the answer is
``{ success, faxId, status, status_url }``. The node's :class:`FaxDesk` follows the
fax through the engine's webhooks (``queued`` -> ``sending`` -> ``delivered`` or
``failed``) and settles it once: a delivered fax is charged, a failed one (or one not
delivered within :data:`DELIVERY_LIMIT_S`) is refunded in full. The status is free to
read: ``GET /api/l402/send-fax?faxId=`` and MCP ``get_fax_status``
(satsgate.operations.faxes); a restart follows the unsettled faxes again.

receive-fax leases one of the engine's inbound numbers to the payment for
:data:`LEASE_S` (:class:`FaxInbox`). Every fax that number receives during the lease is
fetched from the engine (bounded size, only from the provider's hosts), stored as a
file, and delivered: listed by ``GET /api/l402/receive-fax?inboxId=`` and MCP
``check_fax_inbox`` with fresh download links, and e-mailed (a link) to
``forwardEmail`` through the e-mail engine when the payer gave one. A fax to a number
no lease holds is not fetched at all.

Retention: a received fax's document (and its sender's number) is deleted
:data:`RECEIVED_RETENTION_S` after it arrived; lease rows go :data:`LEASE_RECORD_S`
after the lease ended. The PDF of a sent fax is served to the engine for
:data:`SEND_MEDIA_TTL_S` and removed by the file store's hourly cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import Field, ValidationInfo, field_validator

from satsgate.config.settings import Settings
from satsgate.domain.media import pdf_pages
from satsgate.domain.telephony import Destinations, from_context, served_number
from satsgate.engines import EngineError, Engines
from satsgate.engines.fax import FaxEngine, FaxRequest, FaxState, InboundFax
from satsgate.engines.mail import EmailEngine, OutgoingEmail
from satsgate.errors import ErrorCode, without_refund_secrets
from satsgate.files import FileStore
from satsgate.payouts.refunds import RefundService
from satsgate.services.base import DeskKey, FlatPrice, ServiceContext, ServiceResult
from satsgate.services.comms import screening
from satsgate.services.inputs.params import (
    InvalidField,
    MiB,
    ServiceParams,
    alias,
    b64_chars,
    check_email_address,
    decode_file,
    read_media,
)
from satsgate.store.faxes import FaxLease, FaxRepository, ReceivedFax, SentFax
from satsgate.store.rows import Payment

log = logging.getLogger(__name__)

SEND_PATH = "/api/l402/send-fax"
RECEIVE_PATH = "/api/l402/receive-fax"
SEND_MEDIA_TTL_S = 2 * 3600  # the engine fetches the PDF within this
DELIVERY_LIMIT_S = 3600  # a fax neither delivered nor failed by then is refunded
WAIT_STEP_S = 60.0
LEASE_S = 24 * 3600
# A number is not leased again until this long after its last lease ended: a sender
# who faxes late reaches nobody rather than the next payer.
REUSE_GAP_S = 6 * 3600
RECEIVED_RETENTION_S = 12 * 3600  # then the document and the sender's number are deleted
LEASE_RECORD_S = 30 * 86400
CLEANUP_EVERY_S = 600.0
RECEIVED_MAX_BYTES = 20 * 1024 * 1024
SCREEN_TEXT_CHARS = 20_000


# -- the paid calls' params ----------------------------------------------------------------

FAX_MAX_BYTES = 20 * MiB
FAX_MAX_PAGES = 50


class SendFaxParams(ServiceParams):
    faxNumber: str = Field(
        validation_alias=alias("faxNumber", "fax_number", "phone_number", "phoneNumber", "to"),
        description="E.164 fax number.",
    )
    documentBase64: str = Field(
        validation_alias=alias("documentBase64", "file", "document"),
        max_length=b64_chars(FAX_MAX_BYTES),
        description=f"PDF to send, base64, at most 20 MB and {FAX_MAX_PAGES} pages.",
    )
    coverText: str | None = Field(
        None, min_length=1, max_length=2000, validation_alias=alias("coverText", "cover_text")
    )

    _route = field_validator("faxNumber")(served_number)

    def check(self) -> int:
        data = decode_file(self.documentBase64, "documentBase64", FAX_MAX_BYTES)
        pages = read_media(data, "documentBase64", pdf_pages)
        if pages > FAX_MAX_PAGES:
            raise InvalidField("documentBase64", f"{pages} pages; at most {FAX_MAX_PAGES}")
        return pages


class ReceiveFaxParams(ServiceParams):
    """No callback_url: satsgate's callbacks report a job's end, and an inbox has no end
    but many faxes; poll it (free) or give forwardEmail."""

    country: str = Field(
        "US",
        min_length=2,
        max_length=2,
        description="ISO country code of the inbound number (a served country).",
    )
    forwardEmail: str | None = Field(
        None,
        validation_alias=alias("forwardEmail", "forward_email", "email"),
        description="Also e-mail each received fax (PDF) to this address.",
    )

    @field_validator("country")
    @classmethod
    def _served(cls, value: str, info: ValidationInfo) -> str:
        """A country the context's table serves (fails closed without one)."""
        code = value.upper()
        if code not in from_context(info).countries:
            raise ValueError(f"no inbound fax numbers in {value!r}")
        return code

    @field_validator("forwardEmail")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        return None if value is None else check_email_address(value)


def pdf_text(data: bytes, limit: int = SCREEN_TEXT_CHARS) -> str:
    """The PDF's text layer (what screening can read of a fax), at most ``limit``
    characters. Runs in the process pool."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    parts: list[str] = []
    size = 0
    for page in reader.pages:
        try:
            text = page.extract_text() or ""
        except Exception:  # a page pypdf cannot read has no text for the screen
            text = ""
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    return "\n".join(parts)[:limit]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- send-fax --------------------------------------------------------------------------------


async def send_fax(ctx: ServiceContext, params: SendFaxParams) -> ServiceResult:
    """Screen, host the PDF, send: ``{ success, faxId, status, status_url }``. The node's
    fax desk follows the fax to its end and settles it once: delivered is charged, failed
    (or not delivered within an hour) is refunded in full. Run again for the same payment
    (a released hold), it answers the fax already sent."""
    desk = desk_of(ctx)
    data = decode_file(params.documentBase64, "documentBase64", FAX_MAX_BYTES)
    pages = int(await asyncio.to_thread(params.checked))
    await screen_fax(ctx, params.faxNumber, data, params.coverText)
    existing = await desk.sent_for_payment(ctx.call_id)
    if existing is not None and existing.upstream_id is not None:
        return ServiceResult(desk.send_body(existing))
    stored = await ctx.files.save(data, "pdf", ttl_s=SEND_MEDIA_TTL_S)
    fax_id = existing.fax_id if existing is not None else "fax_" + secrets.token_urlsafe(16)
    request = FaxRequest(to=params.faxNumber, media_url=stored.url, pages=pages, reference=fax_id)

    async def send(engine: FaxEngine, _model: str | None) -> tuple[str, FaxState]:
        provider = desk.provider_of(engine)
        await desk.record_send(fax_id, ctx.call_id, provider, pages, FAX_SEND_PRICE.msat)
        return provider, await engine.send(request)

    try:
        provider, state = await ctx.engines.run("fax", FaxEngine, send)
    except EngineError as exc:
        await desk.mark_failed(fax_id, exc.message)
        raise
    record = await desk.sent(fax_id, provider, state)
    return ServiceResult(desk.send_body(record))


# The price of send-fax (its ServiceSpec's price, in comms/handlers.py), recorded with the fax.
FAX_SEND_PRICE = FlatPrice.of_sats(500, "fax-send")


async def screen_fax(ctx: ServiceContext, to: str, document: bytes, cover_text: str | None) -> None:
    """The communication screen (satsgate.services.comms.screening) over what a fax says: its
    cover text and its PDF's text layer (a scanned page without one has nothing to
    read). Raises HeldForReview (the gate holds the request) or RECIPIENT_OPTED_OUT."""
    text = await ctx.run_cpu(pdf_text, document)
    if cover_text:
        text = f"{cover_text}\n{text}"
    await screening.screen(ctx, screening.Outreach(channel="fax", recipients=(to,), text=text))


# -- receive-fax -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Number:
    number: str
    engine: FaxEngine


class FaxDesk:
    """The node's faxes: the sent ones followed to their end and settled, the inbound
    numbers, their leases and the faxes they received. One per app (``appkeys.FAXES``),
    handed to handlers (``ctx.desk(FAX_DESK)``) and free operations (``OperationEnv``)."""

    def __init__(
        self,
        engines: Engines,
        repo: FaxRepository,
        files: FileStore,
        settings: Settings,
        payments: Callable[[str], Awaitable[Payment | None]],
        refunds: RefundService,
        destinations: Destinations,
    ) -> None:
        self._engines = engines
        self._destinations = destinations  # the app's table: the country of a number
        self._repo = repo
        self._files = files
        self._settings = settings
        self._payments = payments
        self._refunds = refunds
        self._following: dict[str, asyncio.Task[None]] = {}
        self._numbers: dict[str, _Number] = {}
        for binding in engines.bindings("fax"):
            engine: FaxEngine = binding.engine  # type: ignore[assignment]
            for number in engine.inbound_numbers():
                self._numbers.setdefault(number, _Number(number, engine))
            engine.on_inbound(self._handler(engine))
        self._cleanup: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Retention, and the faxes a restart left unsettled followed again."""
        self._cleanup = asyncio.create_task(self._clean_periodically(), name="fax-desk")
        await self.follow_unsettled()

    async def follow_unsettled(self) -> int:
        """Follow every sent fax not settled yet that is not followed here: those of an
        instance that is gone for good, or whose following stopped. Another instance
        may be following one too: its status only moves forward and it settles once
        (``FaxRepository.update_send``, ``settle_send``). How many are followed here."""
        for fax in await self._repo.unsettled_sends():
            self._follow(fax)
        return len(self._following)

    async def close(self) -> None:
        tasks = [t for t in (self._cleanup, *self._following.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- sent faxes ------------------------------------------------------------------------

    def provider_of(self, engine: object) -> str:
        for binding in self._engines.bindings("fax"):
            if binding.engine is engine and binding.provider is not None:
                return binding.provider.name
        return ""

    def _engine(self, provider: str) -> FaxEngine | None:
        for binding in self._engines.bindings("fax"):
            if binding.provider is not None and binding.provider.name == provider:
                return cast(FaxEngine, binding.engine)
        return None

    async def sent_for_payment(self, payment_id: str) -> SentFax | None:
        return await self._repo.send_for_payment(payment_id)

    async def record_send(
        self, fax_id: str, payment_id: str, provider: str, pages: int, paid_msat: int
    ) -> None:
        now = int(time.time())
        await self._repo.create_send(
            SentFax(fax_id, payment_id, provider, None, "queued", pages, None, paid_msat,
                    None, now, now, None)
        )  # fmt: skip

    async def mark_failed(self, fax_id: str, reason: str) -> None:
        """The provider refused the fax: nothing was sent, the gate refunds the call."""
        now = int(time.time())
        if await self._repo.update_send(fax_id, status="failed", now=now, reason=reason):
            await self._repo.settle_send(fax_id, 0, now)

    async def sent(self, fax_id: str, provider: str, state: FaxState) -> SentFax:
        record = await self._repo.update_send(
            fax_id, status=state.status, now=int(time.time()), upstream_id=state.fax_id,
            provider=provider, pages=state.pages,
        )  # fmt: skip
        assert record is not None
        self._follow(record)
        return record

    def _follow(self, fax: SentFax) -> None:
        if fax.fax_id in self._following or fax.upstream_id is None:
            return
        task = asyncio.create_task(self._follow_to_end(fax), name=f"fax-{fax.fax_id}")
        self._following[fax.fax_id] = task
        task.add_done_callback(lambda _t: self._following.pop(fax.fax_id, None))

    async def _follow_to_end(self, fax: SentFax) -> None:
        """The fax's statuses until it is delivered or failed (or an hour passed), then
        its settlement."""
        try:
            engine = self._engine(fax.provider)
            record: SentFax | None = fax
            while record is not None and not record.final and engine is not None:
                left = fax.created_at + DELIVERY_LIMIT_S - time.time()
                if left <= 0:
                    record = await self._repo.update_send(
                        fax.fax_id, status="failed", now=int(time.time()),
                        reason="not delivered within an hour",
                    )  # fmt: skip
                    break
                try:
                    state = await engine.wait(str(fax.upstream_id), min(WAIT_STEP_S, left))
                except EngineError as exc:
                    log.info("fax %s: status unavailable (%s)", fax.fax_id, exc.code)
                    await asyncio.sleep(min(WAIT_STEP_S, max(1.0, left)))
                    continue
                record = await self._repo.update_send(
                    fax.fax_id, status=state.status, now=int(time.time()), pages=state.pages,
                    reason=state.failure_reason or None,
                )  # fmt: skip
            if engine is None:
                log.error("fax %s: its provider %s is gone; not followed", fax.fax_id, fax.provider)
                return
            if record is not None and record.final:
                await self._settle(record)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("following fax %s failed", fax.fax_id)

    async def _settle(self, fax: SentFax) -> None:
        """Once: a delivered fax is charged; a failed one refunded in full."""
        now = int(time.time())
        if fax.status == "delivered":
            await self._repo.settle_send(fax.fax_id, fax.paid_msat, now)
            return
        if not await self._repo.settle_send(fax.fax_id, 0, now):
            return
        payment = await self._payments(fax.payment_id)
        if payment is None:
            log.error("fax %s: its payment is gone; not refunded", fax.fax_id)
            return
        reason = f"fax not delivered: {fax.reason or 'failed'}"
        await self._refunds.refund_spent(payment, payment.amount_msat, reason)

    def send_body(self, fax: SentFax) -> dict[str, Any]:
        """The send-fax answer: ``{ success, faxId, status, status_url }``."""
        return {
            "success": True,
            "faxId": fax.fax_id,
            "status": fax.status,
            "status_url": status_url(self._settings.public_base_url, fax.fax_id),
        }

    async def status(self, fax_id: str) -> SentFax | None:
        return await self._repo.get_send(fax_id)

    async def status_body(self, fax: SentFax, payer: bool) -> dict[str, Any]:
        """The free status read; a failed fax's refund link only for its payer."""
        body = self.send_body(fax)
        body.update(final=fax.final, pages=fax.pages, updated_at=_iso(fax.updated_at))
        if fax.status == "failed":
            body["error"] = f"The fax could not be delivered ({fax.reason or 'failed'})."
            if fax.settled_at is not None:
                refund = await self._refunds.latest_refund(fax.payment_id)
                if refund is not None:
                    body["refund"] = (
                        refund if payer else without_refund_secrets({"refund": refund})["refund"]
                    )
        return body

    def countries(self) -> set[str]:
        found = set()
        for number in self._numbers:
            with contextlib.suppress(ValueError):
                found.add(self._destinations.destination(number).country)
        return found

    async def lease(
        self, payment_id: str, country: str, forward_email: str | None
    ) -> FaxLease | None:
        candidates = []
        for number in self._numbers:
            with contextlib.suppress(ValueError):
                if self._destinations.destination(number).country == country:
                    candidates.append(number)
        return await self._repo.lease(
            inbox_id=secrets.token_urlsafe(18),
            payment_id=payment_id,
            candidates=candidates,
            forward_email=forward_email,
            now=int(time.time()),
            period_s=LEASE_S,
            reuse_gap_s=REUSE_GAP_S,
        )

    async def lease_body(self, lease: FaxLease) -> dict[str, Any]:
        """What the payer sees of an inbox: number, period and the faxes received."""
        now = time.time()
        faxes = []
        for fax in await self._repo.received(lease.inbox_id):
            entry: dict[str, Any] = {
                "faxId": fax.fax_id,
                "receivedAt": _iso(fax.received_at),
                "pages": fax.pages,
                "status": fax.status,
            }
            if fax.sender:
                entry["from"] = fax.sender
            left = fax.received_at + RECEIVED_RETENTION_S - now
            if fax.file_name and left > 60:
                entry["url"] = self._files.url_for(fax.file_name, int(left))
                entry["expiresAt"] = _iso(fax.received_at + RECEIVED_RETENTION_S)
            elif fax.status == "received":
                entry["status"] = "deleted"  # retention removed the document
            faxes.append(entry)
        return {
            "success": True,
            "inboxId": lease.inbox_id,
            "faxNumber": lease.number,
            "expiresAt": _iso(lease.expires_at),
            "active": lease.expires_at > now,
            "poll_url": poll_url(self._settings.public_base_url, lease.inbox_id),
            "faxes": faxes,
        }

    async def get(self, inbox_id: str) -> FaxLease | None:
        return await self._repo.get_lease(inbox_id)

    def _handler(self, engine: FaxEngine) -> Any:
        async def handle(fax: InboundFax) -> None:
            await self.received(engine, fax)

        return handle

    async def received(self, engine: FaxEngine, fax: InboundFax) -> None:
        """An inbound fax: stored and delivered when a lease holds its number, else
        dropped without fetching it."""
        lease = await self._repo.lease_at(fax.to, int(fax.received_at))
        if lease is None:
            log.info("inbound fax to a number no lease holds: not fetched")
            return
        if await self._repo.knows(fax.fax_id):
            return
        file_name: str | None = None
        status = "received"
        try:
            data = await engine.download(fax, RECEIVED_MAX_BYTES)
            ext = "pdf" if data[:5] == b"%PDF-" else "tiff" if data[:2] in (b"II", b"MM") else ""
            if not ext:
                raise EngineError(ErrorCode.SERVICE_ERROR, "The received fax is not a PDF or TIFF.")
            stored = await self._files.save(data, ext, ttl_s=RECEIVED_RETENTION_S)
            file_name = stored.name
        except EngineError as exc:
            log.warning("inbound fax for an inbox could not be stored: %s", exc.message)
            status = "unavailable"
        record = ReceivedFax(
            fax_id=secrets.token_urlsafe(12),
            inbox_id=lease.inbox_id,
            sender=fax.sender,
            pages=fax.pages,
            file_name=file_name,
            status=status,
            received_at=int(fax.received_at),
        )
        if not await self._repo.add_received(record, fax.fax_id):
            return
        if lease.forward_email and file_name is not None:
            await self._forward(lease, record, file_name)

    async def _forward(self, lease: FaxLease, fax: ReceivedFax, file_name: str) -> None:
        if not self._engines.available("email"):
            return
        url = self._files.url_for(file_name, RECEIVED_RETENTION_S)
        pages = f"{fax.pages} page(s)" if fax.pages else "a fax"
        sender = f" from {fax.sender}" if fax.sender else ""
        message = OutgoingEmail(
            to=(str(lease.forward_email),),
            subject=f"Fax received on {lease.number}",
            text=(
                f"{pages}{sender} arrived on {lease.number} at {_iso(fax.received_at)}.\n\n"
                f"Download (PDF, deleted after {RECEIVED_RETENTION_S // 3600} hours):\n{url}\n\n"
                f"All faxes of this number: "
                f"{poll_url(self._settings.public_base_url, lease.inbox_id)}\n"
            ),
            from_name="Fax inbox",
        )
        try:
            await self._engines.run("email", EmailEngine, lambda e, _m: e.send(message))
        except EngineError as exc:
            log.warning("forwarding a received fax by e-mail failed: %s", exc.code)

    async def clean(self, now: float | None = None) -> int:
        """Retention: delete received documents past their time and old lease rows."""
        at = time.time() if now is None else now
        names = await self._repo.expire_documents(int(at - RECEIVED_RETENTION_S))
        for name in names:
            with contextlib.suppress(OSError):
                (self._files.root / name).unlink(missing_ok=True)
        await self._repo.prune(int(at - LEASE_RECORD_S))
        return len(names)

    async def _clean_periodically(self) -> None:
        while True:
            try:
                await self.clean()
            except Exception:
                log.exception("fax inbox cleanup failed")
            await asyncio.sleep(CLEANUP_EVERY_S)


# The fax desk in a handler's context: ``ctx.desk(FAX_DESK)``.
FAX_DESK: DeskKey[FaxDesk] = DeskKey("fax desk")


def poll_url(base_url: str, inbox_id: str) -> str:
    return f"{base_url}{RECEIVE_PATH}?inboxId={inbox_id}"


def status_url(base_url: str, fax_id: str) -> str:
    return f"{base_url}{SEND_PATH}?faxId={fax_id}"


def desk_of(ctx: ServiceContext) -> FaxDesk:
    """The app's fax desk a handler was given; SERVICE_ERROR outside an app."""
    desk = ctx.desk(FAX_DESK)
    if desk is None:
        raise EngineError(ErrorCode.SERVICE_ERROR, "The fax desk is not running on this node.")
    return desk


async def receive_fax(ctx: ServiceContext, params: ReceiveFaxParams) -> ServiceResult:
    """Lease an inbound number for 24 hours: { success, inboxId, faxNumber, expiresAt,
    poll_url, faxes }."""
    inbox = desk_of(ctx)
    if params.forwardEmail and not ctx.engines.available("email"):
        raise EngineError(
            ErrorCode.INVALID_INPUT,
            "This node cannot forward faxes by e-mail; leave out forwardEmail and poll.",
            may_fall_back=False,
        )
    lease = await inbox.lease(ctx.call_id, params.country, params.forwardEmail)
    if lease is None:
        raise EngineError(
            ErrorCode.SERVICE_ERROR,
            f"No inbound fax number in {params.country} is free right now; the payment was "
            "refunded. Try again later or another country.",
            may_fall_back=False,
        )
    return ServiceResult(await inbox.lease_body(lease))
