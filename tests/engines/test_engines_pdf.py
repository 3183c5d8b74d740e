"""HTML/Markdown to PDF, merging and validation; the HTML fetcher refuses network and files."""

from __future__ import annotations

import base64
import io
import pickle
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import weasyprint
from PIL import Image
from pypdf import PdfReader, PdfWriter

from satsgate.domain.pdf_pages import InvalidPdf, count_pdf_pages, validate_pdf
from satsgate.engines.local.pdf import (
    RenderedPdf,
    html_to_pdf,
    markdown_to_html,
    markdown_to_pdf,
    merge_pdfs,
)

_PNG = io.BytesIO()
Image.new("RGB", (4, 4), (255, 0, 0)).save(_PNG, "PNG")
PNG_BYTES = _PNG.getvalue()
PNG_DATA_URI = "data:image/png;base64," + base64.b64encode(PNG_BYTES).decode()


def _page_texts(data: bytes) -> list[str]:
    return [page.extract_text() for page in PdfReader(io.BytesIO(data)).pages]


def _pages_html(*words: str) -> str:
    pages = "".join(f'<div style="page-break-after: always">{word}</div>' for word in words[:-1])
    return f"<html><body>{pages}<div>{words[-1]}</div></body></html>"


@pytest.fixture(scope="module")
def alpha() -> bytes:
    return html_to_pdf(_pages_html("ALPHA")).data


@pytest.fixture(scope="module")
def bravo() -> bytes:
    return html_to_pdf(_pages_html("BRAVOONE", "BRAVOTWO")).data


# ---------------------------------------------------------------------------- HTML and Markdown


def test_html_to_pdf_shows_the_text_and_counts_pages() -> None:
    result = html_to_pdf(_pages_html("FIRSTPAGE", "SECONDPAGE", "THIRDPAGE"))
    assert result.data.startswith(b"%PDF-")
    assert result.pages == 3 == len(PdfReader(io.BytesIO(result.data)).pages)
    texts = _page_texts(result.data)
    assert ["FIRSTPAGE" in texts[0], "SECONDPAGE" in texts[1], "THIRDPAGE" in texts[2]] == [
        True
    ] * 3


def test_html_keeps_non_latin_text() -> None:
    text = "".join(_page_texts(html_to_pdf("<p>Ελλάδα Москва</p>").data))
    assert "Ελλάδα" in text and "Москва" in text


def test_markdown_renders_headings_tables_and_shows_raw_html_as_text() -> None:
    markdown = (
        "# Quarterly Report\n\n"
        "| Asset | Amount |\n|---|---|\n| Lightning | 2100 |\n\n"
        "<b>notbold</b>\n\n~~struck~~\n"
    )
    html = markdown_to_html(markdown)
    assert "<table>" in html and "<s>struck</s>" in html
    assert "<b>" not in html and "&lt;b&gt;notbold&lt;/b&gt;" in html
    result = markdown_to_pdf(markdown)
    assert result.pages == 1
    text = " ".join(_page_texts(result.data))
    for word in ("Quarterly Report", "Asset", "Amount", "Lightning", "2100", "<b>notbold</b>"):
        assert word in text


def test_data_uris_are_allowed() -> None:
    css = "data:text/css,body::after%7Bcontent:%22DATACSS%22%7D"
    result = html_to_pdf(f'<link rel="stylesheet" href="{css}"><img src="{PNG_DATA_URI}"><p>x</p>')
    page = PdfReader(io.BytesIO(result.data)).pages[0]
    assert len(page.images) == 1
    assert "DATACSS" in page.extract_text()


# ---------------------------------------------------------------------------- fetch refusal


