"""convert-file through the gate on a real server, each output read back: text from PDFs
and office files, PNG pages measured, audio and video probed with ffprobe; a caller's
document reaches no file or URL outside it; a missing tool or an over-long video is
refused before any invoice."""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import os
import shutil
import struct
import subprocess
import threading
import wave
import zipfile
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, get_args

import httpx
import pytest
from PIL import Image
from pypdf import PdfReader

from satsgate.engines.local.convert import ALL_TARGETS, html_to_text
from satsgate.engines.local.libreoffice import external_reference
from satsgate.services.documents.convert import Target
from tests.conftest import ThreadedServer, paid_l402_auth, skip_unless_ci
from tests.documents_inputs import text_layer_pdf
from tests.payments.test_gateway import assert_envelope, payment_count


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def need(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            skip_unless_ci(f"{tool} is not installed")


async def convert(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    challenge = await client.post("/api/l402/convert-file", json=body)
    assert challenge.status_code == 402, challenge.text
    assert challenge.json()["amountSats"] == 100
    auth = await paid_l402_auth(client, "convert-file", body)
    resp = await client.post("/api/l402/convert-file", json=body, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    result: dict[str, Any] = resp.json()
    return result


async def output(client: httpx.AsyncClient, result: dict[str, Any]) -> bytes:
    served = await client.get(result["file_url"])
    assert served.status_code == 200
    if "file_base64" in result:
        assert base64.b64decode(result["file_base64"]) == served.content
    return served.content


def pdf_text(data: bytes) -> str:
    return " ".join(page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages)


def pandoc_make(markdown: bytes, fmt: str, *extra: str) -> bytes:
    return subprocess.run(
        ["pandoc", "-f", "markdown", "-t", fmt, *extra, "-o", "-"],
        input=markdown,
        capture_output=True,
        check=True,
    ).stdout


def office_make(office: str, source: Path, fmt: str) -> bytes:
    subprocess.run(
        [
            office,
            "--headless",
            f"-env:UserInstallation=file://{source.parent}/p",
            "--convert-to",
            fmt,
            "--outdir",
            str(source.parent),
            str(source),
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return source.with_suffix(f".{fmt}").read_bytes()


def pandoc_plain(data: bytes, fmt: str) -> str:
    out = subprocess.run(
        ["pandoc", "-f", fmt, "-t", "plain"], input=data, capture_output=True, check=True
    )
    return out.stdout.decode()


def ffprobe(data: bytes, tmp: Path) -> dict[str, Any]:
    path = tmp / "probe.bin"
    path.write_bytes(data)
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-print_format",
            "json",
            "-show_format",
            "-show_streams",
            str(path),
        ],
        capture_output=True,
        check=True,
    )
    info: dict[str, Any] = json.loads(out.stdout)
    return info


@pytest.fixture
def only_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """PATH with just the named tools on it (the in-process server reads PATH per call)."""

    def apply(*tools: str) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        for tool in tools:
            found = shutil.which(tool)
            if found:
                (bin_dir / tool).symlink_to(found)
        monkeypatch.setenv("PATH", str(bin_dir))

    return apply


# -- text and documents --------------------------------------------------------------------


def test_pdf_rendering_leaves_truncated_images_refused() -> None:
    """WeasyPrint's import turns LOAD_TRUNCATED_IMAGES on process-wide; satsgate's PDF
    module turns it off, so a pool worker that rendered a PDF still refuses a truncated
    image for the other engines."""
    from PIL import ImageFile

    import satsgate.engines.local.pdf  # noqa: F401  # the import is what is tested

    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    whole = io.BytesIO()
    Image.effect_noise((128, 128), 60).save(whole, "PNG")  # noise: no compressing it away
    half = whole.getvalue()[: len(whole.getvalue()) // 2]
    with Image.open(io.BytesIO(half)) as img, pytest.raises(OSError):
        img.load()


def test_the_schema_offers_every_target_and_no_other() -> None:
    assert set(get_args(Target)) == set(ALL_TARGETS)


def test_html_text_keeps_blocks() -> None:
    assert html_to_text("<h1>T</h1><p>x</p>") == "T\n\nx"
    markup = (
        "<html><head><title>skip</title><style>p{}</style></head><body>"
        "<div>Intro <b>bold</b></div><ul><li>one</li><li>two<ol><li>a</li></ol></li></ul>"
        "<p>L1<br>L2</p><table><tr><th>A</th><th>B</th></tr><tr><td>1</td><td>2</td></tr>"
        "</table><pre>  code\n    more</pre></body></html>"
    )
    assert html_to_text(markup) == (
        "Intro bold\n\n- one\n- two\n  1. a\n\nL1\nL2\n\nA\tB\n1\t2\n\n  code\n    more"
    )


async def test_html_to_txt_over_http(client: httpx.AsyncClient) -> None:
    body = {"file": b64(b"<h1>T</h1><p>x</p>"), "fileName": "a.html", "targetFormat": "txt"}
    result = await convert(client, body)
    assert await output(client, result) == b"T\n\nx"


class _Recorder(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Recorder.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.hits = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


async def test_markdown_to_docx_reaches_no_file_or_url(
    client: httpx.AsyncClient, tmp_path: Path, recorder: str
) -> None:
    need("pandoc")
    secret = tmp_path / "secret.png"
    Image.new("RGB", (7, 7), (1, 2, 3)).save(secret)
    inline = io.BytesIO()
    Image.new("RGB", (5, 5), (200, 0, 0)).save(inline, "PNG")
    markdown = (
        "# Harbour report\n\nThe pelicans returned on Tuesday.\n\n"
        f"![local]({secret}) ![remote]({recorder}/tracker.png) "
        f"![inline](data:image/png;base64,{b64(inline.getvalue())})\n"
    )
    body = {"file": b64(markdown.encode()), "fileName": "report.md", "targetFormat": "docx"}
    result = await convert(client, body)
    docx = await output(client, result)
    text = pandoc_plain(docx, "docx")
    assert "Harbour report" in text and "pelicans returned on Tuesday" in text
    with zipfile.ZipFile(io.BytesIO(docx)) as archive:
        media = [archive.read(n) for n in archive.namelist() if n.startswith("word/media/")]
    assert media == [inline.getvalue()]  # the document's own image only
    assert _Recorder.hits == []


async def test_docx_to_pdf_reads_back(client: httpx.AsyncClient) -> None:
    need("pandoc")
    docx = pandoc_make(b"# Minutes\n\nThe committee approved the lighthouse budget.\n", "docx")
    result = await convert(client, {"file": b64(docx), "fileName": "m.docx", "targetFormat": "pdf"})
    assert result["sourceFormat"] == "docx"
    text = pdf_text(await output(client, result))
    assert "Minutes" in text and "lighthouse budget" in text


async def test_docx_to_pdf_without_libreoffice(client: httpx.AsyncClient, only_tools: Any) -> None:
    """pandoc to HTML, WeasyPrint to PDF: the path of a node without LibreOffice."""
    need("pandoc")
    docx = pandoc_make(b"# Ledger\n\nNine sailboats were counted at dawn.\n", "docx")
    only_tools("pandoc")
    result = await convert(client, {"file": b64(docx), "fileName": "l.docx", "targetFormat": "pdf"})
    text = pdf_text(await output(client, result))
    assert "Ledger" in text and "Nine sailboats were counted at dawn." in text


async def test_epub_to_txt_and_odt_to_html(client: httpx.AsyncClient) -> None:
    need("pandoc")
    source = b"# Chapter One\n\nThe kettle whistled twice.\n"
    epub = pandoc_make(source, "epub", "-M", "title=Kettle")
    result = await convert(client, {"file": b64(epub), "targetFormat": "txt"})
    assert result["sourceFormat"] == "epub"
    assert "The kettle whistled twice." in (await output(client, result)).decode()
    odt = pandoc_make(source, "odt")
    result = await convert(client, {"file": b64(odt), "targetFormat": "html"})
    page = (await output(client, result)).decode()
    assert "<h1" in page and "The kettle whistled twice." in page


def _with_part(docx: bytes, name: str, transform: Any) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx)) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, transform(data) if item.filename == name else data)
    return out.getvalue()


def test_office_files_linking_outside_are_refused_for_libreoffice() -> None:
    need("pandoc")
    docx = pandoc_make(b"See [the site](https://example.org).\n", "docx")
    assert external_reference(docx, "docx") is None  # a hyperlink is only a link
    linked = _with_part(
        docx,
        "word/_rels/document.xml.rels",
        lambda rels: rels.replace(
            b"</Relationships>",
            b'<Relationship Id="rIdX" Type="http://schemas.openxmlformats.org/officeDocument/'
            b'2006/relationships/image" Target="file:///etc/passwd" TargetMode="External"/>'
            b"</Relationships>",
        ),
    )
    assert external_reference(linked, "docx") is not None
    odt = pandoc_make(b"Plain words.\n", "odt")
    assert external_reference(odt, "odt") is None
    odt_linked = _with_part(
        odt,
        "content.xml",
        lambda xml: xml.replace(
            b"</office:text>",
            b'<text:p><draw:frame><draw:image xlink:href="/etc/hostname"/></draw:frame>'
            b"</text:p></office:text>",
        ),
    )
    assert external_reference(odt_linked, "odt") is not None
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + "INCLUDEPICTURE".encode("utf-16-le")
    assert external_reference(ole, "doc") is not None
    assert external_reference(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(64), "doc") is None


async def test_docx_to_markdown_is_bare(client: httpx.AsyncClient) -> None:
    need("pandoc")
    docx = pandoc_make(b"# Tides\n\nHigh water at *noon*.\n\n- rope\n- sail\n", "docx")
    result = await convert(client, {"file": b64(docx), "targetFormat": "md"})
    markdown = (await output(client, result)).decode()
    assert markdown.startswith("# Tides\n\nHigh water at *noon*.")  # no metadata block
    assert "rope" in markdown and "sail" in markdown


async def test_a_broken_document_is_refunded(client: httpx.AsyncClient) -> None:
    """It looks like a DOCX before payment; pandoc cannot read it: the payer is refunded."""
    need("pandoc")
    docx = _with_part(
        pandoc_make(b"x", "docx"), "word/document.xml", lambda _xml: b"<w:document><unclosed"
    )
    body = {"file": b64(docx), "targetFormat": "odt"}
    auth = await paid_l402_auth(client, "convert-file", body)
    resp = await client.post("/api/l402/convert-file", json=body, headers={"Authorization": auth})
    error = assert_envelope(resp, "SERVICE_ERROR", 502)
    assert error["refund"]["amount_sats"] == 100
    assert "satsgate-" not in error["error"]  # no temporary paths of the node


def _png_with_cut_pixels() -> bytes:
    """A PNG whose header and chunk checksums are right but whose pixel data stops short:
    the check before payment reads the header; the pixels fail only when decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        checksum = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + checksum

    header = struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\0" * 5000)[:20]
    chunks = chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


@pytest.mark.parametrize("service", ["convert-file", "html-to-pdf"])
async def test_an_image_whose_pixels_do_not_decode_is_refunded_as_the_callers_input(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture, service: str
) -> None:
    """INVALID_INPUT with the refund, and no ERROR line: before, the decoder's OSError read
    as satsgate's own failure (L402_UPSTREAM_FAILED, a traceback logged)."""
    image = b64(_png_with_cut_pixels())
    body: dict[str, Any] = (
        {"file": image, "targetFormat": "webp"}
        if service == "convert-file"
        else {"html": f'<p>x</p><img src="data:image/png;base64,{image}">'}
    )
    auth = await paid_l402_auth(client, service, body)
    with caplog.at_level(logging.ERROR):
        resp = await client.post(f"/api/l402/{service}", json=body, headers={"Authorization": auth})
    error = assert_envelope(resp, "INVALID_INPUT", 400)
    assert error["refund"]["amount_sats"] > 0
    assert "cannot be decoded" in error["error"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.slow  # LibreOffice starts a fresh profile for each conversion
async def test_spreadsheet_to_pdf_with_libreoffice(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    office = shutil.which("soffice")
    if office is None:
        pytest.skip("LibreOffice is optional and not installed here")
    (tmp_path / "t.csv").write_text("Item,Count\nAnchors,17\nRopes,42\n")
    xlsx = office_make(office, tmp_path / "t.csv", "xlsx")
    result = await convert(client, {"file": b64(xlsx), "targetFormat": "pdf"})
    assert result["sourceFormat"] == "xlsx"
    text = pdf_text(await output(client, result))
    assert "Anchors" in text and "42" in text


# -- PDF to PNG pages ----------------------------------------------------------------------


def a4_at_150_dpi(size: tuple[int, int]) -> bool:
    """595.28 x 841.89 pt at 150 dpi, rounded either way."""
    return size[0] in (1240, 1241) and size[1] in (1754, 1755)


async def test_pdf_to_png_pages(client: httpx.AsyncClient) -> None:
    three = text_layer_pdf("one", "two", "three")
    result = await convert(client, {"file": b64(three), "targetFormat": "png"})
    assert result["format"] == "zip" and len(result["pages"]) == 3
    with zipfile.ZipFile(io.BytesIO(await output(client, result))) as archive:
        names = sorted(archive.namelist())
        assert names == ["page-001.png", "page-002.png", "page-003.png"]
        for name, page in zip(names, result["pages"], strict=True):
            with Image.open(io.BytesIO(archive.read(name))) as img:
                assert img.format == "PNG" and a4_at_150_dpi(img.size)
                assert (page["width"], page["height"]) == img.size
    single = await convert(client, {"file": b64(text_layer_pdf("only")), "targetFormat": "png"})
    assert single["format"] == "png"
    with Image.open(io.BytesIO(await output(client, single))) as img:
        assert a4_at_150_dpi(img.size)


# -- audio and video -----------------------------------------------------------------------


def sine_wav(seconds: float, rate: int = 16000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(
            b"".join(
                struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / rate)))
                for i in range(int(seconds * rate))
            )
        )
    return out.getvalue()


def lavfi_video(
    tmp: Path, seconds: float, size: str = "160x120", rate: int = 10, sound: bool = True
) -> bytes:
    path = tmp / "v.mp4"
    audio = ["-f", "lavfi", "-i", "sine=frequency=300", "-c:a", "aac"] if sound else []
    subprocess.run(
        [
            "ffmpeg",
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            f"testsrc=size={size}:rate={rate}",
            *audio,
            "-t",
            str(seconds),
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-pix_fmt",
            "yuv420p",
            "-y",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    return path.read_bytes()


async def test_wav_to_mp3_keeps_the_duration(client: httpx.AsyncClient, tmp_path: Path) -> None:
    need("ffmpeg", "ffprobe")
    result = await convert(client, {"file": b64(sine_wav(2.0)), "targetFormat": "mp3"})
    assert result["sourceFormat"] == "audio"
    info = ffprobe(await output(client, result), tmp_path)
    assert info["streams"][0]["codec_name"] == "mp3"
    assert abs(float(info["format"]["duration"]) - 2.0) < 0.15


async def test_video_to_webm_and_to_its_sound(client: httpx.AsyncClient, tmp_path: Path) -> None:
    need("ffmpeg", "ffprobe")
    video = lavfi_video(tmp_path, 2)
    result = await convert(client, {"file": b64(video), "targetFormat": "webm"})
    assert result["sourceFormat"] == "video"
    info = ffprobe(await output(client, result), tmp_path)
    codecs = {s["codec_type"]: s["codec_name"] for s in info["streams"]}
    assert codecs == {"video": "vp8", "audio": "opus"}
    assert abs(float(info["format"]["duration"]) - 2.0) < 0.2
    sound = await convert(client, {"file": b64(video), "targetFormat": "m4a"})
    info = ffprobe(await output(client, sound), tmp_path)
    assert [s["codec_type"] for s in info["streams"]] == ["audio"]
    assert info["streams"][0]["codec_name"] == "aac"


async def test_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer, tmp_path: Path, only_tools: Any
) -> None:
    need("ffmpeg", "ffprobe", "pandoc")
    before = payment_count(server)
    long_video = lavfi_video(tmp_path, 301, size="32x32", rate=1, sound=False)
    resp = await client.post(
        "/api/l402/convert-file", json={"file": b64(long_video), "targetFormat": "mp4"}
    )
    assert "at most 300 s" in assert_envelope(resp, "L402_INVALID_PARAMS", 400)["error"]
    resp = await client.post(
        "/api/l402/convert-file", json={"file": b64(long_video), "targetFormat": "mp3"}
    )
    assert "at most 300 s" in assert_envelope(resp, "L402_INVALID_PARAMS", 400)["error"]
    silent = lavfi_video(tmp_path, 1, sound=False)
    resp = await client.post(
        "/api/l402/convert-file", json={"file": b64(silent), "targetFormat": "mp3"}
    )
    assert "no sound" in assert_envelope(resp, "L402_INVALID_PARAMS", 400)["error"]
    resp = await client.post(
        "/api/l402/convert-file", json={"file": b64(sine_wav(0.5)), "targetFormat": "docx"}
    )
    assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    docx = pandoc_make(b"x", "docx")
    only_tools()  # a node with none of the tools
    for body in (
        {"file": b64(docx), "targetFormat": "odt"},
        {"file": b64(sine_wav(0.5)), "targetFormat": "mp3"},
        {
            "file": b64(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600)),
            "fileName": "a.xls",
            "targetFormat": "pdf",
        },
    ):
        resp = await client.post("/api/l402/convert-file", json=body)
        error = assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
        assert "not installed" in error["error"]
        assert "invoice" not in error
    assert payment_count(server) == before
    assert os.environ["PATH"].endswith("bin")
