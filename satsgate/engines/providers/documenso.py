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

Auth: ``Authorization: <api key>`` (Documenso also strips a ``Bearer `` prefix).
Errors never name the provider, its URL or the key.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import httpx

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
from satsgate.engines.registry import EngineDeps

log = logging.getLogger(__name__)

KIND = "documenso"
DEFAULT_BASE_URL = "https://app.documenso.com/api/v2"
DEFAULT_POLL_INTERVAL_S = 900.0
_KNOWN_OPTIONS = frozenset(
    {"webhook_secret", "webhook_secret_env", "poll_interval_s", "signature_page"}
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
        unknown = set(config.options) - _KNOWN_OPTIONS
        if unknown:
            raise EngineConfigError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        if not config.api_key:
            raise EngineConfigError(f"{where} needs api_key or api_key_env (a Documenso API token)")
        poll = config.options.get("poll_interval_s", DEFAULT_POLL_INTERVAL_S)
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not 1 <= poll <= 86400:
            raise EngineConfigError(f"{where}: poll_interval_s must be 1 to 86400 seconds")
        page = config.options.get("signature_page", "last")
        if page not in ("last", "first"):
            raise EngineConfigError(f'{where}: signature_page is "last" or "first"')
        self.config = config
        self.source = config.name
        self.poll_interval_s = float(poll)
        self.signature_page = str(page)
        self.base_url = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._webhook_secret = _secret(config, env, where)
        self._listeners: list[EventListener] = []
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": config.api_key},
            timeout=httpx.Timeout(config.timeout_s, connect=min(10.0, config.timeout_s)),
            follow_redirects=False,
        )

    def engine(self, name: str) -> object | None:
        return self if name == "esign" else None

    async def aclose(self) -> None:
        await self.http.aclose()

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
                "TIMEOUT", "The signing service took too long.", may_fall_back=not sent
            ) from exc
        except httpx.HTTPError as exc:
            log.warning("documenso %s: %s failed: %r", self.config.name, what, exc)
            raise EngineError(
                "SERVICE_ERROR", "The signing service could not be reached.", may_fall_back=not sent
            ) from exc
        if resp.status_code < 400:
            return resp
        log.warning("documenso %s: %s answered %d", self.config.name, what, resp.status_code)
        if resp.status_code == 429:
            retry = resp.headers.get("retry-after")
            raise EngineError(
                "RATE_LIMITED",
                "The signing service is busy; try again shortly.",
                retry_after_s=float(retry) if retry and retry.isdigit() else None,
                may_fall_back=not sent,
            )
        if resp.status_code in (400, 413, 422):
            raise EngineError(
                "INVALID_INPUT", "The signing service refused this document.", may_fall_back=False
            )
        raise EngineError("SERVICE_ERROR", "The signing service failed.", may_fall_back=not sent)

    @staticmethod
    def _json(resp: httpx.Response) -> dict[str, Any]:
        try:
            doc = resp.json()
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise EngineError("SERVICE_ERROR", "The signing service answered something unexpected.")
        return doc

    async def send_for_signature(self, request: SigningRequest) -> SigningSent:
        page = max(1, request.pages) if self.signature_page == "last" else 1
        meta: dict[str, Any] = {"subject": f"Please sign: {request.title}"}
        if request.message:
            meta["message"] = request.message
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
            raise EngineError("SERVICE_ERROR", "The signing service answered something unexpected.")
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
        doc = await self._envelope_doc(envelope_id)
        status = _STATUS.get(str(doc.get("status")))
        if status is None:
            raise EngineError("SERVICE_ERROR", "The signing service answered something unexpected.")
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
        doc = await self._envelope_doc(envelope_id)
        if doc.get("status") != "COMPLETED":
            raise EngineError("SERVICE_ERROR", "The document is not signed by everyone yet.")
        items = [i for i in doc.get("envelopeItems") or () if isinstance(i, dict) and i.get("id")]
        if not items:
            raise EngineError("SERVICE_ERROR", "The signing service answered something unexpected.")

        def order(item: dict[str, Any]) -> int:
            value = item.get("order")
            return value if isinstance(value, int) else 0

        item = min(items, key=order)
        path = f"/envelope/item/{item['id']}/download"
        try:
            async with self.http.stream("GET", path, params={"version": "signed"}) as resp:
                if resp.status_code >= 400:
                    log.warning(
                        "documenso %s: signed download answered %d",
                        self.config.name,
                        resp.status_code,
                    )
                    raise EngineError("SERVICE_ERROR", "The signed document could not be fetched.")
                data = bytearray()
                async for chunk in resp.aiter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        raise EngineError("SERVICE_ERROR", "The signed document is too large.")
        except httpx.TimeoutException as exc:
            raise EngineError("TIMEOUT", "The signing service took too long.") from exc
        except httpx.HTTPError as exc:
            raise EngineError("SERVICE_ERROR", "The signing service could not be reached.") from exc
        if not bytes(data[:5]) == b"%PDF-":
            raise EngineError("SERVICE_ERROR", "The signed document is not a PDF.")
        return bytes(data)

    # -- webhooks -------------------------------------------------------------------------

    def on_event(self, listener: EventListener) -> None:
        self._listeners.append(listener)

    def valid_secret(self, headers: Mapping[str, str]) -> bool:
        given = headers.get("x-documenso-secret", "")
        if not self._webhook_secret:
            return False  # nothing to verify against: refuse, and follow by polling
        return hmac.compare_digest(given.encode(), self._webhook_secret.encode())

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
        envelope_id = payload.get("envelopeId")
        if not isinstance(envelope_id, str) or not envelope_id:
            envelope_id = payload.get("id")
            if not isinstance(envelope_id, str) or not envelope_id.startswith("envelope_"):
                return 200  # a v1 document's number: not one of satsgate's envelopes
        event = EnvelopeEvent(self.source, envelope_id, status)
        for listener in self._listeners:
            try:
                await listener(event)
            except Exception:  # the poll takes it up; Documenso need not retry
                log.exception("documenso %s: handling a webhook failed", self.config.name)
        return 200
