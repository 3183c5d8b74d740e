"""The OCR capability: a document (PDF or image) in, its text page by page out.

Shared by the services (extract-document, extract-receipt) and the adapters
(satsgate.engines.local.ocr, and any remote OCR provider).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

# How a page's text was obtained.
OcrMethod = Literal["text-layer", "tesseract", "rapidocr", "provider"]


@dataclass(frozen=True)
class OcrRequest:
    data: bytes  # a PDF or an image, already checked before payment
    kind: Literal["pdf", "image"]
    # ISO 639-1 code of the text's language ("en", "de", "zh" ...), or None: detect.
    language: str | None = None
    # "receipt": one column of short lines, amounts kept on their item's line.
    layout: Literal["document", "receipt"] = "document"


@dataclass(frozen=True)
class OcrPage:
    # Paragraphs separated by a blank line, lines of a paragraph by a newline.
    text: str
    method: OcrMethod
    confidence: float | None = None  # mean word confidence 0..1 (OCR only)


@dataclass(frozen=True)
class OcrResult:
    pages: tuple[OcrPage, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(p.text for p in self.pages if p.text)


class OcrEngine(Protocol):
    async def read(self, request: OcrRequest) -> OcrResult:
        """The text of every page; EngineError on failure."""
        ...
