"""HTML or Markdown to PDF (WeasyPrint) and PDF merging (pypdf); reading and checking a
PDF is satsgate.domain.pdf_pages'.

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
from pypdf import PdfWriter
from weasyprint import HTML
from weasyprint.urls import URLFetcher

from satsgate.domain.pdf_pages import InvalidPdf, open_pdf
from satsgate.engines.local.image_support import ImageOpError

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
    """Render an HTML document to PDF; only ``data:`` resources are loaded. ImageOpError
    when an embedded image's data does not decode (the caller's input, not our fault)."""
    try:
        document = HTML(string=html, base_url=None, url_fetcher=_DataUrlsOnly()).render()
        data = document.write_pdf()
    except (OSError, SyntaxError) as exc:  # PIL on an image's broken data
        raise ImageOpError(f"an embedded image cannot be decoded ({exc})"[:300]) from None
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


def merge_pdfs(documents: Sequence[bytes]) -> RenderedPdf:
    """All pages of ``documents``, in order, as one PDF; every input is checked first."""
    if not documents:
        raise ValueError("merge needs at least one document")
    readers = [open_pdf(data, index) for index, data in enumerate(documents)]
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
    "RenderedPdf",
    "html_to_pdf",
    "markdown_to_html",
    "markdown_to_pdf",
    "merge_pdfs",
]
