"""Document services beyond documents.py: OCR (document, receipt), file conversion,
e-signature and boarding-pass wallet passes.

convert-file runs locally (Pillow, WeasyPrint, pypdf) and is always available;
boardingpass-wallet runs on the local ``wallet_pass`` engine (satsgate/engines/local/
pkpass.py: zxing-cpp, IATA BCBP, .pkpass, signed when a pass certificate is configured);
the others need engines: ``ocr``, ``esign``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import io
import posixpath
import zipfile
from typing import Any, ClassVar, Literal, Self

from PIL import Image
from pydantic import Field, field_validator, model_validator
from pypdf import PdfReader

from satsgate.engines import EngineError
from satsgate.engines.wallet_pass import WalletPass, WalletPassEngine
from satsgate.services.base import Params, PriceShape, ServiceContext, ServiceResult, ServiceSpec
from satsgate.services.common import (
    InvalidField,
    MiB,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    check_email_address,
    decode_file,
    no_engine,
    prevalidate,
)
from satsgate.services.engines import pdf
from satsgate.services.media import (
    MediaError,
    document_pages,
    html_text,
    image_info,
    is_pdf,
    pdf_pages,
)
from satsgate.services.pricing import MSAT, PER_PAGE_SATS, PER_PASS_SATS, flat_price

# -- extract-document / extract-receipt ----------------------------------------------------

OCR_MAX_BYTES = 30 * MiB


class _OcrParams(ServiceParams, ModelChoice):
    MAX_PAGES: ClassVar[int] = 500

    documentBase64: str = Field(
        validation_alias=alias("documentBase64", "file", "document", "imageBase64"),
        max_length=b64_chars(OCR_MAX_BYTES),
        description="A PDF or an image (PNG, JPEG, WebP, GIF, BMP, TIFF) as base64, at most "
        "30 MB. A PDF is priced by its page count, an image as one page.",
    )
    fileName: str | None = Field(
        None, max_length=255, validation_alias=alias("fileName", "file_name")
    )

    def check(self) -> int:
        """Pages (the price's measure): counted from the PDF before payment."""
        data = decode_file(self.documentBase64, "documentBase64", OCR_MAX_BYTES)
        try:
            pages = document_pages(data)
        except MediaError as exc:
            raise InvalidField("documentBase64", str(exc)) from None
        if pages > self.MAX_PAGES:
            raise InvalidField("documentBase64", f"{pages} pages; at most {self.MAX_PAGES}")
        return pages

    @property
    def pages(self) -> int:
        return int(self.checked())


class ExtractDocumentParams(_OcrParams):
    MODELS: ClassVar[tuple[int, ...]] = (27,)
    DEFAULT: ClassVar[int] = 27


class ExtractReceiptParams(_OcrParams):
    MODELS: ClassVar[tuple[int, ...]] = (30,)
    DEFAULT: ClassVar[int] = 30
    MAX_PAGES: ClassVar[int] = 50


EXTRACT_DOCUMENT = ServiceSpec(
    slug="extract-document",
    tool_name="extract_document",
    category="ocr",
    title="Extract document",
    description="Document (PDF or image) to Markdown: { content, pages }. 10 sats per page.",
    params=ExtractDocumentParams,
    price_msat=lambda p: p.pages * PER_PAGE_SATS["ocr"] * MSAT,
    handler=no_engine,
    price_shape=PriceShape(
        "per_page", "per page", PER_PAGE_SATS["ocr"] * MSAT, estimate="ocr",
        note="A PDF is counted by its pages, an image is one page.",
    ),
    untrusted_output=True,
    model_ids=(27,),
    failure_codes=("INVALID_INPUT", "SERVICE_ERROR"),
    max_body_bytes=body_limit(OCR_MAX_BYTES),
    prevalidate=prevalidate,
    example={"documentBase64": "<base64 PDF>"},
    engine="ocr",
)

EXTRACT_RECEIPT = ServiceSpec(
    slug="extract-receipt",
    tool_name="extract_receipt",
    category="utility",
    title="Extract receipt",
    description="Receipt (PDF or image) to structured data: { structured, rawText }. 25 sats "
    "per page.",
    params=ExtractReceiptParams,
    price_msat=lambda p: p.pages * PER_PAGE_SATS["receipt-ocr"] * MSAT,
    handler=no_engine,
    price_shape=PriceShape(
        "per_page", "per page", PER_PAGE_SATS["receipt-ocr"] * MSAT, estimate="receipt-ocr",
        note="A PDF is counted by its pages, an image is one page.",
    ),
    untrusted_output=True,
    model_ids=(30,),
    failure_codes=("INVALID_INPUT", "SERVICE_ERROR"),
    max_body_bytes=body_limit(OCR_MAX_BYTES),
    prevalidate=prevalidate,
    example={"documentBase64": "<base64 JPEG>"},
    engine="ocr",
)

# -- convert-file (local) ------------------------------------------------------------------

CONVERT_MAX_BYTES = 20 * MiB
Target = Literal["png", "jpeg", "webp", "gif", "bmp", "tiff", "pdf", "txt"]
IMAGE_TARGETS: tuple[str, ...] = ("png", "jpeg", "webp", "gif", "bmp", "tiff")
_TEXT_SOURCES = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html",
                 ".txt": "txt"}
