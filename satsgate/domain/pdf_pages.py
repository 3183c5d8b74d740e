"""Reading a PDF before any work on it (pypdf): whether it is a readable, unencrypted
document with pages, and how many, refusing one of too many pages from the count its
page tree declares, before the walk that would cost seconds. Measured for prices
(satsgate.domain.media) and checked before a merge (satsgate.engines.local.pdf).
Synchronous and CPU-bound, on picklable values: it may run in a process pool."""

from __future__ import annotations

import io
from typing import Any

from pypdf import PdfReader


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


def open_pdf(data: bytes, index: int, max_pages: int | None = None) -> PdfReader:
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
    return len(open_pdf(data, index, max_pages).pages)


def count_pdf_pages(data: bytes) -> int:
    """Page count of a PDF; raises InvalidPdf (index 0) when it cannot be read."""
    return validate_pdf(data)
