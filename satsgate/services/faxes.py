"""Fax send and receive on the ``fax`` engine (satsgate.engines.fax).

send-fax is a job (``jobType: "fax"``; the job id is the fax's ``faxId``): the PDF is
hosted at a signed URL on the node's public URL for the engine to fetch, screened,
sent, and the job follows the engine's status (``queued`` -> ``sending`` ->
``delivered``) until the fax is delivered (COMPLETED) or failed (FAILED, refunded in
full). The status is free to read: ``GET /api/l402/send-fax?faxId=`` and MCP
``get_fax_status`` (satsgate.operations.faxes), or the job-status endpoint.

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
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from satsgate.config import Settings
from satsgate.engines import EngineError, Engines
from satsgate.engines.fax import FaxEngine, FaxRequest, FaxState, InboundFax
from satsgate.engines.mail import EmailEngine, OutgoingEmail
from satsgate.files import FileStore
from satsgate.services import screening
from satsgate.services.base import ServiceContext, ServiceResult
from satsgate.services.common import decode_file
from satsgate.services.telephony import destination
from satsgate.store.faxes import FaxLease, FaxRepository, ReceivedFax

if TYPE_CHECKING:
    from satsgate.services.comms import ReceiveFaxParams, SendFaxParams

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


def _progress(status: str) -> float:
    return {"queued": 10.0, "sending": 50.0}.get(status, 100.0)


async def send_fax(ctx: ServiceContext, params: SendFaxParams) -> ServiceResult:
    """Send, then follow the fax to its end (the job's handler; resumed after a restart
    from its saved state, waiting for the same fax, never sending it twice)."""
    saved = await ctx.job_state.load() or {}
    bindings = ctx.engines.bindings("fax")
    if saved.get("fax_id") and isinstance(saved.get("binding"), int):
        index = int(saved["binding"])
        if not 0 <= index < len(bindings):
            raise EngineError(
                "SERVICE_ERROR", "The fax engine changed during a restart.", may_fall_back=False
            )
        engine: FaxEngine = bindings[index].engine  # type: ignore[assignment]
        state = FaxState(str(saved["fax_id"]), saved.get("status", "queued"))
        pages = int(saved.get("pages") or 0)
        started = float(saved.get("started") or time.time())
    else:
        from satsgate.services.comms import FAX_MAX_BYTES

        data = decode_file(params.documentBase64, "documentBase64", FAX_MAX_BYTES)
        pages = int(await asyncio.to_thread(params.checked))
        await screen_fax(ctx, params.faxNumber, data, params.coverText)
        stored = await ctx.files.save(data, "pdf", ttl_s=SEND_MEDIA_TTL_S)
        request = FaxRequest(
            to=params.faxNumber, media_url=stored.url, pages=pages, reference=ctx.call_id
        )
        used: list[object] = []

        async def send(engine: FaxEngine, _model: str | None) -> FaxState:
            sent = await engine.send(request)
            used.append(engine)
            return sent

        state = await ctx.engines.run("fax", FaxEngine, send)
        engine = used[0]  # type: ignore[assignment]
        index = next(i for i, b in enumerate(bindings) if b.engine is engine)
        started = time.time()
        await ctx.job_state.save(
            {"fax_id": state.fax_id, "binding": index, "status": state.status,
             "pages": pages, "started": started}
        )  # fmt: skip
    ctx.progress(_progress(state.status), state.status)
    while not state.final:
        left = started + DELIVERY_LIMIT_S - time.time()
        if left <= 0:
            raise EngineError(
                "TIMEOUT",
                "The fax was not delivered within an hour; the payment was refunded.",
                may_fall_back=False,
            )
        changed = await engine.wait(state.fax_id, min(WAIT_STEP_S, left))
        if changed.status != state.status:
            await ctx.job_state.save(
                {"fax_id": changed.fax_id, "binding": index, "status": changed.status,
                 "pages": pages, "started": started}
            )  # fmt: skip
            ctx.progress(_progress(changed.status), changed.status)
        state = changed
    if state.status == "failed":
        reason = state.failure_reason or "not delivered"
        raise EngineError(
            "SERVICE_ERROR",
            f"The fax could not be delivered ({reason}); the payment was refunded.",
            may_fall_back=False,
            extra={"fax_status": "failed"},
        )
    return ServiceResult({"success": True, "status": "delivered", "pages": state.pages or pages})


async def screen_fax(ctx: ServiceContext, to: str, document: bytes, cover_text: str | None) -> None:
    """The communication screen (satsgate.services.screening) over what a fax says: its
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


class FaxInbox:
    """The node's inbound fax numbers, their leases and the faxes they received."""

    def __init__(
        self, engines: Engines, repo: FaxRepository, files: FileStore, settings: Settings
    ) -> None:
        self._engines = engines
        self._repo = repo
        self._files = files
        self._settings = settings
        self._numbers: dict[str, _Number] = {}
        for binding in engines.bindings("fax"):
            engine: FaxEngine = binding.engine  # type: ignore[assignment]
            for number in engine.inbound_numbers():
                self._numbers.setdefault(number, _Number(number, engine))
            engine.on_inbound(self._handler(engine))
        self._cleanup: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._cleanup = asyncio.create_task(self._clean_periodically(), name="fax-inbox")

    async def close(self) -> None:
        if self._cleanup is not None:
            self._cleanup.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cleanup

    def countries(self) -> set[str]:
        found = set()
        for number in self._numbers:
            with contextlib.suppress(ValueError):
                found.add(destination(number).country)
        return found

    async def lease(
        self, payment_id: str, country: str, forward_email: str | None
    ) -> FaxLease | None:
        candidates = []
        for number in self._numbers:
            with contextlib.suppress(ValueError):
                if destination(number).country == country:
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
                raise EngineError("SERVICE_ERROR", "The received fax is not a PDF or TIFF.")
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


def poll_url(base_url: str, inbox_id: str) -> str:
    return f"{base_url}{RECEIVE_PATH}?inboxId={inbox_id}"


# The inbox of each app, by its engine registry (app-scoped; the handlers and the free
# operations reach it through the engines they are given).
_INBOXES: weakref.WeakKeyDictionary[Engines, FaxInbox] = weakref.WeakKeyDictionary()


def attach_inbox(
    engines: Engines, repo: FaxRepository, files: FileStore, settings: Settings
) -> FaxInbox:
    inbox = FaxInbox(engines, repo, files, settings)
    _INBOXES[engines] = inbox
    return inbox


def inbox_for(engines: Engines) -> FaxInbox:
    inbox = _INBOXES.get(engines)
    if inbox is None:
        raise EngineError("SERVICE_ERROR", "The fax inbox is not running on this node.")
    return inbox


async def receive_fax(ctx: ServiceContext, params: ReceiveFaxParams) -> ServiceResult:
    """Lease an inbound number for 24 hours: { success, inboxId, faxNumber, expiresAt,
    poll_url, faxes }."""
    inbox = inbox_for(ctx.engines)
    if params.forwardEmail and not ctx.engines.available("email"):
        raise EngineError(
            "INVALID_INPUT",
            "This node cannot forward faxes by e-mail; leave out forwardEmail and poll.",
            may_fall_back=False,
        )
    lease = await inbox.lease(ctx.call_id, params.country, params.forwardEmail)
    if lease is None:
        raise EngineError(
            "SERVICE_ERROR",
            f"No inbound fax number in {params.country} is free right now; the payment was "
            "refunded. Try again later or another country.",
            may_fall_back=False,
        )
    return ServiceResult(await inbox.lease_body(lease))
