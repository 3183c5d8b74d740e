"""Measuring caller files before payment: image format, audio duration, PDF pages, book text.

Prices per minute, page or character are computed from the uploaded file
before the invoice, so these readers run on untrusted bytes: each reads only
headers or bounded amounts and raises :class:`MediaError` (a ValueError) on
anything it cannot measure. All are synchronous and CPU-bound; services call
them from a worker thread.
"""

from __future__ import annotations

import html.parser
import io
import posixpath
import struct
import warnings
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from PIL import Image
from pypdf import PdfReader

from satsgate.domain.pdf_pages import InvalidPdf, TooManyPages, validate_pdf


class MediaError(ValueError):
    pass


# -- images --------------------------------------------------------------------------------

IMAGE_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF"})
MAX_IMAGE_PIXELS = 40_000_000


@dataclass(frozen=True)
class ImageInfo:
    format: str
    width: int
    height: int


def image_info(data: bytes) -> ImageInfo:
    """Format and size from the header (pixels are not decoded)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as img:
                fmt, (width, height) = str(img.format), img.size
    except Exception as exc:  # Pillow raises many types on malformed input
        raise MediaError("not a readable image (PNG, JPEG, WebP, GIF, BMP or TIFF)") from exc
    if fmt not in IMAGE_FORMATS:
        raise MediaError(f"image format {fmt} is not accepted")
    if width * height > MAX_IMAGE_PIXELS:
        raise MediaError(f"image is {width}x{height}: more than {MAX_IMAGE_PIXELS} pixels")
    return ImageInfo(fmt, width, height)


# -- audio ---------------------------------------------------------------------------------


def audio_format(data: bytes) -> str:
    """wav, flac, ogg, mp3 or m4a by magic bytes; MediaError otherwise."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    if data[4:8] == b"ftyp":
        return "m4a"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    raise MediaError("not a supported audio file (mp3, wav, flac, ogg, m4a)")


def audio_duration_s(data: bytes) -> float:
    """Duration in seconds from the container headers."""
    fmt = audio_format(data)
    try:
        seconds: float = _DURATION[fmt](data)
    except (struct.error, IndexError, ZeroDivisionError, KeyError) as exc:
        raise MediaError(f"cannot read the {fmt} header") from exc
    if not seconds > 0:
        raise MediaError(f"the {fmt} file has no audio")
    return seconds


def _wav(data: bytes) -> float:
    pos, byte_rate, data_size = 12, 0, None
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        if chunk == b"fmt ":
            byte_rate = struct.unpack_from("<I", data, pos + 16)[0]
        elif chunk == b"data":
            data_size = min(size, len(data) - pos - 8)
            break
        pos += 8 + size + (size & 1)
    if data_size is None or not byte_rate:
        raise MediaError("WAV without fmt or data chunk")
    return float(data_size / byte_rate)


def _flac(data: bytes) -> float:
    pos = 4
    while pos + 4 <= len(data):
        header = data[pos]
        length = int.from_bytes(data[pos + 1 : pos + 4], "big")
        if header & 0x7F == 0:  # STREAMINFO
            bits = int.from_bytes(data[pos + 14 : pos + 22], "big")
            rate, samples = bits >> 44, bits & ((1 << 36) - 1)
            return float(samples / rate)
        if header & 0x80:
            break
        pos += 4 + length
    raise MediaError("FLAC without STREAMINFO")


def _ogg(data: bytes) -> float:
    if b"OpusHead" in data[:512]:
        head = data.index(b"OpusHead")
        pre_skip = struct.unpack_from("<H", data, head + 10)[0]
        rate = 48000
    elif b"\x01vorbis" in data[:512]:
        head = data.index(b"\x01vorbis")
        rate, pre_skip = struct.unpack_from("<I", data, head + 12)[0], 0
    else:
        raise MediaError("Ogg stream is neither Vorbis nor Opus")
    last = data.rfind(b"OggS")
    granule = struct.unpack_from("<q", data, last + 6)[0]
    return float((granule - pre_skip) / rate)


