"""Provider kind ``documenso``: e-signature (engine ``esign``) on Documenso's v2 API.

::

    [providers.documenso]
    kind = "documenso"
    base_url = "https://app.documenso.com/api/v2"   # default; a self-hosted instance: its /api/v2
    api_key_env = "DOCUMENSO_API_KEY"                # or api_key = "api_..."
    webhook_secret_env = "DOCUMENSO_WEBHOOK_SECRET"  # or webhook_secret = "..."
    timeout_s = 30                                   # optional: per HTTP request
    poll_interval_s = 900                            # optional: how often a pending request
                                                     # is looked at (a webhook may be lost)
    signature_page = "last"                          # optional: or "first"
    api_version = 2                                  # optional: 1 for an instance without
                                                     # v2 envelopes (base_url then its /api/v1)

    [engines]
    esign = "documenso"

Documenso's webhook (team settings, event DOCUMENT_COMPLETED, and DOCUMENT_REJECTED,
DOCUMENT_CANCELLED, RECIPIENT_EXPIRED if wanted) points at
``{public_base_url}/api/webhooks/documenso/<NAME>`` with the same secret. Without a
secret every webhook is refused (403) and requests are followed by polling alone.

The wire (docs/providers.md section 9; documenso/documenso v2.17.0):

- ``POST /envelope/create`` (multipart: part ``payload``, JSON text with the title,
  ``externalId``, recipients and their fields, ``meta``; part ``files``, the PDF) ->
  ``{"id": "envelope_..."}``; one SIGNATURE field per signer on the last page, in a
  two-column grid at the bottom (positions are percentages of the page);
- ``POST /envelope/distribute`` ``{"envelopeId"}``: the signers are e-mailed (DRAFT ->
  PENDING). A failure there withdraws the draft (``POST /envelope/delete``) unless the
  envelope turns out to be PENDING already;
- ``GET /envelope/{id}``: ``status`` and ``recipients[].signingStatus``, and
  ``envelopeItems[].id`` (the uploaded files);
- ``GET /envelope/item/{envelopeItemId}/download?version=signed``: the signed PDF
  (``application/pdf``). Not in providers.md: the route is documenso/documenso
  ``apps/remix/server/api/download/download.ts`` (``downloadRoute``, mounted at
  ``/api/v2`` in ``apps/remix/server/router.ts``; the tRPC twin
  ``packages/trpc/server/envelope-router/download-envelope-item.types.ts`` documents
  ``version``: "signed" returns the completed document with all signatures and the
  audit trail). It takes the same ``Authorization: api_...`` header;
- webhooks: ``X-Documenso-Secret: <secret>`` (plain, compared in constant time), JSON
  ``{"event": "DOCUMENT_COMPLETED", "payload": {"envelopeId": "envelope_...", ...}}``
  (``envelopeId``: ``packages/lib/types/webhook-payload.ts``).

Checked against the same tree: ``POST /envelope/delete`` ``{"envelopeId"}``
(``envelope-router/delete-envelope.types.ts``); field positions and sizes are
percentages 0..100, ``page`` from 1, ``fieldMeta`` optional for SIGNATURE
(``packages/lib/types/field.ts``, ``field-meta.ts``).

v1 (``api_version = 1``; deprecated, for instances without envelopes; providers.md
section 9 and ``packages/api/v1/{contract,schema}.ts``): ``POST /documents`` (recipients
with ``signingOrder``) -> ``uploadUrl`` + ``documentId``; ``PUT`` the PDF to the presigned
``uploadUrl`` (never with the API key); ``POST /documents/{id}/fields`` (``recipientId``,
``type``, ``pageNumber``, ``pageX``/``pageY``/``pageWidth``/``pageHeight`` in percent);
``POST /documents/{id}/send`` ``{"sendEmail": true}``; ``GET /documents/{id}``;
``GET /documents/{id}/download`` -> ``{"downloadUrl"}`` (fetched without the key);
``DELETE /documents/{id}``. Webhooks name the document by its number (``payload.id``).
v1's upload and download URLs are presigned S3 URLs: it needs an instance with S3
storage (``packages/api/v1/implementation.ts`` refuses downloads otherwise); v2 does not.

Auth: ``Authorization: <api key>`` (Documenso also strips a ``Bearer `` prefix).
Errors never name the provider, its URL or the key.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import httpx

from satsgate.constant_time import texts_equal
from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.esign import (
    EnvelopeEvent,
    EnvelopeState,
    EnvelopeStatus,
    EventListener,
    SignerState,
    SignerStatus,
    SigningRequest,
    SigningSent,
)
from satsgate.engines.providers.upstream import cause_of, check_options, retry_after_whole_s
from satsgate.engines.registry import EngineDeps
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

KIND = "documenso"
DEFAULT_BASE_URL = "https://app.documenso.com/api/v2"
DEFAULT_BASE_URL_V1 = "https://app.documenso.com/api/v1"
DEFAULT_POLL_INTERVAL_S = 900.0
_KNOWN_OPTIONS = frozenset(
    {"webhook_secret", "webhook_secret_env", "poll_interval_s", "signature_page", "api_version"}
)
MAX_WEBHOOK_BYTES = 1024 * 1024

_STATUS: Mapping[str, EnvelopeStatus] = {
    "DRAFT": "pending",
    "PENDING": "pending",
    "COMPLETED": "completed",
    "REJECTED": "rejected",
    "CANCELLED": "cancelled",
}
_SIGNING: Mapping[str, SignerStatus] = {
    "NOT_SIGNED": "pending",
    "SIGNED": "signed",
    "REJECTED": "rejected",
}
# Webhook events that end a request; the others (sent, opened, signed by one) are noted
# by the poll's look at the envelope, nothing to do here.
_EVENTS: Mapping[str, EnvelopeStatus] = {
    "DOCUMENT_COMPLETED": "completed",
    "DOCUMENT_REJECTED": "rejected",
    "DOCUMENT_CANCELLED": "cancelled",
    "RECIPIENT_EXPIRED": "expired",
}

# Signature fields: two columns at the bottom of the last page, up to five rows
# (ten signers), in percent of the page.
FIELD_W, FIELD_H = 35.0, 6.0
_COLUMNS_X = (8.0, 55.0)
_BOTTOM_Y, _ROW_STEP = 88.0, 8.0


def _unexpected() -> EngineError:
    return EngineError(
        ErrorCode.SERVICE_ERROR, "The signing service answered something unexpected."
    )


def _not_uploaded() -> EngineError:
    return EngineError(ErrorCode.SERVICE_ERROR, "The document could not be uploaded.")


def signature_field(index: int, page: int) -> dict[str, Any]:
    """Signer ``index``'s SIGNATURE field on ``page`` (1-based), on file 0."""
    return {
        "identifier": 0,
        "type": "SIGNATURE",
        "page": page,
        "positionX": _COLUMNS_X[index % 2],
        "positionY": _BOTTOM_Y - (index // 2) * _ROW_STEP,
        "width": FIELD_W,
        "height": FIELD_H,
    }


def _secret(config: ProviderConfig, env: Mapping[str, str], where: str) -> str:
    opts = config.options
    secret, secret_env = opts.get("webhook_secret"), opts.get("webhook_secret_env")
    if secret is not None and secret_env is not None:
        raise EngineConfigError(f"{where}: give webhook_secret or webhook_secret_env, not both")
    if secret_env is not None:
        if not isinstance(secret_env, str) or secret_env not in env:
            raise EngineConfigError(
                f"{where}: webhook_secret_env names {secret_env!r}, which is not set"
            )
        secret = env[secret_env]
    if secret is not None and not isinstance(secret, str):
        raise EngineConfigError(f"{where}: webhook_secret must be a string")
    return secret or ""


class DocumensoProvider:
    """One ``[providers.NAME] kind = "documenso"`` table; serves the engine ``esign`` and
    receives the webhooks of ``/api/webhooks/documenso/NAME``."""

    webhook_kind = KIND

    def __init__(
        self,
        config: ProviderConfig,
        deps: EngineDeps,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        where = f"[providers.{config.name}]"
        check_options(config, _KNOWN_OPTIONS)
        if not config.api_key:
            raise EngineConfigError(f"{where} needs api_key or api_key_env (a Documenso API token)")
        poll = config.options.get("poll_interval_s", DEFAULT_POLL_INTERVAL_S)
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not 1 <= poll <= 86400:
            raise EngineConfigError(f"{where}: poll_interval_s must be 1 to 86400 seconds")
        page = config.options.get("signature_page", "last")
        if page not in ("last", "first"):
            raise EngineConfigError(f'{where}: signature_page is "last" or "first"')
        version = config.options.get("api_version", 2)
        if version not in (1, 2) or isinstance(version, bool):
            raise EngineConfigError(f"{where}: api_version is 2 (envelopes) or 1 (documents)")
        self.api_version = int(version)
        self.config = config
        self.source = config.name
        self.poll_interval_s = float(poll)
        self.signature_page = str(page)
        default_url = DEFAULT_BASE_URL if self.api_version == 2 else DEFAULT_BASE_URL_V1
        self.base_url = (config.base_url or default_url).rstrip("/")
        self._webhook_secret = _secret(config, env, where)
        self._listeners: list[EventListener] = []
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": config.api_key},
            timeout=httpx.Timeout(config.timeout_s, connect=min(10.0, config.timeout_s)),
            follow_redirects=False,
        )
        # v1's presigned upload and download URLs: never sent the API key.
        self.files = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s, connect=min(10.0, config.timeout_s)),
            follow_redirects=False,
        )

    def engine(self, name: str) -> object | None:
        return self if name == "esign" else None

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.files.aclose()

    # -- the API --------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, what: str, *, sent: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """One call; EngineError (neutral words) on a transport failure or an error status.
        ``sent``: the signers may already have their links (no fallback then)."""
        try:
            resp = await self.http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            log.warning("documenso %s: %s timed out", self.config.name, what)
            raise EngineError(
                ErrorCode.TIMEOUT, "The signing service took too long.", may_fall_back=not sent
            ) from exc
        except httpx.HTTPError as exc:
            log.warning("documenso %s: %s failed (%s)", self.config.name, what, cause_of(exc))
            raise EngineError(
                ErrorCode.SERVICE_ERROR,
                "The signing service could not be reached.",
                may_fall_back=not sent,
            ) from exc
        if resp.status_code < 400:
            return resp
        log.warning("documenso %s: %s answered %d", self.config.name, what, resp.status_code)
        if resp.status_code == 429:
            raise EngineError(
                ErrorCode.RATE_LIMITED,
                "The signing service is busy; try again shortly.",
                retry_after_s=retry_after_whole_s(resp.headers),
                may_fall_back=not sent,
            )
        if resp.status_code in (400, 413, 422):
            raise EngineError(
                ErrorCode.INVALID_INPUT,
                "The signing service refused this document.",
                may_fall_back=False,
            )
        raise EngineError(
            ErrorCode.SERVICE_ERROR, "The signing service failed.", may_fall_back=not sent
        )

    @staticmethod
    def _json(resp: httpx.Response) -> dict[str, Any]:
        try:
            doc = resp.json()
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise _unexpected()
        return doc

    def _meta(self, request: SigningRequest) -> dict[str, Any]:
        meta: dict[str, Any] = {"subject": f"Please sign: {request.title}"}
        if request.message:
            meta["message"] = request.message
        return meta

    def _page(self, request: SigningRequest) -> int:
        return max(1, request.pages) if self.signature_page == "last" else 1

    async def send_for_signature(self, request: SigningRequest) -> SigningSent:
        if self.api_version == 1:
            return await self._send_v1(request)
        page = self._page(request)
        meta = self._meta(request)
        payload = {
            "type": "DOCUMENT",
            "title": request.title,
            "externalId": request.reference,
            "recipients": [
                {
                    "email": signer.email,
                    "name": signer.name,
                    "role": "SIGNER",
                    "fields": [signature_field(index, page)],
                }
                for index, signer in enumerate(request.signers)
            ],
            "meta": meta,
        }
        resp = await self._request(
            "POST",
            "/envelope/create",
            "envelope create",
            data={"payload": json.dumps(payload)},
            files=[("files", ("document.pdf", request.pdf, "application/pdf"))],
        )
        envelope_id = self._json(resp).get("id")
        if not isinstance(envelope_id, str) or not envelope_id:
            raise _unexpected()
        try:
            await self._request(
                "POST",
                "/envelope/distribute",
                "envelope distribute",
                sent=True,
                json={"envelopeId": envelope_id},
            )
        except EngineError:
            # Did it go out anyway (an answer lost on the way back)? Then it is sent;
            # else the draft is withdrawn and the caller refunded.
            if await self._is_distributed(envelope_id):
                return SigningSent(envelope_id, self.source)
            await self._withdraw(envelope_id)
            raise
        return SigningSent(envelope_id, self.source)

    async def _is_distributed(self, envelope_id: str) -> bool:
        try:
            resp = await self._request("GET", f"/envelope/{envelope_id}", "envelope get")
        except EngineError:
            return False
        try:
            return self._json(resp).get("status") in ("PENDING", "COMPLETED")
        except EngineError:
            return False

    async def _withdraw(self, envelope_id: str) -> None:
        """Best effort: delete a draft that was never sent."""
        try:
            await self._request(
                "POST", "/envelope/delete", "envelope delete", json={"envelopeId": envelope_id}
            )
        except EngineError:
            log.warning("documenso %s: a draft envelope could not be deleted", self.config.name)

    async def _envelope_doc(self, envelope_id: str) -> dict[str, Any]:
        resp = await self._request("GET", f"/envelope/{envelope_id}", "envelope get")
        return self._json(resp)

    async def envelope(self, envelope_id: str) -> EnvelopeState:
        if self.api_version == 1:
            doc = self._json(
                await self._request("GET", f"/documents/{envelope_id}", "document get")
            )
        else:
            doc = await self._envelope_doc(envelope_id)
        status = _STATUS.get(str(doc.get("status")))
        if status is None:
            raise _unexpected()
        signers = []
        for recipient in doc.get("recipients") or ():
            if not isinstance(recipient, dict) or recipient.get("role", "SIGNER") != "SIGNER":
                continue
            signers.append(
                SignerState(
                    str(recipient.get("email", "")),
                    _SIGNING.get(str(recipient.get("signingStatus")), "pending"),
                )
            )
        return EnvelopeState(envelope_id, status, tuple(signers))

    async def signed_pdf(self, envelope_id: str, max_bytes: int) -> bytes:
        if self.api_version == 1:
            return await self._signed_pdf_v1(envelope_id, max_bytes)
        doc = await self._envelope_doc(envelope_id)
        if doc.get("status") != "COMPLETED":
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The document is not signed by everyone yet."
            )
        items = [i for i in doc.get("envelopeItems") or () if isinstance(i, dict) and i.get("id")]
        if not items:
            raise _unexpected()

        def order(item: dict[str, Any]) -> int:
            value = item.get("order")
            return value if isinstance(value, int) else 0

        item = min(items, key=order)
        path = f"/envelope/item/{item['id']}/download"
        return await self._download(self.http, path, {"version": "signed"}, max_bytes)

    async def _download(
        self, client: httpx.AsyncClient, url: str, params: dict[str, str], max_bytes: int
    ) -> bytes:
        try:
            async with client.stream("GET", url, params=params) as resp:
                if resp.status_code >= 400:
                    log.warning(
                        "documenso %s: signed download answered %d",
                        self.config.name,
                        resp.status_code,
                    )
                    raise EngineError(
                        ErrorCode.SERVICE_ERROR, "The signed document could not be fetched."
                    )
                data = bytearray()
                async for chunk in resp.aiter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        raise EngineError(
                            ErrorCode.SERVICE_ERROR, "The signed document is too large."
                        )
        except httpx.TimeoutException as exc:
            raise EngineError(ErrorCode.TIMEOUT, "The signing service took too long.") from exc
        except httpx.HTTPError as exc:
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The signing service could not be reached."
            ) from exc
        if not bytes(data[:5]) == b"%PDF-":
            raise EngineError(ErrorCode.SERVICE_ERROR, "The signed document is not a PDF.")
        return bytes(data)

    # -- v1 (deprecated; Documenso instances without envelopes) ----------------------------

    async def _send_v1(self, request: SigningRequest) -> SigningSent:
        """Create (recipients in ``signingOrder``, the presigned ``uploadUrl``), upload the
        PDF there (without the API key), add one SIGNATURE field per signer
        (``pageX``/``pageY``/``pageWidth``/``pageHeight``: percentages, as v2's), send
        (``sendEmail``). A failure before the send deletes the document."""
        document_id, upload_url, recipients = await self._create_v1(request)
        try:
            fields = self._fields_v1(request, recipients)
            await self._upload_v1(upload_url, request.pdf)
            await self._request(
                "POST", f"/documents/{document_id}/fields", "fields create", json=fields
            )
        except EngineError:
            await self._delete_v1(document_id)
            raise
        try:
            await self._request(
                "POST",
                f"/documents/{document_id}/send",
                "document send",
                sent=True,
                json={"sendEmail": True},
            )
        except EngineError:
            if await self._v1_sent(document_id):  # the answer was lost; it went out
                return SigningSent(document_id, self.source)
            await self._delete_v1(document_id)
            raise
        return SigningSent(document_id, self.source)

    async def _create_v1(self, request: SigningRequest) -> tuple[str, str, list[Any]]:
        """The created document's id, its presigned upload URL and its recipients."""
        created = self._json(
            await self._request(
                "POST",
                "/documents",
                "document create",
                json={
                    "title": request.title,
                    "externalId": request.reference,
                    "recipients": [
                        {"name": s.name, "email": s.email, "role": "SIGNER", "signingOrder": i + 1}
                        for i, s in enumerate(request.signers)
                    ],
                    "meta": self._meta(request),
                },
            )
        )
        number, upload_url = created.get("documentId"), created.get("uploadUrl")
        recipients = created.get("recipients")
        if (
            not isinstance(number, int)
            or not isinstance(upload_url, str)
            or not upload_url.startswith(("https://", "http://"))
            or not isinstance(recipients, list)
        ):
            raise _unexpected()
        return str(number), upload_url, recipients

    def _fields_v1(self, request: SigningRequest, recipients: list[Any]) -> list[dict[str, Any]]:
        """One SIGNATURE field per signer, on the created recipient of its e-mail."""
        ids = {
            str(r.get("email", "")).lower(): r.get("recipientId")
            for r in recipients
            if isinstance(r, dict)
        }
        page = self._page(request)
        fields = []
        for index, signer in enumerate(request.signers):
            recipient_id = ids.get(signer.email.lower())
            if not isinstance(recipient_id, int):
                raise _unexpected()
            spot = signature_field(index, page)
            fields.append(
                {
                    "recipientId": recipient_id,
                    "type": "SIGNATURE",
                    "pageNumber": page,
                    "pageX": spot["positionX"],
                    "pageY": spot["positionY"],
                    "pageWidth": spot["width"],
                    "pageHeight": spot["height"],
                }
            )
        return fields

    async def _upload_v1(self, upload_url: str, pdf: bytes) -> None:
        """The PDF to the presigned URL (which carries its own authority: no API key)."""
        try:
            put = await self.files.put(
                upload_url, content=pdf, headers={"Content-Type": "application/pdf"}
            )
        except httpx.HTTPError as exc:
            raise _not_uploaded() from exc
        if put.status_code >= 300:
            log.warning("documenso %s: upload answered %d", self.config.name, put.status_code)
            raise _not_uploaded()

    async def _v1_sent(self, document_id: str) -> bool:
        try:
            resp = await self._request("GET", f"/documents/{document_id}", "document get")
            return self._json(resp).get("status") in ("PENDING", "COMPLETED")
        except EngineError:
            return False

    async def _delete_v1(self, document_id: str) -> None:
        try:
            await self._request("DELETE", f"/documents/{document_id}", "document delete")
        except EngineError:
            log.warning("documenso %s: a draft document could not be deleted", self.config.name)

    async def _signed_pdf_v1(self, document_id: str, max_bytes: int) -> bytes:
        """``GET /documents/{id}/download`` -> ``{"downloadUrl"}`` (the signed PDF once
        completed; ``packages/api/v1`` ZDownloadDocumentSuccessfulSchema), fetched
        without the API key."""
        doc = self._json(await self._request("GET", f"/documents/{document_id}", "document get"))
        if doc.get("status") != "COMPLETED":
            raise EngineError(
                ErrorCode.SERVICE_ERROR, "The document is not signed by everyone yet."
            )
        link = self._json(
            await self._request("GET", f"/documents/{document_id}/download", "document download")
        ).get("downloadUrl")
        if not isinstance(link, str) or not link.startswith(("https://", "http://")):
            raise _unexpected()
        return await self._download(self.files, link, {}, max_bytes)

    # -- webhooks -------------------------------------------------------------------------

    def on_event(self, listener: EventListener) -> None:
        self._listeners.append(listener)

    def valid_secret(self, headers: Mapping[str, str]) -> bool:
        given = headers.get("x-documenso-secret", "")
        if not self._webhook_secret:
            return False  # nothing to verify against: refuse, and follow by polling
        return texts_equal(given, self._webhook_secret)

    async def receive_webhook(self, headers: Mapping[str, str], body: bytes) -> int:
        """POST /api/webhooks/documenso/<NAME>: 403 unless ``X-Documenso-Secret`` is the
        configured secret (nothing changes then); 200 for every genuine event, also
        for those about requests satsgate does not follow (Documenso must not retry)."""
        if not self.valid_secret(headers):
            log.warning("documenso %s: webhook with a wrong secret refused", self.config.name)
            return 403
        if len(body) > MAX_WEBHOOK_BYTES:
            return 413
        try:
            doc = json.loads(body)
        except ValueError:
            return 400
        if not isinstance(doc, dict):
            return 400
        status = _EVENTS.get(str(doc.get("event", "")).upper().replace(".", "_"))
        payload = doc.get("payload")
        if status is None or not isinstance(payload, dict):
            return 200
        # v2: the envelope's id; v1: requests are known by their document number.
        raw = payload.get("envelopeId") if self.api_version == 2 else payload.get("id")
        if isinstance(raw, bool) or not isinstance(raw, str | int) or raw == "":
            return 200
        if self.api_version == 1 and not isinstance(raw, int):
            return 200
        envelope_id = str(raw)
        event = EnvelopeEvent(self.source, envelope_id, status)
        for listener in self._listeners:
            try:
                await listener(event)
            except Exception:  # the poll takes it up; Documenso need not retry
                log.exception("documenso %s: handling a webhook failed", self.config.name)
        return 200
