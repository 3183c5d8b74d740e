"""convert-file's engines: what a file is, which tool converts it, and the conversions.

- images, PDF to text and PNG pages, Markdown/HTML/text to PDF and text: Pillow,
  pypdfium2, pypdf, WeasyPrint, in the process pool;
- office and e-book formats (DOCX, ODT, RTF, EPUB, Markdown, HTML, text): pandoc;
  legacy office formats, spreadsheets and presentations, and DOCX/ODT/RTF to PDF with
  their layout: LibreOffice headless, where installed;
- audio and video containers: ffmpeg.

External tools run as asyncio subprocesses with a timeout (killed past it), never on
the event loop. A caller's document never makes a tool read a file or fetch a URL:
pandoc reads it sandboxed into its syntax tree, satsgate keeps only the images that
came inside the document (as data: URIs) and a few metadata strings, and writes the
output from that tree; ffmpeg is told the container it reads, so no playlist or
reference format can open another file.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import html.parser
import io
import json
import mimetypes
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image
from pypdf import PdfReader

from satsgate.domain.media import MediaError, image_info, is_pdf
from satsgate.engines.local import pdf
from satsgate.engines.local.image_support import ImageOpError

# -- what a file is ------------------------------------------------------------------------

IMAGE_TARGETS: tuple[str, ...] = ("png", "jpeg", "webp", "gif", "bmp", "tiff")
AUDIO_TARGETS: tuple[str, ...] = ("mp3", "wav", "flac", "ogg", "opus", "m4a")
VIDEO_TARGETS: tuple[str, ...] = ("mp4", "webm", "mkv", "mov")
# What pandoc writes (it reads markdown, html, txt, docx, odt, rtf and epub here).
PANDOC_TARGETS: tuple[str, ...] = ("docx", "odt", "rtf", "epub", "html", "md", "txt")
LO_DOCUMENTS = frozenset({"doc", "docx", "odt", "rtf"})
LO_SHEETS = frozenset({"xls", "xlsx", "ods"})
LO_SLIDES = frozenset({"ppt", "pptx", "odp"})
_KIND_EXT = {"markdown": "md"}  # a source kind's usual file extension, where it differs


def targets_of(kind: str) -> tuple[str, ...]:
    """Every target format a source kind converts to (on a node with every tool)."""
    if kind == "image":
        return (*IMAGE_TARGETS, "pdf")
    if kind == "pdf":
        return ("txt", "png")
    if kind == "audio":
        return AUDIO_TARGETS
    if kind == "video":
        return (*VIDEO_TARGETS, *AUDIO_TARGETS)
    if kind in LO_SHEETS:
        return tuple(t for t in ("pdf", "xlsx", "ods", "csv") if t != kind)
    if kind in LO_SLIDES:
        return tuple(t for t in ("pdf", "pptx", "odp") if t != kind)
    if kind == "doc":
        return ("pdf", "docx", "odt", "rtf", "txt")
    own = _KIND_EXT.get(kind, kind)
    return tuple(t for t in ("pdf", *PANDOC_TARGETS) if t != own)


# Source kinds and their names for messages.
SOURCE_KINDS: tuple[str, ...] = (
    "image", "pdf", "markdown", "html", "txt", "docx", "odt", "rtf", "epub", "doc", "xls",
    "xlsx", "ods", "ppt", "pptx", "odp", "audio", "video",
)  # fmt: skip
ALL_TARGETS: tuple[str, ...] = tuple(
    dict.fromkeys(t for kind in SOURCE_KINDS for t in targets_of(kind))
)

_TEXT_EXTS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".txt": "txt",
    ".text": "txt",
}
_OLE_EXTS = {".doc": "doc", ".xls": "xls", ".ppt": "ppt"}
_ODF_TYPES = {
    "application/vnd.oasis.opendocument.text": "odt",
    "application/vnd.oasis.opendocument.spreadsheet": "ods",
    "application/vnd.oasis.opendocument.presentation": "odp",
    "application/epub+zip": "epub",
}
_OOXML_DIRS = {"word/": "docx", "xl/": "xlsx", "ppt/": "pptx"}
MAX_UNPACKED = 200 * 1024 * 1024  # zip-bomb guard for office and e-book files


class Unsupported(ValueError):
    """The file is not one convert-file reads (refused before payment)."""


@dataclass(frozen=True)
class Source:
    kind: str  # one of SOURCE_KINDS
    # audio and video: the container ffmpeg is told to read (-f), the duration, the frame
    container: str | None = None
    duration_s: float | None = None
    width: int | None = None
    height: int | None = None
    pages: int | None = None  # PDF
    has_audio: bool = False  # video: whether it has a sound track to extract


def sniff(data: bytes, file_name: str | None) -> str:
    """The source kind from the bytes (and the name's extension where bytes cannot
    tell: text formats, legacy office files); Unsupported otherwise."""
    ext = posixpath.splitext((file_name or "").lower())[1]
    if is_pdf(data):
        return "pdf"
    try:
        image_info(data)
        return "image"
    except MediaError:
        pass
    if data[:4] == b"PK\x03\x04":
        return _zip_kind(data)
    if data[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":  # OLE2: .doc, .xls, .ppt
        kind = _OLE_EXTS.get(ext)
        if kind is None:
            raise Unsupported("a legacy Office file needs fileName ending in .doc, .xls or .ppt")
        return kind
    if data.lstrip()[:5] == b"{\\rtf":
        return "rtf"
    if media_container(data) is not None:
        return "media"
    kind = _TEXT_EXTS.get(ext)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        kind = None
    if kind is None:
        raise Unsupported(
            "unsupported input: send an image, a PDF, an office or e-book file (DOCX, ODT, "
            "RTF, EPUB, DOC, XLS(X), ODS, PPT(X), ODP), audio or video, or UTF-8 text with "
            "fileName ending in .md, .html or .txt"
        )
    return kind


def _zip_kind(data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if sum(i.file_size for i in infos) > MAX_UNPACKED:
                raise Unsupported("the archive unpacks to more than 200 MB")
            names = {i.filename for i in infos}
            if "mimetype" in names:
                mimetype = archive.read("mimetype")[:100].decode("ascii", "replace").strip()
                if mimetype in _ODF_TYPES:
                    return _ODF_TYPES[mimetype]
            if "[Content_Types].xml" in names:
                for prefix, kind in _OOXML_DIRS.items():
                    if any(n.startswith(prefix) for n in names):
                        return kind
    except zipfile.BadZipFile:
        raise Unsupported("a damaged zip file") from None
    raise Unsupported("a zip file that is not DOCX, XLSX, PPTX, ODT, ODS, ODP or EPUB")


def media_container(data: bytes) -> str | None:
    """The ffmpeg demuxer for an audio or video file, by its magic bytes."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        return "avi"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    if data[4:8] == b"ftyp":
        return "mov"  # mp4, m4a, mov: one demuxer
    if data[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"  # mkv, webm
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


# -- tools ---------------------------------------------------------------------------------


def soffice() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


def tool_for(kind: str, target: str) -> str:
    """The tool a conversion needs: "" (satsgate's own), pandoc, libreoffice or ffmpeg."""
    if kind in ("audio", "video"):
        return "ffmpeg"
    if kind in ("image", "pdf"):
        return ""
    if kind in ("markdown", "html") and target in ("pdf", "txt", "html"):
        return ""
    if kind == "txt" and target in ("pdf", "html"):
        return ""
    if kind in LO_SHEETS | LO_SLIDES | {"doc"}:
        return "libreoffice"
    if kind in LO_DOCUMENTS and target == "pdf" and soffice() is not None:
        return "libreoffice"  # keeps the page layout; else pandoc and WeasyPrint
    return "pandoc"


def missing_tool(tool: str) -> str | None:
    """Why this node cannot run ``tool`` ("LibreOffice is not installed"), or None."""
    if tool == "pandoc" and shutil.which("pandoc") is None:
        return "pandoc is not installed"
    if tool == "libreoffice" and soffice() is None:
        return "LibreOffice is not installed"
    if tool == "ffmpeg" and (shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None):
        return "ffmpeg is not installed"
    return None


class ToolFailed(Exception):
    """A conversion tool failed or ran out of time (after payment: refunded)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


async def run_tool(args: Sequence[str], timeout_s: float, cwd: str | None = None) -> bytes:
    """Run a tool with no stdin; its stdout, or ToolFailed (killed past ``timeout_s``)."""
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (TimeoutError, asyncio.CancelledError):
        _kill(proc)
        await proc.wait()
        raise ToolFailed(
            f"{Path(args[0]).name} did not finish within {timeout_s:g} s", timed_out=True
        ) from None
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        # The tool's last word, without this node's temporary paths.
        said = re.sub(r"\S*satsgate-[a-z]+-\w+/?(\S*)", r"\1", tail[0])
        raise ToolFailed(f"{Path(args[0]).name} failed: {said[:200]}")
    return out


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 9)  # the tool and whatever it started (soffice forks)


# -- audio and video (ffprobe before payment, ffmpeg after) --------------------------------

MAX_AUDIO_S = 60 * 60
MAX_VIDEO_S = 5 * 60
MAX_VIDEO_SIDE = 1920


def probe_media(data: bytes, container: str, timeout_s: float = 20) -> Source:
    """ffprobe (synchronous: runs in the check's worker thread) -> an audio or video Source;
    Unsupported when it holds no stream or breaks a limit."""
    with tempfile.TemporaryDirectory(prefix="satsgate-probe-") as tmp:
        path = Path(tmp) / "input"
        path.write_bytes(data)
        try:
            out = subprocess.run(
                [
                    "ffprobe",
                    "-v",
                    "error",
                    "-f",
                    container,
                    "-print_format",
                    "json",
                    "-show_format",
                    "-show_streams",
                    str(path),
                ],
                capture_output=True,
                timeout=timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise Unsupported("the media file cannot be read in time") from None
    if out.returncode != 0:
        raise Unsupported("not a readable audio or video file")
    info = json.loads(out.stdout or b"{}")
    streams = info.get("streams") or []
    video = [
        s
        for s in streams
        if s.get("codec_type") == "video" and not (s.get("disposition") or {}).get("attached_pic")
    ]
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    if not video and not audio:
        raise Unsupported("the media file holds no audio or video stream")
    try:
        duration = float((info.get("format") or {}).get("duration") or 0)
    except ValueError:
        duration = 0.0
    if not duration > 0:
        raise Unsupported("the media file's duration cannot be read")
    if video:
        width, height = int(video[0].get("width") or 0), int(video[0].get("height") or 0)
        if duration > MAX_VIDEO_S:
            raise Unsupported(f"video of {duration:.0f} s; at most {MAX_VIDEO_S} s")
        if max(width, height) > MAX_VIDEO_SIDE:
            raise Unsupported(f"video of {width}x{height}; at most {MAX_VIDEO_SIDE} px a side")
        return Source("video", container, duration, width, height, has_audio=bool(audio))
    if duration > MAX_AUDIO_S:
        raise Unsupported(f"audio of {duration:.0f} s; at most {MAX_AUDIO_S} s")
    return Source("audio", container, duration, has_audio=True)


_AUDIO_ARGS = {
    "mp3": ["-c:a", "libmp3lame", "-q:a", "4", "-f", "mp3"],
    "wav": ["-c:a", "pcm_s16le", "-f", "wav"],
    "flac": ["-c:a", "flac", "-f", "flac"],
    "ogg": ["-c:a", "libvorbis", "-q:a", "4", "-f", "ogg"],
    "opus": ["-c:a", "libopus", "-b:a", "96k", "-f", "ogg"],
    "m4a": ["-c:a", "aac", "-b:a", "160k", "-movflags", "+faststart", "-f", "ipod"],
}
_VIDEO_ARGS = {
    "mp4": ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p",
            "-c:a", "aac", "-b:a", "128k", "-movflags", "+faststart", "-f", "mp4"],
    "mov": ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p",
            "-c:a", "aac", "-b:a", "128k", "-f", "mov"],
    "webm": ["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1500k",
             "-c:a", "libopus", "-b:a", "96k", "-f", "webm"],
    "mkv": ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-c:a", "aac",
            "-b:a", "128k", "-f", "matroska"],
}  # fmt: skip


async def ffmpeg_convert(data: bytes, source: Source, target: str, timeout_s: float) -> bytes:
    assert source.container is not None
    if target in _AUDIO_ARGS:
        args = ["-map", "0:a:0", "-vn", "-sn", "-dn", *_AUDIO_ARGS[target]]
    else:
        args = ["-map", "0:v:0", "-map", "0:a:0?", "-sn", "-dn", *_VIDEO_ARGS[target]]
    with tempfile.TemporaryDirectory(prefix="satsgate-ffmpeg-") as tmp:
        src, out = Path(tmp) / "input", Path(tmp) / f"output.{target}"
        await asyncio.to_thread(src.write_bytes, data)
        await run_tool(
            [
                "ffmpeg",
                "-nostdin",
                "-hide_banner",
                "-loglevel",
                "error",
                "-threads",
                "2",
                "-f",
                source.container,
                "-i",
                str(src),
                *args,
                "-y",
                str(out),
            ],
            timeout_s,
        )
        return await asyncio.to_thread(out.read_bytes)


# -- pandoc --------------------------------------------------------------------------------

_PANDOC_READERS = {
    "markdown": "markdown",
    "html": "html",
    "docx": "docx",
    "odt": "odt",
    "rtf": "rtf",
    "epub": "epub",
    "txt": "html",
}
_PANDOC_WRITERS = {
    "docx": "docx",
    "odt": "odt",
    "rtf": "rtf",
    "epub": "epub",
    "html": "html5",
    "md": "gfm",
    "txt": "plain",
}
_KEPT_META = ("title", "subtitle", "author", "date", "lang")


async def pandoc_convert(
    data: bytes, kind: str, target: str, title: str, timeout_s: float
) -> bytes:
    """``data`` (pandoc-readable ``kind``) -> ``target``; for "pdf", HTML that the caller
    renders with WeasyPrint (returned as UTF-8 bytes)."""
    with tempfile.TemporaryDirectory(prefix="satsgate-pandoc-") as tmp:
        src = Path(tmp) / f"input.{_KIND_EXT.get(kind, kind)}"
        if kind == "txt":  # plain text: paragraphs at blank lines, lines kept
            data = _text_as_html(data.decode("utf-8")).encode("utf-8")
        await asyncio.to_thread(src.write_bytes, data)
        tree = await run_tool(
            [
                "pandoc",
                "--sandbox",
                f"--extract-media={tmp}/media",
                "-f",
                _PANDOC_READERS[kind],
                "-t",
                "json",
                str(src),
            ],
            timeout_s,
            cwd=tmp,
        )
        clean = await asyncio.to_thread(_clean_tree, tree, Path(tmp), title, target == "epub")
        await asyncio.to_thread((Path(tmp) / "tree.json").write_bytes, clean)
        writer = "html5" if target == "pdf" else _PANDOC_WRITERS[target]
        out = Path(tmp) / f"output.{'html' if target == 'pdf' else target}"
        # Markdown and text come out bare (no metadata block); the rest as whole files.
        whole = [] if target in ("md", "txt") else ["--standalone"]
        await run_tool(
            [
                "pandoc",
                "-f",
                "json",
                "-t",
                writer,
                *whole,
                "-o",
                str(out),
                str(Path(tmp) / "tree.json"),
            ],
            timeout_s,
            cwd=tmp,
        )
        result = await asyncio.to_thread(out.read_bytes)
        return result.strip() + b"\n" if target in ("md", "txt") else result


def _text_as_html(text: str) -> str:
    paragraphs = [p for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if p.strip()]
    body = "".join(
        "<p>" + "<br>".join(html.escape(line) for line in p.split("\n")) + "</p>"
        for p in paragraphs
    )
    return f"<!DOCTYPE html><html><body>{body}</body></html>"


def _clean_tree(tree: bytes, tmp: Path, title: str, need_title: bool) -> bytes:
    """The document's syntax tree with nothing that reaches outside it: images that came
    inside the document become data: URIs, any other image its description; raw
    passages and metadata beyond a few strings are dropped."""
    doc = json.loads(tree)
    media_root = (tmp / "media").resolve()

    def image_uri(target: str) -> str | None:
        if target.startswith("data:"):
            return target
        path = (tmp / target).resolve()
        if not path.is_relative_to(media_root) or not path.is_file():
            return None
        mime = mimetypes.guess_type(path.name)[0] or _image_mime(path.read_bytes()[:16])
        if mime is None or not mime.startswith("image/"):
            return None
        return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            out = []
            for item in node:
                if isinstance(item, dict) and item.get("t") in ("RawBlock", "RawInline"):
                    continue
                out.append(walk(item))
            return out
        if isinstance(node, dict):
            if node.get("t") == "Image":
                attr, alt, (target, img_title) = node["c"]
                uri = image_uri(target)
                if uri is None:
                    return {"t": "Span", "c": [["", [], []], walk(alt)]}
                return {"t": "Image", "c": [attr, walk(alt), [uri, img_title]]}
            return {key: walk(value) for key, value in node.items()}
        return node

    doc["blocks"] = walk(doc.get("blocks", []))
    meta = {k: walk(v) for k, v in (doc.get("meta") or {}).items() if k in _KEPT_META}
    if "title" not in meta:
        meta["pagetitle"] = {"t": "MetaString", "c": title}
        if need_title:  # an EPUB must have one
            meta["title"] = {"t": "MetaString", "c": title}
    doc["meta"] = meta
    return json.dumps(doc).encode("utf-8")


def _image_mime(head: bytes) -> str | None:
    for magic, mime in (
        (b"\x89PNG", "image/png"),
        (b"\xff\xd8", "image/jpeg"),
        (b"GIF8", "image/gif"),
        (b"RIFF", "image/webp"),
    ):
        if head.startswith(magic):
            return mime
    return None


# -- satsgate's own conversions (process pool) ---------------------------------------------

_PIL_NAMES = {
    "png": "PNG",
    "jpeg": "JPEG",
    "webp": "WEBP",
    "gif": "GIF",
    "bmp": "BMP",
    "tiff": "TIFF",
    "pdf": "PDF",
}


# Bytes per pixel of the uncompressed image targets (a BMP is written as RGB; a TIFF keeps
# the mode, at most RGBA): their size follows from the input's pixels, before any work.
RAW_BYTES_PER_PIXEL = {"bmp": 3, "tiff": 4}


def raw_image_bytes(width: int, height: int, target: str) -> int | None:
    """The size of an image converted to an uncompressed ``target``; None for the
    compressed targets, whose size the pixels do not tell."""
    per_pixel = RAW_BYTES_PER_PIXEL.get(target)
    return None if per_pixel is None else width * height * per_pixel


def convert_image(data: bytes, target: str) -> bytes:
    """ImageOpError when the pixel data does not decode (a check before payment reads
    only the header)."""
    with Image.open(io.BytesIO(data)) as img:
        try:
            img.load()
        except (OSError, SyntaxError) as exc:
            raise ImageOpError(f"the image cannot be decoded ({exc})"[:300]) from None
        frame: Image.Image = img
        needs_rgb = (target in ("jpeg", "bmp", "pdf") and img.mode not in ("RGB", "L")) or (
            target == "gif" and img.mode not in ("P", "L")
        )
        if needs_rgb:
            frame = img.convert("RGB")
        out = io.BytesIO()
        frame.save(out, _PIL_NAMES[target])
        return out.getvalue()


def pdf_text(data: bytes) -> bytes:
    reader = PdfReader(io.BytesIO(data), strict=False)
    pages = [(page.extract_text() or "").strip() for page in reader.pages]
    return "\n\n\f".join(pages).encode("utf-8")


PNG_DPI = 150
MAX_PNG_SIDE = 3000
MAX_PNG_PAGES = 50


@dataclass(frozen=True)
class PngPage:
    data: bytes
    width: int
    height: int


def pdf_to_pngs(data: bytes, dpi: int = PNG_DPI) -> list[PngPage]:
    """Every page as a PNG at ``dpi`` (lower for pages larger than MAX_PNG_SIDE)."""
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    document = pdfium.PdfDocument(data)
    try:
        pages = []
        for index in range(len(document)):
            page = document[index]
            try:
                width, height = page.get_size()
                scale = min(dpi / 72, MAX_PNG_SIDE / max(width, height, 1))
                image = page.render(scale=scale).to_pil()
            finally:
                page.close()
            out = io.BytesIO()
            image.save(out, "PNG", optimize=False, compress_level=6)
            pages.append(PngPage(out.getvalue(), image.width, image.height))
        return pages
    finally:
        document.close()


def zip_pages(pages: Sequence[PngPage]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:  # PNG is compressed
        for number, page in enumerate(pages, 1):
            archive.writestr(f"page-{number:03d}.png", page.data)
    return out.getvalue()


def text_document(data: bytes, kind: str, target: str) -> bytes:
    """Markdown, HTML or text to PDF, text or HTML (no external tool)."""
    text = data.decode("utf-8")
    if target == "txt":
        markup = pdf.markdown_to_html(text) if kind == "markdown" else text
        return html_to_text(markup).encode("utf-8")
    if target == "html":
        body = pdf.markdown_to_html(text) if kind == "markdown" else _text_as_html(text)
        return (
            f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{body}</body></html>'
        ).encode()
    if kind == "markdown":
        return pdf.markdown_to_pdf(text).data
    if kind == "html":
        return pdf.html_to_pdf(text).data
    escaped = html.escape(text, quote=False)
    page = (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><style>@page{size:A4;margin:18mm}'
        "pre{white-space:pre-wrap;font:10pt 'DejaVu Sans Mono',monospace}</style></head>"
        f"<body><pre>{escaped}</pre></body></html>"
    )
    return pdf.html_to_pdf(page).data


def html_document_to_pdf(markup: bytes) -> bytes:
    return pdf.html_to_pdf(markup.decode("utf-8")).data


# -- HTML to text, keeping the blocks ------------------------------------------------------

_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
    "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table",
    "tr", "ul", "caption", "tbody", "thead", "tfoot",
})  # fmt: skip
# Blocks set apart by a blank line; the other blocks start a new line.
_PARAGRAPHS = frozenset({
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "table", "ul", "ol", "dl",
    "figure", "hr", "section", "article", "header", "footer", "aside", "nav", "main",
})  # fmt: skip
_SKIPPED = frozenset({"script", "style", "head", "title", "svg", "math", "template", "noscript"})
_BREAK = "\x00"  # a line break marker
_PARA = "\x01"  # a blank-line marker
_SPACE = "\x02"  # a space kept at the start of a line (list indent, preformatted text)


class _BlockText(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._pre = 0
        self._lists: list[list[int]] = []  # per open list: [ordered, counter]
        self._cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip += 1
            return
        if tag == "br":
            self.parts.append(_BREAK)
        elif tag in ("td", "th"):
            if self._cell:
                self.parts.append("\t")
            self._cell = True
        elif tag in _BLOCKS:
            self.parts.append(_PARA if tag in _PARAGRAPHS and not self._lists else _BREAK)
            if tag == "tr":
                self._cell = False
            if tag in ("ul", "ol"):
                self._lists.append([tag == "ol", 0])
            elif tag == "li" and self._lists:
                current = self._lists[-1]
                current[1] += 1
                indent = _SPACE * 2 * (len(self._lists) - 1)
                self.parts.append(f"{indent}{current[1]}. " if current[0] else f"{indent}- ")
            if tag == "pre":
                self._pre += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in ("br", "hr"):
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skip = max(0, self._skip - 1)
            return
        if tag in _BLOCKS:
            if tag in ("ul", "ol") and self._lists:
                self._lists.pop()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)
            self.parts.append(_PARA if tag in _PARAGRAPHS and not self._lists else _BREAK)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._pre:
            self.parts.append(data.replace("\n", _BREAK).replace(" ", _SPACE))
        else:
            self.parts.append(re.sub(r"[ \t\r\n\f]+", " ", data))


def html_to_text(markup: str) -> str:
    """The text of an HTML document with its blocks kept apart: headings and paragraphs
    separated by a blank line, list items and table rows on lines of their own (list
    items marked), cells separated by tabs, <br> a line break."""
    parser = _BlockText()
    parser.feed(markup)
    parser.close()
    raw = "".join(parser.parts)
    # Runs of markers: the strongest wins.
    raw = re.sub(r"[\x00\x01](?:[ ]*[\x00\x01])*", lambda m: _strongest(m.group(0)), raw)
    lines = raw.replace(_PARA, "\n\n").replace(_BREAK, "\n").split("\n")
    text = "\n".join(line.strip(" ").replace(_SPACE, " ").rstrip() for line in lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _strongest(markers: str) -> str:
    return _PARA if _PARA in markers else _BREAK