_MP3_BITRATES = {
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _mp3(data: bytes) -> float:
    pos = 0
    if data[:3] == b"ID3":
        size = 0
        for b in data[6:10]:
            size = (size << 7) | (b & 0x7F)
        pos = 10 + size + (10 if data[5] & 0x10 else 0)
    # The first valid frame header within 64 KiB.
    end = min(len(data) - 4, pos + 65536)
    while pos < end:
        if data[pos] == 0xFF and data[pos + 1] & 0xE0 == 0xE0:
            version = (data[pos + 1] >> 3) & 3  # 3: MPEG1, 2: MPEG2, 0: MPEG2.5
            layer = (data[pos + 1] >> 1) & 3  # 1: Layer III
            bitrate_index = data[pos + 2] >> 4
            rate_index = (data[pos + 2] >> 2) & 3
            if version != 1 and layer == 1 and 0 < bitrate_index < 15 and rate_index < 3:
                break
        pos += 1
    else:
        raise MediaError("no MPEG Layer III frame found")
    mpeg1 = version == 3
    bitrate = _MP3_BITRATES[1 if mpeg1 else 2][bitrate_index] * 1000
    rate = _MP3_RATES[version][rate_index]
    samples_per_frame = 1152 if mpeg1 else 576
    mono = (data[pos + 3] >> 6) == 3
    side = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    xing = pos + 4 + side
    if data[xing : xing + 4] in (b"Xing", b"Info"):
        flags = struct.unpack_from(">I", data, xing + 4)[0]
        if flags & 1:
            frames = struct.unpack_from(">I", data, xing + 8)[0]
            return float(frames * samples_per_frame / rate)
    if data[pos + 36 : pos + 40] == b"VBRI":
        frames = struct.unpack_from(">I", data, pos + 36 + 14)[0]
        return float(frames * samples_per_frame / rate)
    audio_bytes = len(data) - pos - (128 if data[-128:-125] == b"TAG" else 0)
    return audio_bytes * 8 / bitrate  # constant bit rate


def _m4a(data: bytes) -> float:
    def boxes(start: int, stop: int) -> list[tuple[bytes, int, int]]:
        found, pos = [], start
        while pos + 8 <= stop:
            size, kind = struct.unpack_from(">I4s", data, pos)
            header = 8
            if size == 1:
                size, header = struct.unpack_from(">Q", data, pos + 8)[0], 16
            elif size == 0:
                size = stop - pos
            if size < header:
                break
            found.append((kind, pos + header, min(pos + size, stop)))
            pos += size
        return found

    for kind, start, stop in boxes(0, len(data)):
        if kind != b"moov":
            continue
        for inner, body, _end in boxes(start, stop):
            if inner == b"mvhd":
                if data[body] == 1:
                    timescale, duration = struct.unpack_from(">IQ", data, body + 20)
                else:
                    timescale, duration = struct.unpack_from(">II", data, body + 12)
                return float(duration / timescale)
    raise MediaError("MP4 audio without a movie header (moov/mvhd)")


_DURATION = {"wav": _wav, "flac": _flac, "ogg": _ogg, "mp3": _mp3, "m4a": _m4a}


# -- documents -----------------------------------------------------------------------------


def pdf_pages(data: bytes, max_pages: int | None = None) -> int:
    """The page count of a usable PDF of at most ``max_pages`` pages; MediaError."""
    try:
        return validate_pdf(data, max_pages)
    except TooManyPages as exc:
        raise MediaError(exc.reason) from None
    except InvalidPdf as exc:
        raise MediaError(f"not a usable PDF: {exc.reason}") from None


def is_pdf(data: bytes) -> bool:
    return data[:1024].lstrip().startswith(b"%PDF-")


def document_pages(data: bytes, max_pages: int | None = None) -> int:
    """Pages of an uploaded document: a PDF's page count (at most ``max_pages``, refused
    before its pages are walked); an image counts 1."""
    if is_pdf(data):
        return pdf_pages(data, max_pages)
    image_info(data)
    return 1


# -- books: visible characters -------------------------------------------------------------

MAX_BOOK_UNPACKED = 300 * 1024 * 1024  # zip-bomb guard for EPUBs
# A book's chapters: an EPUB's spine documents, a PDF's pages. Measuring a book runs
# before any invoice, and a spine can name one file thousands of times: these bound it.
MAX_BOOK_CHAPTERS = 2_000
MAX_BOOK_SPINE_BYTES = 100 * 1024 * 1024  # the spine's documents read, repeats counted


class _TextOf(html.parser.HTMLParser):
    _SKIP = frozenset({"script", "style", "head", "title", "svg", "math"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def visible_chars(text: str) -> int:
    """Characters a reader sees: whitespace runs count as one space."""
    return len(" ".join(text.split()))


def html_text(markup: str) -> str:
    """The text of an HTML document as a reader sees it (no script, style or head)."""
    parser = _TextOf()
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts)


def html_visible_chars(markup: str) -> int:
    return visible_chars(html_text(markup))


@dataclass(frozen=True)
class Book:
    format: str  # epub, pdf or txt
    chapters: tuple[int, ...]  # visible characters per chapter (EPUB spine item, PDF page)

    @property
    def chars(self) -> int:
        return sum(self.chapters)

    def chars_of(self, indices: list[int] | None) -> int:
        if indices is None:
            return self.chars
        bad = [i for i in indices if not 0 <= i < len(self.chapters)]
        if bad:
            raise MediaError(
                f"chapter indices {bad} out of range: the book has {len(self.chapters)} chapters"
            )
        return sum(self.chapters[i] for i in set(indices))


@dataclass(frozen=True)
class EpubDocument:
    """One spine entry of an EPUB that names a file: its manifest item's attributes, the
    itemref's, and the document's markup."""

    item: Mapping[str, str]
    itemref: Mapping[str, str]
    markup: str


def read_epub(data: bytes) -> tuple[str | None, Iterator[EpubDocument]]:
    """An EPUB's title and its spine documents in reading order, read one at a time. The
    price (chapter sizes) and the narration both walk the book through this, so they
    always count the same chapters. MediaError on a file that is not a readable EPUB."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise MediaError("not an EPUB (zip) file") from exc
    if sum(info.file_size for info in archive.infolist()) > MAX_BOOK_UNPACKED:
        archive.close()
        raise MediaError("the EPUB unpacks to more than 300 MB")
    try:
        container = ET.fromstring(archive.read("META-INF/container.xml"))
        rootfile = next(el for el in container.iter() if el.tag.endswith("rootfile"))
        opf_path = rootfile.attrib["full-path"]
        opf = ET.fromstring(archive.read(opf_path))
    except (KeyError, StopIteration, ET.ParseError) as exc:
        archive.close()
        raise MediaError("EPUB without a readable package document") from exc
    title = next(
        (" ".join((el.text or "").split()) for el in opf.iter() if el.tag.endswith("}title")),
        None,
    )

    def documents() -> Iterator[EpubDocument]:
        base = posixpath.dirname(opf_path)
        items = {
            el.attrib.get("id"): el.attrib
            for el in opf.iter()
            if el.tag.endswith("}item") or el.tag == "item"
        }
        chapters = spine_bytes = 0
        with archive:
            for itemref in (el for el in opf.iter() if el.tag.endswith("itemref")):
                item = items.get(itemref.attrib.get("idref"))
                href = item.get("href", "") if item is not None else ""
                if not href or item is None:
                    continue  # a spine entry without a file is no chapter
                chapters += 1
                if chapters > MAX_BOOK_CHAPTERS:
                    raise MediaError(f"the EPUB's spine has more than {MAX_BOOK_CHAPTERS} chapters")
                path = posixpath.normpath(posixpath.join(base, href.split("#", 1)[0]))
                try:
                    raw = archive.read(path)
                except KeyError:
                    raise MediaError(f"EPUB spine names a missing file {path!r}") from None
                spine_bytes += len(raw)
                if spine_bytes > MAX_BOOK_SPINE_BYTES:
                    raise MediaError("the EPUB's spine reads more than 100 MB of documents")
                yield EpubDocument(item, itemref.attrib, raw.decode("utf-8", errors="replace"))

    return title or None, documents()


def _epub_chapters(data: bytes) -> tuple[int, ...]:
    _title, documents = read_epub(data)
    measured: dict[str, int] = {}  # by the manifest item's href: a repeat is measured once
    chapters = []
    for document in documents:
        href = document.item.get("href", "")
        if href not in measured:
            measured[href] = html_visible_chars(document.markup)
        chapters.append(measured[href])
    if not chapters:
        raise MediaError("EPUB with an empty spine")
    return tuple(chapters)


def _pdf_chapters(data: bytes) -> tuple[int, ...]:
    pdf_pages(data, MAX_BOOK_CHAPTERS)  # readable, unencrypted, with pages
    reader = PdfReader(io.BytesIO(data), strict=False)
    out = []
    for page in reader.pages:
        try:
            out.append(visible_chars(page.extract_text() or ""))
        except Exception:  # a page whose text cannot be extracted has none to narrate
            out.append(0)
    return tuple(out)


def measure_book(data: bytes, file_name: str) -> Book:
    """Visible characters of an EPUB, PDF or TXT book, by chapter (the name's extension picks
    the reader; the content must agree)."""
    ext = posixpath.splitext(file_name.lower())[1]
    if ext == ".epub":
        try:
            return Book("epub", _epub_chapters(data))
        except MediaError:
            raise
        except Exception as exc:  # corrupt members: zlib, EOF, unsupported compression, ...
            raise MediaError(f"the EPUB cannot be read: {type(exc).__name__}") from None
    if ext == ".pdf":
        return Book("pdf", _pdf_chapters(data))
    if ext == ".txt":
        text = data.decode("utf-8", errors="replace")
        chapters = tuple(visible_chars(p) for p in text.split("\n\n\n") if p.strip())
        return Book("txt", chapters or (0,))
    raise MediaError("fileName must end in .epub, .pdf or .txt")