# Source kind -> targets it converts to.
CONVERSIONS: dict[str, tuple[str, ...]] = {
    "image": (*IMAGE_TARGETS, "pdf"),
    "pdf": ("txt",),
    "markdown": ("pdf", "txt"),
    "html": ("pdf", "txt"),
    "txt": ("pdf",),
}
_PIL_NAMES = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "gif": "GIF", "bmp": "BMP",
              "tiff": "TIFF", "pdf": "PDF"}


def source_kind(data: bytes, file_name: str | None) -> str:
    """image, pdf, markdown, html or txt; ValueError when it cannot tell."""
    if is_pdf(data):
        return "pdf"
    try:
        image_info(data)
        return "image"
    except MediaError:
        pass
    ext = posixpath.splitext((file_name or "").lower())[1]
    kind = _TEXT_SOURCES.get(ext)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        kind = None
    if kind is None:
        raise ValueError(
            "unsupported input: send an image, a PDF, or UTF-8 text with fileName ending in "
            ".md, .html or .txt"
        )
    return kind


def convert(data: bytes, kind: str, target: str) -> bytes:
    """Convert ``data`` of ``kind`` to ``target`` (CPU-bound; runs in the process pool)."""
    if kind == "image":
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            frame: Image.Image = img
            needs_rgb = (target in ("jpeg", "bmp", "pdf") and img.mode not in ("RGB", "L")) or (
                target == "gif" and img.mode not in ("P", "L")
            )
            if needs_rgb:
                frame = img.convert("RGB")
            out = io.BytesIO()
            frame.save(out, _PIL_NAMES[target])
            return out.getvalue()
    if kind == "pdf":
        reader = PdfReader(io.BytesIO(data), strict=False)
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        return "\n\n\f".join(pages).encode("utf-8")
    text = data.decode("utf-8")
    if target == "txt":
        markup = pdf.markdown_to_html(text) if kind == "markdown" else text
        return html_text(markup).strip().encode("utf-8")
    if kind == "markdown":
        return pdf.markdown_to_pdf(text).data
    if kind == "html":
        return pdf.html_to_pdf(text).data
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    page = (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><style>@page{size:A4;margin:18mm}'
        "pre{white-space:pre-wrap;font:10pt 'DejaVu Sans Mono',monospace}</style></head>"
        f"<body><pre>{escaped}</pre></body></html>"
    )
    return pdf.html_to_pdf(page).data


