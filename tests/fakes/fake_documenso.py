"""A loopback fake of Documenso's v2 envelope API, written from its reference
(/work/shared/docs/providers.md section 9; documenso/documenso v2.17.0 for the signed
download ``GET /envelope/item/{envelopeItemId}/download?version=signed``), in its own
thread and event loop as the remote service would be.

- ``POST /api/v2/envelope/create``: multipart, part ``payload`` (JSON text) and part(s)
  ``files`` (PDFs); the payload is checked (type, recipients, one SIGNATURE field per
  signer inside the page and on an existing page) -> ``{"id": "envelope_..."}``;
- ``POST /api/v2/envelope/distribute`` ``{"envelopeId"}``: DRAFT -> PENDING;
- ``GET /api/v2/envelope/{id}``; ``POST /api/v2/envelope/delete``;
- ``GET /api/v2/envelope/item/{id}/download?version=signed``: the signed PDF (the
  uploaded pages with the signers in its metadata), only once COMPLETED;
- every call needs ``Authorization: <API_KEY>`` (or ``Bearer <API_KEY>``): else 401.

The test drives the signers: :meth:`FakeDocumenso.complete` signs for everyone and
POSTs the ``DOCUMENT_COMPLETED`` webhook with ``X-Documenso-Secret`` (or not: a lost
webhook); :meth:`FakeDocumenso.forge` sends one with a wrong secret.
"""

from __future__ import annotations

import asyncio
import io
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pypdf import PdfReader, PdfWriter

from tests.fakes.fake_platforms import FakePlatform

API_KEY = "api_test_0123456789abcdef"
WEBHOOK_SECRET = "documenso-test-secret"


@dataclass
class Envelope:
    id: str
    payload: dict[str, Any]
    pdf: bytes
    pages: int
    item_id: str
    status: str = "DRAFT"
    signed: set[str] = field(default_factory=set)
    signed_pdf: bytes | None = None
    number: int | None = None  # a v1 document's number (its id there)
    upload_token: str = ""

    def recipients(self) -> list[dict[str, Any]]:
        out = []
        for index, r in enumerate(self.payload.get("recipients", []), start=1):
            out.append(
                {
                    "id": index,
                    "email": r["email"],
                    "name": r["name"],
                    "role": r["role"],
                    "token": f"tok{index}",
                    "signingOrder": None,
                    "signingStatus": "SIGNED" if r["email"] in self.signed else "NOT_SIGNED",
                    "readStatus": "OPENED",
                    "sendStatus": "SENT" if self.status != "DRAFT" else "NOT_SENT",
                    "signingUrl": f"https://sign.example/sign/tok{index}",
                    # positions come back as strings
                    "fields": [
                        {**f, "positionX": str(f["positionX"]), "positionY": str(f["positionY"])}
                        for f in r.get("fields", [])
                    ],
                }
            )
        return out

    def doc(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "title": self.payload.get("title"),
            "externalId": self.payload.get("externalId"),
            "recipients": self.recipients(),
            "envelopeItems": [
                {
                    "id": self.item_id,
                    "title": "document.pdf",
                    "order": 1,
                    "envelopeId": self.id,
                    "documentDataId": "dd1",
                }
            ],
        }


