"""extract-document and extract-receipt: text (Markdown) and receipt fields from a PDF
or image, on the ``ocr`` engine (locally: the PDF text layer, tesseract, RapidOCR;
satsgate.engines.local.ocr; receipts parsed by satsgate.engines.local.receipt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from satsgate.domain.media import (
    document_pages,
    is_pdf,
)
from satsgate.engines import EngineError
from satsgate.engines.local import ocr as local_ocr
from satsgate.engines.local.receipt import parse_receipt
from satsgate.engines.ocr import OcrEngine, OcrRequest, OcrResult
from satsgate.errors import ApiError, ErrorCode
from satsgate.services.base import (
    ServiceContext,
    ServiceResult,
    ServiceSpec,
)
from satsgate.services.catalog.pricing import OCR_PRICE, PER_PAGE_SATS, RECEIPT_OCR_PRICE
from satsgate.services.inputs.params import (
    InvalidField,
    MiB,
    ModelChoice,
    ServiceParams,
    alias,
    b64_chars,
    body_limit,
    decode_file,
    read_media,
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
        pages = read_media(data, "documentBase64", lambda d: document_pages(d, self.MAX_PAGES))
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
    price_msat=OCR_PRICE,
    handler=extract_document,
    untrusted_output=True,
    model_ids=(27,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR, ErrorCode.TIMEOUT),
    max_body_bytes=body_limit(OCR_MAX_BYTES),
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
    price_msat=RECEIPT_OCR_PRICE,
    handler=extract_receipt,
    untrusted_output=True,
    model_ids=(30,),
    failure_codes=(ErrorCode.INVALID_INPUT, ErrorCode.SERVICE_ERROR, ErrorCode.TIMEOUT),
    max_body_bytes=body_limit(OCR_MAX_BYTES),
    example={"documentBase64": "<base64 JPEG>"},
    engine="ocr",
)

SERVICES: tuple[ServiceSpec[Any], ...] = (EXTRACT_DOCUMENT, EXTRACT_RECEIPT)