class ConvertFileParams(ServiceParams, ModelChoice):
    MODELS: ClassVar[tuple[int, ...]] = (11,)
    DEFAULT: ClassVar[int] = 11

    file: str = Field(
        validation_alias=alias("file", "fileBase64", "documentBase64"),
        max_length=b64_chars(CONVERT_MAX_BYTES),
        description="The file as base64, at most 20 MB: an image, a PDF, or UTF-8 Markdown, "
        "HTML or text (say which with fileName).",
    )
    fileName: str | None = Field(
        None, max_length=255, validation_alias=alias("fileName", "file_name"),
        description="Original name; its extension tells text formats apart (.md, .html, .txt).",
    )
    targetFormat: Target = Field(
        validation_alias=alias("targetFormat", "target_format", "to", "format"),
        description="png, jpeg, webp, gif, bmp, tiff, pdf or txt. Images convert to images and "
        "PDF; PDF to txt; Markdown and HTML to pdf and txt; text to pdf.",
    )

    def check(self) -> tuple[bytes, str]:
        data = decode_file(self.file, "file", CONVERT_MAX_BYTES)
        try:
            kind = source_kind(data, self.fileName)
            if kind == "pdf":
                pdf_pages(data)
        except ValueError as exc:
            raise InvalidField("file", str(exc)) from None
        if self.targetFormat not in CONVERSIONS[kind]:
            raise InvalidField(
                "targetFormat",
                f"{kind} converts to {', '.join(CONVERSIONS[kind])}, not {self.targetFormat}",
            )
        return data, kind


_INLINE_MAX_BYTES = 5 * MiB


async def convert_file(ctx: ServiceContext, params: ConvertFileParams) -> ServiceResult:
    data, kind = params.checked()
    output = await ctx.run_cpu(convert, data, kind, params.targetFormat)
    stored = await ctx.files.save(output, params.targetFormat)
    body: dict[str, Any] = {
        "file_url": stored.url,
        "format": params.targetFormat,
        "sourceFormat": kind,
        "size": len(output),
        "modelId": 11,
    }
    if len(output) <= _INLINE_MAX_BYTES:
        body["file_base64"] = base64.b64encode(output).decode("ascii")
    return ServiceResult(body)


CONVERT_FILE = ServiceSpec(
    slug="convert-file",
    tool_name="convert_file",
    category="utility",
    title="Convert file",
    description="Convert between image formats (PNG, JPEG, WebP, GIF, BMP, TIFF), images to "
    "PDF, PDF to text, Markdown or HTML to PDF or text, text to PDF: { file_url, "
    "file_base64, format }. Runs on this node. 100 sats.",
    params=ConvertFileParams,
    price_msat=flat_price("file-conversion"),
    handler=convert_file,
    model_ids=(11,),
    failure_codes=("L402_INVALID_PARAMS", "SERVICE_ERROR"),
    max_body_bytes=body_limit(CONVERT_MAX_BYTES),
    prevalidate=prevalidate,
    example={"file": "<base64 PNG>", "targetFormat": "jpeg"},
)

# -- e-signature ---------------------------------------------------------------------------

ESIGN_MAX_BYTES = 20 * MiB
MAX_SIGNERS = 10


class Signer(Params):
    name: str = Field(min_length=1, max_length=120)
    email: str

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        return check_email_address(value)


class ESignatureParams(ServiceParams, ModelChoice):
    MODELS: ClassVar[tuple[int, ...]] = (46,)
    DEFAULT: ClassVar[int] = 46

    documentBase64: str = Field(
        validation_alias=alias("documentBase64", "file", "document"),
        max_length=b64_chars(ESIGN_MAX_BYTES), description="The PDF to sign, base64, 20 MB.",
    )
    signers: list[Signer] = Field(min_length=1, max_length=MAX_SIGNERS)
    customerEmail: str = Field(
        validation_alias=alias("customerEmail", "customer_email"),
        description="Receives the signed copy once everyone has signed.",
    )
    note: str | None = Field(None, min_length=1, max_length=1000)

    @field_validator("customerEmail")
    @classmethod
    def _email(cls, value: str) -> str:
        return check_email_address(value)

    @model_validator(mode="after")
    def _unique(self) -> Self:
        emails = [s.email.lower() for s in self.signers]
        if len(set(emails)) != len(emails):
            raise ValueError("each signer needs their own e-mail address")
        return self

    def check(self) -> int:
        data = decode_file(self.documentBase64, "documentBase64", ESIGN_MAX_BYTES)
        try:
            return pdf_pages(data)
        except MediaError as exc:
            raise InvalidField("documentBase64", str(exc)) from None