class FakeDocumenso(FakePlatform):
    def __init__(self) -> None:
        self.envelopes: dict[str, Envelope] = {}
        self.deleted: list[str] = []
        self.refused: list[str] = []  # why a create was refused (400)
        self.unauthorized = 0
        self.fail_create = False
        self.fail_distribute = False
        self.key_sent_to_files = 0  # v1: the API key sent to a presigned URL (must stay 0)
        self._numbers = 100
        super().__init__()
        self.api = f"{self.url}/api/v2"

    def routes(self, app: web.Application) -> None:
        self._v1_routes(app)
        app.router.add_post("/api/v2/envelope/create", self._create)
        app.router.add_post("/api/v2/envelope/distribute", self._distribute)
        app.router.add_post("/api/v2/envelope/delete", self._delete)
        app.router.add_get("/api/v2/envelope/item/{item}/download", self._download)
        app.router.add_get("/api/v2/envelope/{id}", self._get)

    def _authorized(self, request: web.Request) -> bool:
        value = request.headers.get("Authorization", "").removeprefix("Bearer ")
        ok = value == API_KEY
        if not ok:
            self.unauthorized += 1
        return ok

    @staticmethod
    def _error(status: int, message: str) -> web.Response:
        return web.json_response({"message": message}, status=status)

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        if self.fail_create:
            return self._error(500, "Internal server error")
        if not request.content_type.startswith("multipart/form-data"):
            return self._refuse("not multipart")
        form = await request.post()
        raw = form.get("payload")
        files = form.getall("files", [])
        if not isinstance(raw, str) or len(files) != 1:
            return self._refuse("payload text and one file part expected")
        upload = files[0]
        if not isinstance(upload, web.FileField) or upload.content_type != "application/pdf":
            return self._refuse("files must be a PDF")
        pdf = upload.file.read()
        try:
            pages = len(PdfReader(io.BytesIO(pdf)).pages)
            payload = json.loads(raw)
        except Exception:
            return self._refuse("unreadable payload or PDF")
        problem = self._check(payload, pages)
        if problem:
            return self._refuse(problem)
        envelope = Envelope(
            "envelope_" + secrets.token_hex(6),
            payload,
            pdf,
            pages,
            "envelope_item_" + secrets.token_hex(4),
        )
        self.envelopes[envelope.id] = envelope
        return web.json_response({"id": envelope.id})

    def _refuse(self, why: str) -> web.Response:
        self.refused.append(why)
        return self._error(400, why)

    @staticmethod
    def _check(payload: Any, pages: int) -> str:
        if not isinstance(payload, dict) or payload.get("type") != "DOCUMENT":
            return "type must be DOCUMENT"
        if not isinstance(payload.get("title"), str) or not payload["title"]:
            return "title required"
        recipients = payload.get("recipients")
        if not isinstance(recipients, list) or not recipients:
            return "recipients required"
        for r in recipients:
            if r.get("role") != "SIGNER" or "@" not in str(r.get("email")) or not r.get("name"):
                return "recipient: email, name and role SIGNER"
            fields = r.get("fields")
            if not isinstance(fields, list) or len(fields) != 1:
                return "one field per signer expected"
            f = fields[0]
            if f.get("type") != "SIGNATURE" or f.get("identifier") != 0:
                return "a SIGNATURE field on file 0"
            if not 1 <= int(f["page"]) <= pages:
                return "field page out of range"
            x, y, w, h = (float(f[k]) for k in ("positionX", "positionY", "width", "height"))
            if min(x, y) < 0 or w <= 0 or h <= 0 or x + w > 100 or y + h > 100:
                return "field outside the page"
        return ""

    async def _json(self, request: web.Request) -> dict[str, Any] | None:
        try:
            doc = await request.json()
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    async def _distribute(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        doc = await self._json(request)
        envelope = self.envelopes.get(str((doc or {}).get("envelopeId")))
        if envelope is None:
            return self._error(404, "Envelope not found")
        if self.fail_distribute:
            return self._error(500, "Internal server error")
        envelope.status = "PENDING"
        return web.json_response(
            {"success": True, "id": envelope.id, "recipients": envelope.recipients()}
        )

    async def _delete(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        doc = await self._json(request)
        envelope = self.envelopes.pop(str((doc or {}).get("envelopeId")), None)
        if envelope is None:
            return self._error(404, "Envelope not found")
        self.deleted.append(envelope.id)
        return web.json_response({"success": True})

    async def _get(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        envelope = self.envelopes.get(request.match_info["id"])
        if envelope is None:
            return self._error(404, "Envelope not found")
        return web.json_response(envelope.doc())

    async def _download(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "API token was not provided"}, status=401)
        item = request.match_info["item"]
        envelope = next((e for e in self.envelopes.values() if e.item_id == item), None)
        if envelope is None:
            return web.json_response({"error": "Envelope item not found"}, status=404)
        if request.query.get("version", "signed") != "signed" or envelope.signed_pdf is None:
            return web.json_response({"error": "Document not completed"}, status=400)
        return web.Response(
            body=envelope.signed_pdf,
            content_type="application/pdf",
            headers={"Content-Disposition": 'attachment; filename="document_signed.pdf"'},
        )

    # -- the test's side ------------------------------------------------------------------

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(20)

    def only(self) -> Envelope:
        assert len(self.envelopes) == 1, list(self.envelopes)
        return next(iter(self.envelopes.values()))

    def complete(self, envelope_id: str, webhook_url: str | None) -> int:
        """Everyone signs; the DOCUMENT_COMPLETED webhook goes to ``webhook_url`` (None:
        it is lost). The webhook's answer status (0 when none was sent)."""
        envelope = self.envelopes[envelope_id]
        signed = {r["email"] for r in envelope.payload["recipients"]}
        signed_pdf = _signed(envelope, signed)

        async def sign() -> None:  # in the fake's loop: a poll sees all of it or none
            envelope.signed, envelope.signed_pdf = signed, signed_pdf
            envelope.status = "COMPLETED"

        self._run(sign())
        if webhook_url is None:
            return 0
        return int(self._run(self._send(webhook_url, envelope, WEBHOOK_SECRET)))

    def reject(self, envelope_id: str, webhook_url: str) -> int:
        """The first signer declines: REJECTED, and the DOCUMENT_REJECTED webhook."""
        envelope = self.envelopes[envelope_id]

        async def decline() -> None:
            envelope.status = "REJECTED"

        self._run(decline())
        return int(
            self._run(
                self._send(webhook_url, envelope, WEBHOOK_SECRET, "DOCUMENT_REJECTED", "REJECTED")
            )
        )

    def forge(self, envelope_id: str, webhook_url: str, secret: str | None) -> int:
        """A DOCUMENT_COMPLETED webhook with the wrong secret (or none), nothing signed."""
        return int(self._run(self._send(webhook_url, self.envelopes[envelope_id], secret)))

    # -- v1 (deprecated): documents, presigned upload, fields, send -----------------------

    def _v1_routes(self, app: web.Application) -> None:
        app.router.add_post("/api/v1/documents", self._v1_create)
        app.router.add_put("/upload/{token}", self._v1_upload)
        app.router.add_post("/api/v1/documents/{id}/fields", self._v1_fields)
        app.router.add_post("/api/v1/documents/{id}/send", self._v1_send)
        app.router.add_get("/api/v1/documents/{id}/download", self._v1_download)
        app.router.add_get("/api/v1/documents/{id}", self._v1_get)
        app.router.add_delete("/api/v1/documents/{id}", self._v1_delete)
        app.router.add_get("/signed/{token}", self._v1_file)

    def _v1_doc(self, envelope: Envelope) -> dict[str, Any]:
        recipients = [
            {
                "id": r["id"],
                "documentId": envelope.number,
                "email": r["email"],
                "name": r["name"],
                "role": r["role"],
                "signingOrder": index,
                "token": r["token"],
                "signedAt": None,
                "readStatus": r["readStatus"],
                "signingStatus": r["signingStatus"],
                "sendStatus": r["sendStatus"],
                "signingUrl": r["signingUrl"],
            }
            for index, r in enumerate(envelope.recipients(), start=1)
        ]
        return {
            "id": envelope.number,
            "externalId": envelope.payload.get("externalId"),
            "userId": 1,
            "title": envelope.payload.get("title"),
            "status": envelope.status,
            "completedAt": None,
            "recipients": recipients,
        }

    async def _v1_create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        if self.fail_create:
            return self._error(500, "Internal server error")
        doc = await self._json(request)
        if not doc or not doc.get("title") or not isinstance(doc.get("recipients"), list):
            return self._refuse("title and recipients required")
        self._numbers += 1
        payload = {
            "type": "DOCUMENT",
            "title": doc["title"],
            "externalId": doc.get("externalId"),
            "meta": doc.get("meta", {}),
            "recipients": [{**r, "fields": []} for r in doc["recipients"]],
        }
        envelope = Envelope(str(self._numbers), payload, b"", 0, "", number=self._numbers)
        envelope.upload_token = secrets.token_hex(8)
        self.envelopes[envelope.id] = envelope
        return web.json_response(
            {
                "uploadUrl": f"{self.url}/upload/{envelope.upload_token}",
                "documentId": envelope.number,
                "externalId": payload["externalId"],
                "recipients": [
                    {
                        "recipientId": r["id"],
                        "name": r["name"],
                        "email": r["email"],
                        "token": r["token"],
                        "role": r["role"],
                        "signingOrder": None,
                        "signingUrl": r["signingUrl"],
                    }
                    for r in envelope.recipients()
                ],
            }
        )

    def _by_token(self, token: str) -> Envelope | None:
        return next((e for e in self.envelopes.values() if e.upload_token == token), None)

    async def _v1_upload(self, request: web.Request) -> web.Response:
        if "Authorization" in request.headers:
            self.key_sent_to_files += 1
            return web.Response(status=400, text="presigned URLs take no Authorization")
        envelope = self._by_token(request.match_info["token"])
        if envelope is None or request.content_type != "application/pdf":
            return web.Response(status=403)
        envelope.pdf = await request.read()
        envelope.pages = len(PdfReader(io.BytesIO(envelope.pdf)).pages)
        return web.Response(status=200)

    def _v1_envelope(self, request: web.Request) -> Envelope | None:
        envelope = self.envelopes.get(request.match_info["id"])
        return envelope if envelope is not None and envelope.number is not None else None

    async def _v1_fields(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        envelope = self._v1_envelope(request)
        if envelope is None:
            return self._error(404, "Document not found")
        fields = await request.json()
        fields = fields if isinstance(fields, list) else [fields]
        recipients = envelope.payload["recipients"]
        for f in fields:
            index = int(f["recipientId"]) - 1
            if not 0 <= index < len(recipients):
                return self._refuse("unknown recipientId")
            recipients[index]["fields"].append(
                {
                    "identifier": 0,
                    "type": f["type"],
                    "page": f["pageNumber"],
                    "positionX": f["pageX"],
                    "positionY": f["pageY"],
                    "width": f["pageWidth"],
                    "height": f["pageHeight"],
                }
            )
        problem = self._check(envelope.payload, envelope.pages)
        if problem:
            return self._refuse(problem)
        return web.json_response({"fields": fields})

    async def _v1_send(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        envelope = self._v1_envelope(request)
        if envelope is None:
            return self._error(404, "Document not found")
        if not envelope.pdf or self._check(envelope.payload, envelope.pages):
            return self._error(400, "Document is not ready to be sent")
        if self.fail_distribute:
            return self._error(500, "Internal server error")
        envelope.status = "PENDING"
        return web.json_response(
            {"message": "Document sent for signing successfully", **self._v1_doc(envelope)}
        )

    async def _v1_get(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        envelope = self._v1_envelope(request)
        if envelope is None:
            return self._error(404, "Document not found")
        return web.json_response(self._v1_doc(envelope))

    async def _v1_download(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        envelope = self._v1_envelope(request)
        if envelope is None:
            return self._error(404, "Document not found")
        return web.json_response({"downloadUrl": f"{self.url}/signed/{envelope.upload_token}"})

    async def _v1_file(self, request: web.Request) -> web.Response:
        if "Authorization" in request.headers:
            self.key_sent_to_files += 1
            return web.Response(status=400)
        envelope = self._by_token(request.match_info["token"])
        if envelope is None:
            return web.Response(status=404)
        data = envelope.signed_pdf if envelope.signed_pdf is not None else envelope.pdf
        return web.Response(body=data, content_type="application/pdf")

    async def _v1_delete(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, "Unauthorized")
        envelope = self.envelopes.pop(request.match_info["id"], None)
        if envelope is None:
            return self._error(404, "Document not found")
        self.deleted.append(envelope.id)
        return web.json_response(self._v1_doc(envelope))

    async def _send(
        self,
        url: str,
        envelope: Envelope,
        secret: str | None,
        event: str = "DOCUMENT_COMPLETED",
        status: str = "COMPLETED",
    ) -> int:
        body = json.dumps(
            {
                "event": event,
                "payload": {
                    "id": envelope.number if envelope.number is not None else 10,
                    **({"envelopeId": envelope.id} if envelope.number is None else {}),
                    "externalId": envelope.payload.get("externalId"),
                    "userId": 1,
                    "title": envelope.payload.get("title"),
                    "status": status,
                    "completedAt": "2026-11-25T12:00:00.000Z",
                    "documentMeta": {},
                    "recipients": envelope.recipients(),
                    "Recipient": envelope.recipients(),
                },
                "createdAt": "2026-11-25T12:00:00.000Z",
                "webhookEndpoint": url,
            }
        ).encode()
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            headers["X-Documenso-Secret"] = secret
        before = len(self.webhook_answers)
        await self._post_webhook(url, body, headers)
        return self.webhook_answers[before]


def _signed(envelope: Envelope, signed: set[str]) -> bytes:
    """The "signed" PDF: the uploaded pages, the signers named in its metadata."""
    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(envelope.pdf)).pages:
        writer.add_page(page)
    signers = ", ".join(sorted(signed))
    writer.add_metadata({"/Title": "Signed document", "/SignedBy": signers})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
