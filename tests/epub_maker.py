"""Small EPUB 3 files built by hand (a zip with the container, the package document, a
navigation document and XHTML chapters), for the audiobook tests and the bench."""

from __future__ import annotations

import html
import io
import zipfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Doc:
    name: str  # file name inside OEBPS/
    body: str  # XHTML body markup
    title: str = "Untitled"
    nav: bool = False  # the EPUB 3 navigation document
    linear: bool = True
    epub_type: str = ""  # on <body>: "cover", "toc", ...


def xhtml(doc: Doc) -> str:
    kind = f' epub:type="{doc.epub_type}"' if doc.epub_type else ""
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
        f"<head><title>{html.escape(doc.title)}</title></head><body{kind}>{doc.body}</body></html>"
    )


def make_epub(title: str, docs: list[Doc]) -> bytes:
    nav, nonlinear = ' properties="nav"', ' linear="no"'
    manifest = "".join(
        f'<item id="d{i}" href="{d.name}" media-type="application/xhtml+xml"'
        f"{nav if d.nav else ''}/>"
        for i, d in enumerate(docs)
    )
    spine = "".join(
        f'<itemref idref="d{i}"{"" if d.linear else nonlinear}/>' for i, d in enumerate(docs)
    )
    opf = (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="id">urn:uuid:test</dc:identifier><dc:title>{html.escape(title)}'
        "</dc:title><dc:language>en</dc:language></metadata>"
        f"<manifest>{manifest}</manifest><spine>{spine}</spine></package>"
    )
    container = (
        '<?xml version="1.0"?><container version="1.0" '
        'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", container, zipfile.ZIP_DEFLATED)
        archive.writestr("OEBPS/content.opf", opf, zipfile.ZIP_DEFLATED)
        for doc in docs:
            archive.writestr(f"OEBPS/{doc.name}", xhtml(doc), zipfile.ZIP_DEFLATED)
    return out.getvalue()


def nav_doc(titles: list[str]) -> Doc:
    items = "".join(f"<li><a href='c{i}.xhtml'>{html.escape(t)}</a></li>"
                    for i, t in enumerate(titles))  # fmt: skip
    return Doc("nav.xhtml", f'<nav epub:type="toc"><h1>Contents</h1><ol>{items}</ol></nav>',
               "Contents", nav=True)  # fmt: skip


def chapter(index: int, title: str, paragraphs: list[str], extra: str = "") -> Doc:
    body = f"<h1>{html.escape(title)}</h1>" + "".join(
        f"<p>{html.escape(p)}</p>" for p in paragraphs
    )
    return Doc(f"c{index}.xhtml", body + extra, title)


_TEXT = (
    "the river ran past the old mill and the children walked along its bank every morning "
    "while the baker opened his shop and the town woke slowly under a grey sky that promised "
    "rain by noon but nobody seemed to mind because the market was full of apples and bread "
    "and the smell of coffee drifted from the square where the old men talked about the "
    "harvest and the weather and the price of wheat in the city far to the south"
)
_WORDS = _TEXT.split()


def prose(words: int, seed: int) -> list[str]:
    """Plain English paragraphs of about ``words`` words (deterministic, all different)."""
    paragraphs: list[str] = []
    count, state = 0, seed * 7919 + 1
    while count < words:
        size = 60 + state % 40
        sentence_words = []
        for _ in range(size):
            state = (state * 1103515245 + 12345) % 2**31
            sentence_words.append(_WORDS[state % len(_WORDS)])
        text = " ".join(sentence_words)
        sentences = [s.strip().capitalize() for s in text.split(" and the ") if s.strip()]
        paragraphs.append(". ".join(sentences) + f". That was day {seed}-{len(paragraphs)}.")
        count += size
    return paragraphs
