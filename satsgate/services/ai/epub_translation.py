"""translate-epub's book handling: read an EPUB's XHTML documents, and write the translated
book back (the same members in the same order, ``mimetype`` first and stored, the
package's language set to the target).

Only each document's ``<body>`` content is translated (and the table of contents of an
EPUB 2 ``toc.ncx``: its ``<navMap>``), in chunks that end at a block element's end tag;
the rest of every file is copied byte for byte. Character references in the translated
part become the characters they stand for (engines read ``&eacute;`` as no letter), except
the five XML escapes, which stay as they are. Functions here are
pure and top-level so that they run in the process pool (``ctx.run_cpu``).
"""

from __future__ import annotations

import codecs
import html
import io
import posixpath
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from xml.etree import ElementTree

from satsgate.engines.local.language_id import SAMPLE_CHARS, plain_text

# A body longer than this is translated in pieces (one engine call each): small enough for
# a chat model's answer (its output limit), large where a local engine pays a start-up for
# each call and has no such limit.
CHUNK_CHARS = 30_000
LOCAL_CHUNK_CHARS = 100_000

_XHTML_TYPES = frozenset({"application/xhtml+xml", "text/html"})
_NCX_TYPE = "application/x-dtbncx+xml"
_BODY_OPEN = re.compile(r"<body\b[^>]*>", re.I)
_BODY_CLOSE = re.compile(r"</body\s*>", re.I)
_NAVMAP_OPEN = re.compile(r"<(?:\w+:)?navMap\b[^>]*>")
_NAVMAP_CLOSE = re.compile(r"</(?:\w+:)?navMap\s*>")
_REFERENCE = re.compile(r"&(#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
_XML_ESCAPED = frozenset("&<>\"'")
_BLOCK_END = re.compile(r"</(?:p|div|h[1-6]|li|blockquote|section|table|pre|ul|ol)\s*>", re.I)
_HTML_OPEN = re.compile(r"<(?:html|ncx)\b[^>]*>", re.I)  # an XHTML or NCX root
_LANG_ATTR = re.compile(r"(\s(?:xml:)?lang\s*=\s*)([\"'])[^\"']*\2")
_PACKAGE_OPEN = re.compile(r"<(?:\w+:)?package\b[^>]*>")
_DC_LANGUAGE = re.compile(r"(<dc:language\b[^>]*>)(.*?)(</dc:language\s*>)", re.S)
_METADATA_OPEN = re.compile(r"<(?:\w+:)?metadata\b[^>]*>")


class EpubError(ValueError):
    """The book cannot be read, or its translation would not be a sound EPUB."""


@dataclass(frozen=True)
class Document:
    name: str  # the member's path in the zip
    head: str  # up to and including the <body ...> start tag: kept as it is
    body: str  # the body's content: what is translated
    tail: str  # from </body> on: kept
    xml_ok: bool  # the original parses as XML (then the translation must, too)
    encoding: str = "utf-8"  # the original's, kept

    def chunks(self, size: int = CHUNK_CHARS) -> tuple[str, ...]:
        """The body in pieces of about ``size`` characters, each ending after a block
        element's end tag (or at the end), so no piece splits a tag or a sentence."""
        pieces: list[str] = []
        start = 0
        while len(self.body) - start > size:
            cut = None
            for match in _BLOCK_END.finditer(self.body, start, start + size):
                cut = match.end()
            if cut is None:  # no block end in reach: the next one, however far
                found = _BLOCK_END.search(self.body, start + size)
                cut = found.end() if found else len(self.body)
            pieces.append(self.body[start:cut])
            start = cut
        pieces.append(self.body[start:])
        return tuple(p for p in pieces if p)


@dataclass(frozen=True)
class EpubText:
    opf: str  # the package document's path
    # The XHTML documents with a body (and an NCX with a navMap), in manifest order.
    documents: tuple[Document, ...]

    def sample(self) -> str:
        """Plain text of the longest documents, for identifying the book's language."""
        text = ""
        for doc in sorted(self.documents, key=lambda d: -len(d.body)):
            text += plain_text(doc.body) + "\n"
            if len(text) >= SAMPLE_CHARS:
                break
        return text[:SAMPLE_CHARS]


def _encoding(raw: bytes) -> str:
    if raw.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if raw[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        return "utf-16"
    return "utf-8"


def _read_text(raw: bytes) -> str | None:
    try:
        return raw.decode(_encoding(raw))
    except UnicodeDecodeError:
        return None


def _characters(markup: str) -> str:
    """Character references (``&eacute;``, ``&#233;``) -> the characters; the XML escapes
    (``&amp;``, ``&#60;`` ...) and unknown names stay."""

    def one(match: re.Match[str]) -> str:
        char = html.unescape(match[0])
        if char == match[0] or len(char) != 1 or char in _XML_ESCAPED:
            return match[0]
        return char

    return _REFERENCE.sub(one, markup)


def _split(
    text: str, opening: re.Pattern[str], closing: re.Pattern[str]
) -> tuple[str, str, str] | None:
    """(up to and including the opening tag, the content, from the last closing tag on)."""
    opened = opening.search(text)
    if opened is None:
        return None
    closes = list(closing.finditer(text, opened.end()))
    if not closes:
        return None
    closed = closes[-1]
    return text[: opened.end()], text[opened.end() : closed.start()], text[closed.start() :]


def _parses(raw: bytes) -> bool:
    try:
        ElementTree.fromstring(raw)
    except ElementTree.ParseError:
        return False
    return True


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def read_epub(data: bytes) -> EpubText:
    """The book's package path and its XHTML documents; EpubError if it is no EPUB."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as book:
            container = ElementTree.fromstring(book.read("META-INF/container.xml"))
            rootfile = next(
                (e.get("full-path") for e in container.iter() if _local(e.tag) == "rootfile"),
                None,
            )
            if not rootfile:
                raise EpubError("META-INF/container.xml names no package document")
            package = ElementTree.fromstring(book.read(rootfile))
            base = posixpath.dirname(rootfile)
            names = set(book.namelist())
            documents = []
            for item in package.iter():
                media_type = item.get("media-type")
                if _local(item.tag) != "item" or (
                    media_type not in _XHTML_TYPES and media_type != _NCX_TYPE
                ):
                    continue
                href = item.get("href") or ""
                name = posixpath.normpath(posixpath.join(base, href.split("#", 1)[0]))
                if name not in names:
                    continue
                raw = book.read(name)
                text = _read_text(raw)
                if text is None:
                    continue
                parts = (
                    _split(text, _NAVMAP_OPEN, _NAVMAP_CLOSE)
                    if media_type == _NCX_TYPE
                    else _split(text, _BODY_OPEN, _BODY_CLOSE)
                )
                if parts is None:
                    continue
                head, body, tail = parts
                documents.append(
                    Document(
                        name,
                        head,
                        _characters(body),
                        tail,
                        _parses(raw),
                        _encoding(raw),
                    )
                )
    except EpubError:
        raise
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError, OSError, EOFError) as exc:
        raise EpubError(f"the EPUB cannot be read: {type(exc).__name__}") from None
    except Exception as exc:  # corrupt members: zlib, unsupported compression, ...
        raise EpubError(f"the EPUB cannot be read: {type(exc).__name__}") from None
    return EpubText(rootfile, tuple(documents))


def _set_html_lang(head: str, language: str) -> str:
    opened = _HTML_OPEN.search(head)
    if opened is None:
        return head
    tag = _LANG_ATTR.sub(lambda m: f"{m[1]}{m[2]}{language}{m[2]}", opened[0])
    return head[: opened.start()] + tag + head[opened.end() :]


def _set_package_language(opf: str, language: str) -> str:
    seen = False

    def one(match: re.Match[str]) -> str:
        nonlocal seen
        if seen:  # the book is in one language now
            return ""
        seen = True
        return f"{match[1]}{language}{match[3]}"

    opf = _DC_LANGUAGE.sub(one, opf)
    if not seen:
        meta = _METADATA_OPEN.search(opf)
        if meta is not None:
            element = f"<dc:language>{language}</dc:language>"
            opf = opf[: meta.end()] + element + opf[meta.end() :]
    package = _PACKAGE_OPEN.search(opf)
    if package is not None:
        tag = _LANG_ATTR.sub(lambda m: f"{m[1]}{m[2]}{language}{m[2]}", package[0])
        opf = opf[: package.start()] + tag + opf[package.end() :]
    return opf


def write_epub(data: bytes, book: EpubText, bodies: Mapping[str, str], language: str) -> bytes:
    """The original EPUB with each document's body replaced by ``bodies[name]`` and the
    language set to ``language``: ``mimetype`` first and stored, then every other member
    in its original order. EpubError when a translated document that was well-formed XML
    is no longer (the book would not open)."""
    replaced: dict[str, bytes] = {}
    for doc in book.documents:
        if doc.name not in bodies:
            continue
        text = _set_html_lang(doc.head, language) + bodies[doc.name] + doc.tail
        raw = text.encode(doc.encoding)
        if doc.xml_ok and not _parses(raw):
            raise EpubError(f"the translation of {doc.name} is not well-formed XHTML")
        replaced[doc.name] = raw
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        mimetype = zipfile.ZipInfo("mimetype", date_time=(1980, 1, 1, 0, 0, 0))
        target.writestr(mimetype, b"application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for info in source.infolist():
            if info.filename == "mimetype" or info.is_dir():
                continue
            content = replaced.get(info.filename)
            if content is None:
                content = source.read(info)
                if info.filename == book.opf:
                    opf = _read_text(content)
                    if opf is not None:
                        content = _set_package_language(opf, language).encode(_encoding(content))
            member = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            member.external_attr = info.external_attr
            target.writestr(member, content, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()
