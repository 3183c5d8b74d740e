"""Document services beyond documents.py: OCR (document, receipt), file conversion,
e-signature and boarding-pass wallet passes.

extract-document and extract-receipt run on the ``ocr`` engine (locally: the PDF text
layer, tesseract, RapidOCR; satsgate.engines.local.ocr). convert-file runs on this node
(satsgate.engines.local.convert: Pillow, WeasyPrint, pypdfium2, pandoc, LibreOffice,
ffmpeg) and is always available; a file whose tool is missing here is refused before
any invoice. boardingpass-wallet runs on the local ``wallet_pass`` engine
(satsgate/engines/local/pkpass.py: zxing-cpp, IATA BCBP, .pkpass, signed when a pass
certificate is configured); e-signature needs an ``esign`` engine (Documenso:
satsgate/engines/providers/documenso.py) and the ``email`` engine for the signed copy,
followed by satsgate.services.documents.esign_desk.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import io
import posixpath
import re
import zipfile
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from satsgate.engines import EngineError, esign
from satsgate.engines.local import convert as conv
from satsgate.engines.local import ocr as local_ocr
from satsgate.engines.local.receipt import parse_receipt
from satsgate.engines.ocr import OcrEngine, OcrRequest, OcrResult
from satsgate.engines.wallet_pass import WalletPass, WalletPassEngine
from satsgate.errors import ApiError, ErrorCode
from satsgate.files import DEFAULT_OUTPUT_CAPS
from satsgate.services.base import (
    FlatPrice,
    Params,
    PriceShape,
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.catalog.pricing import MSAT, PER_PAGE_SATS, PER_PASS_SATS
from satsgate.services.comms.screening import Outreach, screen
from satsgate.services.documents.esign_desk import new_request_id, status_url
from satsgate.services.inputs.media import (
    MediaError,
    document_pages,
    image_info,
    is_pdf,
    pdf_pages,
)
from satsgate.services.inputs.params import (
    InvalidField,
    MiB,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    check_email_address,
    decode_file,
    prevalidate,
)

# -- extract-document / extract-receipt ----------------------------------------------------

OCR_MAX_BYTES = 30 * MiB

# The language hint: ISO 639-1 codes and English names of the languages read locally.
OCR_LANGUAGES = {
    "en": "english", "de": "german", "fr": "french", "es": "spanish", "it": "italian",
    "pt": "portuguese", "nl": "dutch", "zh": "chinese", "ja": "japanese",
}  # fmt: skip
_OCR_LANGUAGE_NAMES = {name: code for code, name in OCR_LANGUAGES.items()}


@dataclass(frozen=True)
class _Document:
    data: bytes
    kind: Literal["pdf", "image"]
    pages: int


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
    language: str | None = Field(
        None,
        max_length=32,
        description="The text's language, to read scans and images with the right "
        "alphabet: en, de, fr, es, it, pt, nl, zh (Chinese) or ja (Japanese), or their "
        "English names; omit (or 'auto') to detect. A PDF's text layer needs none.",
    )

    @field_validator("language")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        if value is None or value.strip().lower() in ("", "auto"):
            return None
        key = value.strip().lower().replace("_", "-")
        code = key.split("-")[0] if key.split("-")[0] in OCR_LANGUAGES else None
        code = code or _OCR_LANGUAGE_NAMES.get(key)
        if code is None:
            raise ValueError(
                f"{value!r} is not read here: use one of {', '.join(OCR_LANGUAGES)} or auto"
            )
        return code

    def check(self) -> _Document:
        """Pages (the price's measure): counted from the PDF before payment."""
        data = decode_file(self.documentBase64, "documentBase64", OCR_MAX_BYTES)
        try:
            pages = document_pages(data, self.MAX_PAGES)
        except MediaError as exc:
            raise InvalidField("documentBase64", str(exc)) from None
        if pages > self.MAX_PAGES:
            raise InvalidField("documentBase64", f"{pages} pages; at most {self.MAX_PAGES}")
        if self.language is not None and not local_ocr.reads(self.language):
            raise ApiError(
                ErrorCode.SERVICE_UNAVAILABLE,
                f"OCR in {OCR_LANGUAGES[self.language].title()} is not installed on this "
                "node; nothing was charged.",
            )
        return _Document(data, "pdf" if is_pdf(data) else "image", pages)

    @property
    def document(self) -> _Document:
        doc: _Document = self.checked()
        return doc

    @property
    def pages(self) -> int:
        return self.document.pages


class ExtractDocumentParams(_OcrParams):
    MODELS: ClassVar[tuple[int, ...]] = (27,)
    DEFAULT: ClassVar[int] = 27


class ExtractReceiptParams(_OcrParams):
    MODELS: ClassVar[tuple[int, ...]] = (30,)
    DEFAULT: ClassVar[int] = 30
    MAX_PAGES: ClassVar[int] = 50


async def _read(
    ctx: ServiceContext, params: _OcrParams, layout: Literal["document", "receipt"]
) -> OcrResult:
    doc = params.document
    request = OcrRequest(doc.data, doc.kind, params.language, layout)
    result = await ctx.engines.run(
        "ocr",
        OcrEngine,
        lambda engine, _model: engine.read(request),
        model_id=params.chosen_model,
    )
    if not any(page.text.strip() for page in result.pages):
        raise EngineError(ErrorCode.INVALID_INPUT, "No text was found in the document.")
    return result


_MD_START = re.compile(r"^(\s{0,3})([#>]|[-=_*]{3,}\s*$|```|~~~)")


def to_markdown(result: OcrResult) -> str:
    """The pages as Markdown: paragraphs kept, pages apart by a rule; a line that
    Markdown would read as a heading, quote, rule or fence is escaped."""
    pages = []
    for page in result.pages:
        lines = [_MD_START.sub(r"\1\\\2", line) for line in page.text.split("\n")]
        pages.append("\n".join(lines).strip())
    return "\n\n---\n\n".join(pages).strip() + "\n"


async def extract_document(ctx: ServiceContext, params: ExtractDocumentParams) -> ServiceResult:
    result = await _read(ctx, params, "document")
    return ServiceResult(
        {
            "content": to_markdown(result),
            "pages": len(result.pages),
            "pageMethods": [page.method for page in result.pages],
            "modelId": params.chosen_model,
        }
    )


async def extract_receipt(ctx: ServiceContext, params: ExtractReceiptParams) -> ServiceResult:
    result = await _read(ctx, params, "receipt")
    raw = result.text
    return ServiceResult(
        {
            "structured": parse_receipt(raw),
            "rawText": raw,
            "pages": len(result.pages),
            "modelId": params.chosen_model,
        }
    )


EXTRACT_DOCUMENT = ServiceSpec(
    slug="extract-document",
    tool_name="extract_document",
    category="ocr",
    title="Extract document",
    description="Document (PDF or image) to Markdown: { content, pages }. A PDF's text layer "
    "is read as it is, scans and images by OCR (Latin-script languages, Chinese, "
    f"Japanese). {PER_PAGE_SATS['ocr']} sats per page.",
    params=ExtractDocumentParams,
    price_msat=lambda p, _book: p.pages * PER_PAGE_SATS["ocr"] * MSAT,
    handler=extract_document,
    price_shape=PriceShape(
        "per_page",
        "per page",
        PER_PAGE_SATS["ocr"] * MSAT,
        estimate="ocr",
        note="A PDF is counted by its pages, an image is one page.",
    ),
    untrusted_output=True,
    model_ids=(27,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR, ErrorCode.TIMEOUT),
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
    description="Receipt (PDF or image) to structured data: { structured: { merchant, date, "
    f"currency, total, tax, items }}, rawText }}. {PER_PAGE_SATS['receipt-ocr']} sats per page.",
    params=ExtractReceiptParams,
    price_msat=lambda p, _book: p.pages * PER_PAGE_SATS["receipt-ocr"] * MSAT,
    handler=extract_receipt,
    price_shape=PriceShape(
        "per_page",
        "per page",
        PER_PAGE_SATS["receipt-ocr"] * MSAT,
        estimate="receipt-ocr",
        note="A PDF is counted by its pages, an image is one page.",
    ),
    untrusted_output=True,
    model_ids=(30,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR, ErrorCode.TIMEOUT),
    max_body_bytes=body_limit(OCR_MAX_BYTES),
    prevalidate=prevalidate,
    example={"documentBase64": "<base64 JPEG>"},
    engine="ocr",
)

# -- convert-file (local) ------------------------------------------------------------------

CONVERT_MAX_BYTES = 20 * MiB
Target = Literal[
    "png", "jpeg", "webp", "gif", "bmp", "tiff", "pdf", "txt", "html", "md", "docx", "odt",
    "rtf", "epub", "xlsx", "ods", "csv", "pptx", "odp", "mp3", "wav", "flac", "ogg", "opus",
    "m4a", "mp4", "webm", "mkv", "mov",
]  # fmt: skip


@dataclass(frozen=True)
class _Conversion:
    data: bytes
    source: conv.Source
    tool: str  # "" (satsgate's own), pandoc, libreoffice or ffmpeg


class ConvertFileParams(ServiceParams, ModelChoice):
    MODELS: ClassVar[tuple[int, ...]] = (11,)
    DEFAULT: ClassVar[int] = 11

    file: str = Field(
        validation_alias=alias("file", "fileBase64", "documentBase64"),
        max_length=b64_chars(CONVERT_MAX_BYTES),
        description="The file as base64, at most 20 MB: an image, a PDF, an office or e-book "
        "file (DOCX, ODT, RTF, EPUB; DOC, XLS, XLSX, ODS, PPT, PPTX, ODP where the node has "
        "LibreOffice), audio (MP3, WAV, FLAC, Ogg, M4A; at most 60 minutes) or video (MP4, "
        "MOV, WebM, MKV, AVI; at most 5 minutes and 1920 px a side), or UTF-8 Markdown, "
        "HTML or text (say which with fileName).",
    )
    fileName: str | None = Field(
        None,
        max_length=255,
        validation_alias=alias("fileName", "file_name"),
        description="Original name; its extension tells text formats (.md, .html, .txt) and "
        "legacy Office files (.doc, .xls, .ppt) apart.",
    )
    targetFormat: Target = Field(
        validation_alias=alias("targetFormat", "target_format", "to", "format"),
        description="Images: png, jpeg, webp, gif, bmp, tiff, pdf. PDF: txt, png (every page; "
        "a ZIP of PNGs for several pages, at most 50). Markdown, HTML, text, DOCX, ODT, RTF, "
        "EPUB: pdf, txt, html, md, docx, odt, rtf, epub. Spreadsheets: pdf, xlsx, ods, csv. "
        "Presentations: pdf, pptx, odp. Audio: mp3, wav, flac, ogg, opus, m4a. Video: mp4, "
        "webm, mkv, mov, or its sound as an audio format.",
    )

    def check(self) -> _Conversion:
        data = decode_file(self.file, "file", CONVERT_MAX_BYTES)
        try:
            kind = conv.sniff(data, self.fileName)
            source = conv.Source(kind)
            if kind == "pdf":
                source = conv.Source("pdf", pages=pdf_pages(data))
            elif kind == "media":
                container = conv.media_container(data)
                assert container is not None
                if (missing := conv.missing_tool("ffmpeg")) is not None:
                    raise _unavailable("audio and video", missing)
                source = conv.probe_media(data, container)
        except ValueError as exc:
            raise InvalidField("file", str(exc)) from None
        targets = conv.targets_of(source.kind)
        if self.targetFormat not in targets:
            raise InvalidField(
                "targetFormat",
                f"{source.kind} converts to {', '.join(targets)}, not {self.targetFormat}",
            )
        if (
            source.kind == "video"
            and not source.has_audio
            and (self.targetFormat in conv.AUDIO_TARGETS)
        ):
            raise InvalidField("targetFormat", "the video has no sound to convert")
        if source.kind == "image":
            info = image_info(data)
            raw = conv.raw_image_bytes(info.width, info.height, self.targetFormat)
            if raw is not None and raw > DEFAULT_OUTPUT_CAPS["image"]:
                raise InvalidField(
                    "targetFormat",
                    f"{info.width}x{info.height} as {self.targetFormat} would be {raw:,} bytes: "
                    f"more than {DEFAULT_OUTPUT_CAPS['image']:,}; send a smaller image or "
                    "convert to png, jpeg or webp",
                )
        if self.targetFormat == "png" and (source.pages or 0) > conv.MAX_PNG_PAGES:
            raise InvalidField(
                "file", f"{source.pages} pages; at most {conv.MAX_PNG_PAGES} as PNG pages"
            )
        tool = conv.tool_for(source.kind, self.targetFormat)
        if (missing := conv.missing_tool(tool)) is not None:
            raise _unavailable(f"{source.kind} to {self.targetFormat}", missing)
        if tool == "libreoffice" and (why := conv.external_reference(data, source.kind)):
            raise InvalidField("file", why)
        return _Conversion(data, source, tool)


def _unavailable(what: str, missing: str) -> ApiError:
    return ApiError(
        ErrorCode.SERVICE_UNAVAILABLE,
        f"Converting {what} is not offered on this node ({missing}); nothing was charged.",
    )


_INLINE_MAX_BYTES = 5 * MiB


async def _converted(ctx: ServiceContext, job: _Conversion, target: str, title: str) -> bytes:
    kind, data = job.source.kind, job.data
    limit = ctx.settings.cpu_job_time_limit_s
    try:
        if job.tool == "ffmpeg":
            return await conv.ffmpeg_convert(data, job.source, target, limit)
        if job.tool == "libreoffice":
            return await conv.libreoffice_convert(data, kind, target, limit)
        if job.tool == "pandoc":
            out = await conv.pandoc_convert(data, kind, target, title, limit)
            return await ctx.run_cpu(conv.html_document_to_pdf, out) if target == "pdf" else out
    except conv.ToolFailed as exc:
        code = ErrorCode.TIMEOUT if exc.timed_out else ErrorCode.SERVICE_ERROR
        raise EngineError(code, f"The conversion failed: {exc}") from None
    if kind == "image":
        return await ctx.run_cpu(conv.convert_image, data, target)
    if kind == "pdf":
        return await ctx.run_cpu(conv.pdf_text, data)
    return await ctx.run_cpu(conv.text_document, data, kind, target)


async def convert_file(ctx: ServiceContext, params: ConvertFileParams) -> ServiceResult:
    job: _Conversion = params.checked()
    target = params.targetFormat
    body: dict[str, Any] = {"format": target, "sourceFormat": job.source.kind, "modelId": 11}
    if job.source.kind == "pdf" and target == "png":
        pages = await ctx.run_cpu(conv.pdf_to_pngs, job.data)
        stored_pages = [await ctx.files.save(page.data, "png") for page in pages]
        body["pages"] = [
            {"page": n, "file_url": f.url, "width": p.width, "height": p.height, "size": f.size}
            for n, (p, f) in enumerate(zip(pages, stored_pages, strict=True), 1)
        ]
        if len(pages) == 1:
            output, ext = pages[0].data, "png"
        else:
            output, ext = await ctx.run_cpu(conv.zip_pages, pages), "zip"
            body["format"] = "zip"
    else:
        title = posixpath.splitext(params.fileName or "")[0] or "Document"
        output, ext = await _converted(ctx, job, target, title), target
    stored = await ctx.files.save(output, ext)
    body.update(file_url=stored.url, size=len(output))
    if len(output) <= _INLINE_MAX_BYTES:
        body["file_base64"] = base64.b64encode(output).decode("ascii")
    return ServiceResult(body)


CONVERT_FILE = ServiceSpec(
    slug="convert-file",
    tool_name="convert_file",
    category="utility",
    title="Convert file",
    description="Convert images (PNG, JPEG, WebP, GIF, BMP, TIFF, to PDF too), PDF to text "
    "or PNG pages, Markdown, HTML, text, DOCX, ODT, RTF and EPUB among themselves and to "
    "PDF, spreadsheets and presentations (where LibreOffice is installed), audio and video "
    "containers: { file_url, file_base64, format }. Runs on this node.",
    params=ConvertFileParams,
    price_msat=FlatPrice.of_sats(100, "file-conversion"),
    handler=convert_file,
    model_ids=(11,),
    failure_codes=(
        ErrorCode.L402_INVALID_PARAMS,
        ErrorCode.SERVICE_UNAVAILABLE,
        ErrorCode.SERVICE_ERROR,
        ErrorCode.TIMEOUT,
    ),
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


class ESignatureParams(ServiceParams):
    """No model choice (model 46 is the service itself, as send-email's): the node's
    ``esign`` engine serves it without a ``[providers.NAME.models]`` entry."""

    documentBase64: str = Field(
        validation_alias=alias("documentBase64", "file", "document"),
        max_length=b64_chars(ESIGN_MAX_BYTES),
        description="The PDF to sign, base64, 20 MB.",
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


async def e_signature(ctx: ServiceContext, params: ESignatureParams) -> ServiceResult:
    """Screen what reaches people (the note, the signers' names), send the PDF for
    signature, record the request for the desk that delivers the signed copy
    (satsgate.services.documents.esign_desk). A failure before the request went out is an
    EngineError: refunded. Re-runnable from params alone (a held request's release)."""
    desk = ctx.esign
    if desk is None:
        raise EngineError(ErrorCode.SERVICE_ERROR, "E-signature requests cannot be followed here.")
    pages = await asyncio.to_thread(params.checked)
    pdf = await asyncio.to_thread(
        decode_file, params.documentBase64, "documentBase64", ESIGN_MAX_BYTES
    )
    signers = tuple(esign.Signer(s.name, s.email) for s in params.signers)
    names = ", ".join(s.name for s in signers)
    await screen(
        ctx,
        Outreach(
            channel="e_signature",
            recipients=(*(s.email for s in signers), params.customerEmail),
            text=f"Signers: {names}\n{params.note or ''}".strip(),
        ),
    )
    request_id = new_request_id()
    request = esign.SigningRequest(
        pdf=pdf,
        pages=int(pages),
        signers=signers,
        title=ESIGN_TITLE,
        message=params.note,
        reference=request_id,
    )
    sent = await ctx.engines.run(
        "esign",
        esign.ESignEngine,
        lambda engine, _model: engine.send_for_signature(request),
    )
    await desk.record(
        request_id=request_id,
        payment_id=ctx.call_id,  # the payment's id
        sent=sent,
        customer_email=params.customerEmail,
        signers_total=len(signers),
    )
    count = len(signers)
    return ServiceResult(
        {
            "success": True,
            "message": f"Sent for signature to {count} signer{'s' if count > 1 else ''}; "
            "the signed copy will be e-mailed to the customer once everyone has signed "
            "(hours to days).",
            "requestId": request_id,
            "status": "pending",
            "status_url": status_url(ctx.settings.public_base_url, request_id),
        }
    )


ESIGN_TITLE = "Document for signature"

E_SIGNATURE = ServiceSpec(
    slug="e-signature",
    tool_name="e_signature",
    category="utility",
    title="E-signature",
    description="Send a PDF for signature (each signer gets a signing link by e-mail; a "
    "signature field per signer on the last page); the signed copy is e-mailed to "
    "customerEmail as a PDF attachment once all signers have signed (hours to days): "
    "{ success, message, requestId, status, status_url }. Follow it free with "
    "GET status_url (tool get_e_signature_status). One price per document.",
    params=ESignatureParams,
    price_msat=FlatPrice.of_sats(1000, "e-signature"),
    handler=e_signature,
    model_ids=(46,),
    failure_codes=(
        ErrorCode.INVALID_INPUT,
        ErrorCode.SERVICE_ERROR,
        ErrorCode.TIMEOUT,
        ErrorCode.RATE_LIMITED,
        ErrorCode.CONTENT_POLICY_HELD,
        ErrorCode.RECIPIENT_OPTED_OUT,
    ),
    max_body_bytes=body_limit(ESIGN_MAX_BYTES),
    prevalidate=prevalidate,
    example={
        "documentBase64": "<base64 PDF>",
        "signers": [{"name": "Alice", "email": "alice@example.org"}],
        "customerEmail": "me@example.org",
    },
    engine="esign",
    recipients=lambda p: (*(s.email for s in p.signers), p.customerEmail),
    also_engines=("email",),  # the signed copy goes out through the e-mail engine
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
        None,
        validation_alias=alias("documentBase64", "file", "document"),
        max_length=b64_chars(PASS_DOC_MAX_BYTES),
        description="One boarding pass (PDF or image) as base64, at most 10 MB.",
    )
    documents: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_PASS_DOCUMENTS,
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
        return (
            [self.documentBase64] if self.documentBase64 is not None else list(self.documents or [])
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
    words = [
        f"{number:02d}",
        wallet_pass.flight,
        wallet_pass.origin,
        wallet_pass.destination,
        surname,
    ]
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
            ErrorCode.INVALID_INPUT,
            "No boarding pass could be read: " + "; ".join(batch.warnings),
            may_fall_back=False,
        )
    entries: list[dict[str, Any]] = []
    named: list[tuple[str, bytes]] = []
    for number, wallet_pass in enumerate(batch.passes, 1):
        stored = await ctx.files.save(wallet_pass.pkpass, "pkpass", ttl_s=PASS_LINK_TTL_S)
        named.append((f"{_file_stem(wallet_pass, number)}.pkpass", wallet_pass.pkpass))
        entries.append(
            {
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
            }
        )
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
    f"per leg, read from the PDF417, Aztec or QR code. {PER_PASS_SATS} sats per pass, quoted "
    "per document "
    "and refunded down to the passes found; save links expire after 30 minutes.",
    params=BoardingPassParams,
    price_msat=lambda p, _book: len(p.all_documents) * PER_PASS_SATS * MSAT,
    handler=boardingpass_wallet,
    price_shape=PriceShape(
        "per_pass",
        "per pass",
        PER_PASS_SATS * MSAT,
        note="Quoted per document sent; a document holding fewer passes is refunded the "
        "difference after parsing.",
    ),
    model_ids=(47,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR),
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