E_SIGNATURE = ServiceSpec(
    slug="e-signature",
    tool_name="e_signature",
    category="utility",
    title="E-signature",
    description="Send a PDF for signature; the signed copy is e-mailed once all signers have "
    "signed (hours to days): { success, message }. 1000 sats per document.",
    params=ESignatureParams,
    price_msat=flat_price("e-signature"),
    handler=no_engine,
    model_ids=(46,),
    failure_codes=("INVALID_INPUT", "SERVICE_ERROR"),
    max_body_bytes=body_limit(ESIGN_MAX_BYTES),
    prevalidate=prevalidate,
    example={
        "documentBase64": "<base64 PDF>",
        "signers": [{"name": "Alice", "email": "alice@example.org"}],
        "customerEmail": "me@example.org",
    },
    engine="esign",
)

# -- boardingpass-wallet -------------------------------------------------------------------

PASS_DOC_MAX_BYTES = 10 * MiB
MAX_PASS_DOCUMENTS = 8


class BoardingPassParams(ServiceParams, ModelChoice):
    """One of documentBase64 or documents (up to 8). Priced 100 per document before
    parsing (one pass per document is the common case); a document yielding fewer passes
    is refunded the difference after parsing."""

    MODELS: ClassVar[tuple[int, ...]] = (47,)
    DEFAULT: ClassVar[int] = 47

    documentBase64: str | None = Field(
        None, validation_alias=alias("documentBase64", "file", "document"),
        max_length=b64_chars(PASS_DOC_MAX_BYTES),
        description="One boarding pass (PDF or image) as base64, at most 10 MB.",
    )
    documents: list[str] | None = Field(
        None, min_length=1, max_length=MAX_PASS_DOCUMENTS,
        description="Up to 8 boarding passes (PDF or image) as base64.",
    )

    @field_validator("documents")
    @classmethod
    def _sizes(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(len(d) > b64_chars(PASS_DOC_MAX_BYTES) for d in value):
            raise ValueError("a document is larger than 10 MB")
        return value

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.documentBase64 is None) == (self.documents is None):
            raise ValueError("send exactly one of documentBase64 or documents")
        return self

    @property
    def all_documents(self) -> list[str]:
        return [self.documentBase64] if self.documentBase64 is not None else list(
            self.documents or []
        )

    def decoded(self) -> list[bytes]:
        out: list[bytes] = []
        for index, doc in enumerate(self.all_documents):
            field = "documentBase64" if self.documentBase64 is not None else f"documents[{index}]"
            out.append(decode_file(doc, field, PASS_DOC_MAX_BYTES))
        return out

    def check(self) -> int:
        for index, data in enumerate(self.decoded()):
            field = "documentBase64" if self.documentBase64 is not None else f"documents[{index}]"
            try:
                document_pages(data)
            except MediaError as exc:
                raise InvalidField(field, str(exc)) from None
        return len(self.all_documents)


PASS_LINK_TTL_S = 30 * 60  # the spec: each save link expires after 30 minutes


