"""HTML or Markdown to PDF (WeasyPrint) and PDF merging and validation (pypdf).

Every function is synchronous, CPU-bound and takes and returns picklable values, so it can
run in a process pool. Caller HTML never makes the server fetch anything: the URL fetcher
refuses every scheme but ``data:`` (no http(s), no file://, no ftp), and with no base URL a
relative reference resolves to nothing. A refused resource is left out of the document,
like an image a browser blocks; the rendering itself goes on.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from PIL import ImageFile
from pypdf import PdfReader, PdfWriter
from weasyprint import HTML
from weasyprint.urls import URLFetcher

# Importing WeasyPrint turns on Pillow's LOAD_TRUNCATED_IMAGES for the whole process; a
# pool worker that once rendered a PDF would then decode every truncated image a caller
# sends to the other engines (upscale, OCR ...) as if it were whole. Off again: a broken
# image in a document is left out by WeasyPrint, as it does with any unreadable image.
ImageFile.LOAD_TRUNCATED_IMAGES = False

_MARKDOWN_CSS = """
@page {
  size: A4;
  margin: 20mm 18mm 22mm 18mm;
  @bottom-center {
    content: counter(page) " / " counter(pages);
    font-size: 8.5pt;
    color: #6b7280;
  }
}
html {
  font-family: "DejaVu Sans", "Noto Sans", "WenQuanYi Micro Hei", sans-serif;
  font-size: 10.5pt;
  line-height: 1.5;
  color: #111827;
}
body { margin: 0; }
h1, h2, h3, h4, h5, h6 { line-height: 1.25; margin: 1.2em 0 0.5em; color: #0f172a; }
h1 { font-size: 20pt; border-bottom: 1.5pt solid #f7931a; padding-bottom: 4pt; }
h2 { font-size: 15pt; }
h3 { font-size: 12.5pt; }
h4, h5, h6 { font-size: 10.5pt; }
h1:first-child, h2:first-child, h3:first-child { margin-top: 0; }
p, ul, ol, table, pre, blockquote { margin: 0 0 0.8em; }
a { color: #1d4ed8; text-decoration: none; }
code, pre { font-family: "DejaVu Sans Mono", monospace; font-size: 9pt; }
code { background: #f3f4f6; padding: 0 2pt; border-radius: 2pt; }
pre {
  background: #f3f4f6;
  padding: 7pt 9pt;
  border-radius: 4pt;
  white-space: pre-wrap;
  overflow-wrap: anywhere;
}
pre code { background: none; padding: 0; }
blockquote {
  margin-left: 0;
  padding: 2pt 0 2pt 10pt;
  border-left: 3pt solid #f7931a;
  color: #4b5563;
}
table { border-collapse: collapse; width: 100%; }
th, td { border: 0.5pt solid #d1d5db; padding: 4pt 6pt; text-align: left; vertical-align: top; }
th { background: #f3f4f6; }
hr { border: none; border-top: 0.75pt solid #d1d5db; margin: 1.2em 0; }
img { max-width: 100%; }
"""


@dataclass(frozen=True)
class RenderedPdf:
    """A PDF document and its page count."""

    data: bytes
    pages: int


class InvalidPdf(ValueError):
    """Input document ``index`` (0-based) is not a readable, unencrypted PDF with pages."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(index, reason)
        self.index = index
        self.reason = reason

    def __str__(self) -> str:
        return f"document {self.index} is not a usable PDF: {self.reason}"


class TooManyPages(InvalidPdf):
    """Input document ``index`` has more pages than the caller allows."""


class _DataUrlsOnly(URLFetcher):  # type: ignore[misc]  # weasyprint ships no type hints
    """A WeasyPrint fetcher that serves ``data:`` URIs and refuses everything else."""

    def __init__(self) -> None:
        super().__init__(allowed_protocols=("data",), allow_redirects=False, timeout=1)

    def fetch(self, url: str, headers: Any = None) -> Any:
        scheme = urlsplit(url.strip()).scheme.lower()
        if scheme != "data":
            raise ValueError(f"fetching {scheme or 'relative'} URLs is disabled: {url[:200]}")
        return super().fetch(url, headers)


def html_to_pdf(html: str) -> RenderedPdf:
    """Render an HTML document to PDF; only ``data:`` resources are loaded."""
    document = HTML(string=html, base_url=None, url_fetcher=_DataUrlsOnly()).render()
    data = document.write_pdf()
    assert isinstance(data, bytes)
    return RenderedPdf(data, len(document.pages))


@functools.cache
def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def markdown_to_html(markdown: str) -> str:
    """The full HTML page markdown_to_pdf renders: raw HTML in the Markdown is shown as text."""
    body = _markdown().render(markdown)
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<style>{_MARKDOWN_CSS}</style></head><body>{body}</body></html>"
    )


def markdown_to_pdf(markdown: str) -> RenderedPdf:
    """Render Markdown (CommonMark with tables) to an A4 PDF with a clean default style."""
    return html_to_pdf(markdown_to_html(markdown))


def _open(data: bytes, index: int, max_pages: int | None = None) -> PdfReader:
    """A reader for a readable, unencrypted PDF with at least one page (and at most
    ``max_pages``), or InvalidPdf. The page count the document declares is read first
    (the page tree's root, without walking it), so that a file of 100,000 pages is
    refused before the walk that would cost seconds."""
    if not isinstance(data, bytes | bytearray):
        raise InvalidPdf(index, "not bytes")
    if not data:
        raise InvalidPdf(index, "empty file")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise InvalidPdf(index, "encrypted PDFs are not accepted")
        if max_pages is not None:
            declared = _declared_pages(reader)
            if declared is not None and declared > max_pages:
                raise TooManyPages(index, f"{declared} pages; at most {max_pages}")
        pages = reader.pages
        if max_pages is not None and len(pages) > max_pages:  # a root that understated it
            raise TooManyPages(index, f"{len(pages)} pages; at most {max_pages}")
        if len(pages) == 0:
            raise InvalidPdf(index, "no pages")
        for page in pages:
            page.mediabox  # noqa: B018  # resolves each page object: a broken tree fails here
    except InvalidPdf:
        raise
    except Exception as error:  # pypdf raises many types on malformed input
        raise InvalidPdf(index, f"{type(error).__name__}: {error}"[:300]) from None
    return reader


def _declared_pages(reader: PdfReader) -> int | None:
    """The /Count of the page tree's root: what the file says, not yet checked."""
    try:
        root: Any = reader.trailer["/Root"]  # pypdf types the objects loosely
        return int(root["/Pages"]["/Count"])
    except Exception:  # a missing or odd root: the walk decides
        return None


def validate_pdf(data: bytes, max_pages: int | None = None, index: int = 0) -> int:
    """Page count of a readable, unencrypted PDF of at most ``max_pages`` pages; raises
    InvalidPdf (with ``index``) otherwise."""
    return len(_open(data, index, max_pages).pages)


def count_pdf_pages(data: bytes) -> int:
    """Page count of a PDF; raises InvalidPdf (index 0) when it cannot be read."""
    return validate_pdf(data)


def merge_pdfs(documents: Sequence[bytes]) -> RenderedPdf:
    """All pages of ``documents``, in order, as one PDF; every input is checked first."""
    if not documents:
        raise ValueError("merge needs at least one document")
    readers = [_open(data, index) for index, data in enumerate(documents)]
    writer = PdfWriter()
    for index, reader in enumerate(readers):
        try:
            for page in reader.pages:
                writer.add_page(page)
        except Exception as error:
            raise InvalidPdf(index, f"{type(error).__name__}: {error}"[:300]) from None
    buffer = io.BytesIO()
    writer.write(buffer)
    return RenderedPdf(buffer.getvalue(), len(writer.pages))


__all__ = [
    "InvalidPdf",
    "RenderedPdf",
    "TooManyPages",
    "count_pdf_pages",
    "html_to_pdf",
    "markdown_to_html",
    "markdown_to_pdf",
    "merge_pdfs",
    "validate_pdf",
]