class _Recorder(BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        if self.path.endswith(".css"):
            body, kind = b"body::after { content: 'FROMHTTP'; }", "text/css"
        else:
            body, kind = PNG_BYTES, "image/png"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    handler = type("Handler", (_Recorder,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _fetching_html(base: str) -> str:
    return f"""<html><head>
<link rel="stylesheet" href="{base}/linked.css">
<style>
@import url("{base}/imported.css");
@font-face {{ font-family: Remote; src: url("{base}/font.ttf"); }}
body {{ background: url("{base}/background.png"); font-family: Remote, sans-serif; }}
</style></head><body>
<img src="{base}/image.png"><object data="{base}/object.png"></object>
<svg width="10" height="10"><image href="{base}/svg.png" width="10" height="10"/></svg>
<a rel="attachment" href="{base}/attachment.bin">file</a>
<p>BODYTEXT</p></body></html>"""


def test_http_resources_are_never_fetched(
    recorder: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, hits = recorder
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    html = _fetching_html(base)
    # Control: WeasyPrint's default fetcher does hit the server with this very HTML.
    weasyprint.HTML(string=html).write_pdf()
    assert any(path.endswith("image.png") for path in hits)
    hits.clear()

    result = html_to_pdf(html)
    assert hits == []
    page = PdfReader(io.BytesIO(result.data)).pages[0]
    assert len(page.images) == 0
    text = page.extract_text()
    assert "BODYTEXT" in text and "FROMHTTP" not in text


def test_file_urls_are_never_read(tmp_path: Path) -> None:
    css = tmp_path / "secret.css"
    css.write_text("body::after { content: 'LEAKEDCSS'; }")
    image = tmp_path / "secret.png"
    image.write_bytes(PNG_BYTES)
    html = (
        f'<link rel="stylesheet" href="{css.as_uri()}"><img src="{image.as_uri()}">'
        '<img src="file:///etc/passwd"><p>VISIBLE</p>'
    )
    control = PdfReader(io.BytesIO(weasyprint.HTML(string=html).write_pdf())).pages[0]
    assert "LEAKEDCSS" in control.extract_text() and len(control.images) == 1

    page = PdfReader(io.BytesIO(html_to_pdf(html).data)).pages[0]
    text = page.extract_text()
    assert "VISIBLE" in text
    assert "LEAKEDCSS" not in text and "root:" not in text
    assert len(page.images) == 0


def test_relative_urls_do_not_resolve_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "local.css").write_text("body::after { content: 'RELATIVECSS'; }")
    monkeypatch.chdir(tmp_path)
    text = _page_texts(html_to_pdf('<link rel="stylesheet" href="local.css"><p>x</p>').data)[0]
    assert "RELATIVECSS" not in text


# ---------------------------------------------------------------------------- merge and validation


def test_merge_keeps_every_page_in_order(alpha: bytes, bravo: bytes) -> None:
    merged = merge_pdfs([bravo, alpha, bravo])
    assert merged.pages == 5 == count_pdf_pages(merged.data)
    texts = _page_texts(merged.data)
    expected = ["BRAVOONE", "BRAVOTWO", "ALPHA", "BRAVOONE", "BRAVOTWO"]
    assert [word in text for word, text in zip(expected, texts, strict=True)] == [True] * 5


def test_merge_reports_the_index_of_a_non_pdf(alpha: bytes) -> None:
    with pytest.raises(InvalidPdf) as caught:
        merge_pdfs([alpha, alpha, b"this is not a pdf"])
    assert caught.value.index == 2
    assert "document 2" in str(caught.value)


def test_merge_refuses_a_truncated_pdf(alpha: bytes, bravo: bytes) -> None:
    with pytest.raises(InvalidPdf) as caught:
        merge_pdfs([alpha, bravo[: len(bravo) // 3]])
    assert caught.value.index == 1


def _encrypted(data: bytes) -> bytes:
    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_merge_refuses_an_encrypted_pdf(alpha: bytes) -> None:
    with pytest.raises(InvalidPdf) as caught:
        merge_pdfs([_encrypted(alpha), alpha])
    assert caught.value.index == 0
    assert "encrypted" in caught.value.reason


def test_merge_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        merge_pdfs([])


def test_validate_pdf_returns_pages_or_raises(bravo: bytes) -> None:
    assert validate_pdf(bravo) == 2
    for bad in (b"", b"%PDF-1.7\nnot really", bravo[:200], _encrypted(bravo)):
        with pytest.raises(InvalidPdf) as caught:
            validate_pdf(bad)
        assert caught.value.index == 0
    with pytest.raises(InvalidPdf):
        count_pdf_pages(b"GIF89a")


def test_results_and_errors_pickle_for_the_process_pool() -> None:
    error = pickle.loads(pickle.dumps(InvalidPdf(3, "encrypted")))
    assert (error.index, error.reason) == (3, "encrypted")
    assert pickle.loads(pickle.dumps(RenderedPdf(b"%PDF", 1))) == RenderedPdf(b"%PDF", 1)