def _bundle(named: list[tuple[str, bytes]]) -> bytes:
    """A .pkpasses bundle: the passes, each a .pkpass, in one zip (Wallet adds them all)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, data in named:
            archive.writestr(name, data)
    return out.getvalue()


def _file_stem(wallet_pass: WalletPass, number: int) -> str:
    surname = wallet_pass.passenger.rsplit(" ", 1)[-1]
    words = [f"{number:02d}", wallet_pass.flight, wallet_pass.origin, wallet_pass.destination,
             surname]
    return "-".join("".join(ch for ch in w if ch.isalnum()) for w in words if w)


async def boardingpass_wallet(ctx: ServiceContext, params: BoardingPassParams) -> ServiceResult:
    """One wallet pass per passenger per leg. Quoted per document; charged per pass found,
    up to the quote: documents that yield no pass are refunded (``partial_refund``)."""
    documents = await asyncio.to_thread(params.decoded)
    batch = await ctx.engines.run(
        "wallet_pass",
        WalletPassEngine,
        lambda engine, _model: engine.passes(documents),
    )
    if not batch.passes:
        raise EngineError(
            "INVALID_INPUT",
            "No boarding pass could be read: " + "; ".join(batch.warnings),
            may_fall_back=False,
        )
    entries: list[dict[str, Any]] = []
    named: list[tuple[str, bytes]] = []
    for number, wallet_pass in enumerate(batch.passes, 1):
        stored = await ctx.files.save(wallet_pass.pkpass, "pkpass", ttl_s=PASS_LINK_TTL_S)
        named.append((f"{_file_stem(wallet_pass, number)}.pkpass", wallet_pass.pkpass))
        entries.append({
            "passenger": wallet_pass.passenger,
            "flight": wallet_pass.flight,
            "from": wallet_pass.origin,
            "to": wallet_pass.destination,
            "date": wallet_pass.date,
            "seat": wallet_pass.seat,
            # Not in the barcode (IATA BCBP has no zone, gate or boarding time).
            "zone": None,
            "gate": None,
            "boarding_time": None,
            "class": wallet_pass.compartment,
            "sequence": wallet_pass.sequence,
            "pnr": wallet_pass.pnr,
            "barcode_format": wallet_pass.barcode_format,
            "document": wallet_pass.document + 1,
            "signed": wallet_pass.signed,
            "save_url": stored.url,
        })
    bundle = await asyncio.to_thread(_bundle, named)
    saved_all = await ctx.files.save(bundle, "pkpasses", ttl_s=PASS_LINK_TTL_S)
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=PASS_LINK_TTL_S)
    body = {
        "passes": entries,
        "count": len(entries),
        "save_all_url": saved_all.url,
        "links_expire_at": expires.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "signed": all(p.signed for p in batch.passes),
        "warnings": list(batch.warnings),
    }
    quoted = len(documents)
    charged = min(len(entries), quoted)
    return ServiceResult(
        body, charged_msat=charged * PER_PASS_SATS * MSAT if charged < quoted else None
    )


BOARDINGPASS_WALLET = ServiceSpec(
    slug="boardingpass-wallet",
    tool_name="boardingpass_wallet",
    category="utility",
    title="Boarding pass to wallet",
    description="Boarding passes (PDF or image, up to 8) to wallet passes: { passes, count, "
    "save_all_url, warnings, partial_refund? }; one Apple Wallet pass (.pkpass) per passenger "
    "per leg, read from the PDF417, Aztec or QR code. 100 sats per pass, quoted per document "
    "and refunded down to the passes found; save links expire after 30 minutes.",
    params=BoardingPassParams,
    price_msat=lambda p: len(p.all_documents) * PER_PASS_SATS * MSAT,
    handler=boardingpass_wallet,
    price_shape=PriceShape(
        "per_pass", "per pass", PER_PASS_SATS * MSAT,
        note="Quoted per document sent; a document holding fewer passes is refunded the "
        "difference after parsing.",
    ),
    model_ids=(47,),
    failure_codes=("INVALID_INPUT", "SERVICE_ERROR"),
    max_body_bytes=body_limit(*[PASS_DOC_MAX_BYTES] * MAX_PASS_DOCUMENTS),
    prevalidate=prevalidate,
    example={"documentBase64": "<base64 PDF>"},
    engine="wallet_pass",
)

SERVICES: tuple[ServiceSpec[Any], ...] = (
    EXTRACT_DOCUMENT,
    EXTRACT_RECEIPT,
    CONVERT_FILE,
    E_SIGNATURE,
    BOARDINGPASS_WALLET,
)

