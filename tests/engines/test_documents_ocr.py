"""extract-document and extract-receipt on the local OCR engine, through the gate on a real
server: the text read back from rendered pages, scans and receipts; the text layer of a
PDF read without OCR; refusals before any invoice; a refund when nothing is found."""

from __future__ import annotations

import base64
import io
import random
import shutil
from typing import Any

import httpx
import pytest
from PIL import Image, ImageFilter

from satsgate.engines.local.receipt import find_date, parse_number, parse_receipt
from tests.conftest import ThreadedServer, paid_l402_auth, skip_unless_ci
from tests.documents_inputs import (
    CJK,
    png,
    receipt_image,
    scanned_pdf,
    text_image,
    text_layer_pdf,
)
from tests.payments.test_gateway import assert_envelope, payment_count


@pytest.fixture(autouse=True)
def _tools() -> None:
    if shutil.which("tesseract") is None:
        skip_unless_ci("tesseract is not installed")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def paid(
    client: httpx.AsyncClient, slug: str, body: dict[str, Any], sats: int | None = None
) -> httpx.Response:
    if sats is not None:
        challenge = await client.post(f"/api/l402/{slug}", json=body)
        assert challenge.status_code == 402 and challenge.json()["amountSats"] == sats
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


def words(text: str) -> set[str]:
    return {w.strip(".,:;!?").lower() for w in text.split()}


# -- extract-document ----------------------------------------------------------------------


async def test_an_image_is_read_by_ocr(client: httpx.AsyncClient) -> None:
    image = text_image(
        [
            "Lightning invoices settle within seconds.",
            "",
            "Die Straße ist schön und grün.",
        ]
    )
    resp = await paid(client, "extract-document", {"imageBase64": b64(png(image))}, sats=10)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["pages"] == 1 and result["pageMethods"] == ["tesseract"]
    found = words(result["content"])
    assert {"lightning", "invoices", "settle", "within", "seconds"} <= found
    assert {"straße", "schön", "grün"} <= found  # the German pack reads the umlauts
    # Two paragraphs stay two paragraphs in the Markdown.
    assert "\n\n" in result["content"].strip()


async def test_a_scanned_pdf_is_read_page_by_page(client: httpx.AsyncClient) -> None:
    pages = [  # half pages, to keep the test quick: OCR time follows the pixels
        text_image(["Quarterly report", "", "Revenue grew by twelve percent."], width=1240),
        text_image(["Second page", "", "Channels opened: forty two."], width=1240),
    ]
    data = scanned_pdf(pages)
    resp = await paid(client, "extract-document", {"documentBase64": b64(data)}, sats=20)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["pages"] == 2 and result["pageMethods"] == ["tesseract", "tesseract"]
    first, second = result["content"].split("\n---\n")
    assert {"quarterly", "revenue", "twelve", "percent"} <= words(first)
    assert {"channels", "opened", "forty", "two"} <= words(second)


async def test_a_page_scanned_sideways_is_turned_upright(client: httpx.AsyncClient) -> None:
    page = text_image(
        [
            "Quarterly report of the harbour authority.",
            "Revenue grew by twelve percent",
            "while the operating costs stayed flat.",
        ],
        width=1240,
    )
    data = scanned_pdf([page.rotate(90, expand=True, fillcolor=255)])
    resp = await paid(client, "extract-document", {"documentBase64": b64(data)}, sats=10)
    assert resp.status_code == 200, resp.text
    assert {"quarterly", "harbour", "authority", "revenue", "twelve"} <= words(
        resp.json()["content"]
    )


async def test_a_text_layer_is_read_without_ocr(client: httpx.AsyncClient) -> None:
    data = text_layer_pdf("Alphanumeric satoshi ledger entry.", "Zebra crossing quietly.")
    resp = await paid(client, "extract-document", {"documentBase64": b64(data)}, sats=20)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["pageMethods"] == ["text-layer", "text-layer"]
    assert "Alphanumeric satoshi ledger entry." in result["content"]
    assert "Zebra crossing quietly." in result["content"]


async def test_japanese_is_read_with_its_kana(client: httpx.AsyncClient) -> None:
    lines = ["東京は日本の首都です。", "ひらがなとカタカナ"]
    image = text_image(lines, font=CJK, size=40, width=1000)
    body = {"imageBase64": b64(png(image)), "language": "ja"}
    resp = await paid(client, "extract-document", body)
    assert resp.status_code == 200, resp.text
    content = resp.json()["content"]
    assert "東京は日本の首都です" in content and "ひらがなとカタカナ" in content


@pytest.mark.slow  # RapidOCR's models load; Japanese is read three times
async def test_chinese_and_japanese_are_detected(client: httpx.AsyncClient) -> None:
    """No language named: tesseract's Latin packs are unsure, RapidOCR reads Chinese, and
    Japanese (kana found by tesseract's jpn pack) goes to that pack."""
    for lines, expected, method in (
        (["今天天气很好，我们去公园。"], "今天天气很好，我们去公园", "rapidocr"),
        (["東京は日本の首都です。"], "東京は日本の首都です", "tesseract"),
    ):
        image = text_image(lines, font=CJK, size=40, width=1000)
        resp = await paid(client, "extract-document", {"imageBase64": b64(png(image))})
        assert resp.status_code == 200, resp.text
        assert expected in resp.json()["content"]
        assert resp.json()["pageMethods"] == [method]


async def test_a_page_without_text_is_refunded(client: httpx.AsyncClient) -> None:
    blank = text_image(["", "", ""])
    resp = await paid(client, "extract-document", {"imageBase64": b64(png(blank))})
    body = assert_envelope(resp, "INVALID_INPUT", 400)
    assert body["refund"]["amount_sats"] == 10


async def test_bad_requests_are_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    image = b64(png(text_image(["x"])))
    for body in (
        {"imageBase64": image, "language": "klingon"},
        {"documentBase64": b64(b"%PDF-1.7 truncated")},
        {"documentBase64": b64(b"plain words")},
    ):
        resp = await client.post("/api/l402/extract-document", json=body)
        assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert payment_count(server) == before


# -- extract-receipt -----------------------------------------------------------------------

RECEIPTS = [
    pytest.param(
        receipt_image(
            ["CORNER CAFE", "123 Main Street", "03/15/2024 10:42"],
            [
                ("2 x Latte", "9.00"),
                ("Bagel", "3.25"),
                ("Orange juice", "2.75"),
                ("Subtotal", "15.00"),
                ("Sales Tax 8%", "1.20"),
                ("TOTAL", "$16.20"),
                ("Cash", "20.00"),
                ("Change", "3.80"),
            ],
        ),
        {
            "merchant": "CORNER CAFE",
            "date": "2024-03-15",
            "currency": "USD",
            "total": 16.2,
            "tax": 1.2,
        },
        {"Latte", "Bagel", "Orange juice"},
        None,
        id="usd-month-first",
    ),
    pytest.param(
        receipt_image(
            ["Bäckerei Müller", "Hauptstr. 5, 10115 Berlin", "15.03.2024 08:12"],
            [
                ("Brezel", "1,20 €"),
                ("Kaffee", "2,80 €"),
                ("Croissant", "1,90 €"),
                ("Summe EUR", "5,90"),
                ("MwSt 7%", "0,39"),
                ("Bar", "10,00"),
                ("Rückgeld", "4,10"),
            ],
        ),
        {
            "merchant": "Bäckerei Müller",
            "date": "2024-03-15",
            "currency": "EUR",
            "total": 5.9,
            "tax": 0.39,
        },
        {"Brezel", "Kaffee", "Croissant"},
        "de",
        id="eur-decimal-comma",
    ),
    pytest.param(
        receipt_image(
            ["THE RED LION", "Receipt", "12 March 2024"],
            [
                ("Fish and chips", "£12.50"),
                ("Ale 2 @ 4.20", "8.40"),
                ("TOTAL", "£20.90"),
                ("VAT 20% included", "£3.48"),
            ],
        ),
        {
            "merchant": "THE RED LION",
            "date": "2024-03-12",
            "currency": "GBP",
            "total": 20.9,
            "tax": 3.48,
        },
        {"Fish and chips", "Ale"},
        None,
        id="gbp-written-date",
    ),
]


@pytest.mark.parametrize(("image", "expected", "items", "language"), RECEIPTS)
async def test_receipts_are_parsed(
    client: httpx.AsyncClient,
    image: Any,
    expected: dict[str, Any],
    items: set[str],
    language: str | None,
) -> None:
    body = {"imageBase64": b64(png(image)), "language": language}
    resp = await paid(client, "extract-receipt", body, sats=25)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    structured = result["structured"]
    assert {k: structured[k] for k in expected} == expected, result["rawText"]
    assert {item["name"] for item in structured["items"]} == items, result["rawText"]
    assert expected["merchant"] in result["rawText"]


def photographed(image: Image.Image) -> bytes:
    """A receipt as a phone sees it: slightly turned, soft, speckled, a lossy JPEG."""
    image = image.rotate(1.5, expand=True, fillcolor=255).filter(ImageFilter.GaussianBlur(0.8))
    pixels = image.load()
    assert pixels is not None
    noise = random.Random(2)
    for _ in range(image.width * image.height // 40):
        pixels[noise.randrange(image.width), noise.randrange(image.height)] = noise.choice((0, 255))
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=60)
    return out.getvalue()


async def test_a_photographed_receipt(client: httpx.AsyncClient) -> None:
    image = receipt_image(
        ["FARMACIA CENTRAL", "Rua Augusta 10, Lisboa", "Data: 07/11/2024"],
        [
            ("Paracetamol 500mg", "3,95"),
            ("2 x Agua 1,5L", "1,80"),
            ("Protetor solar", "12,49"),
            ("Total", "18,24 €"),
            ("IVA 6%", "1,03"),
            ("Multibanco", "18,24"),
        ],
    )
    resp = await paid(client, "extract-receipt", {"imageBase64": b64(photographed(image))})
    assert resp.status_code == 200, resp.text
    structured = resp.json()["structured"]
    assert (structured["merchant"], structured["date"]) == ("FARMACIA CENTRAL", "2024-11-07")
    assert (structured["total"], structured["tax"]) == (18.24, 1.03)
    assert [(i["quantity"], i["price"]) for i in structured["items"]] == [
        (1, 3.95),
        (2, 1.8),
        (1, 12.49),
    ]
    assert "Paracetamol" in structured["items"][0]["name"]


async def test_a_receipt_pdf_with_a_text_layer(client: httpx.AsyncClient) -> None:
    data = text_layer_pdf(
        "Hotel Miramare<br>Via Roma 1, Rimini<br>Data 05/08/2023<br><br>"
        "Camera 2 notti 180,00<br>Colazione 24,00<br>Totale EUR 204,00<br>IVA 10% 18,55"
    )
    resp = await paid(client, "extract-receipt", {"documentBase64": b64(data)}, sats=25)
    assert resp.status_code == 200, resp.text
    structured = resp.json()["structured"]
    assert structured["merchant"] == "Hotel Miramare"
    assert (structured["date"], structured["currency"]) == ("2023-08-05", "EUR")
    assert (structured["total"], structured["tax"]) == (204.0, 18.55)


# -- the parser on its own -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12.50", "12.50"),
        ("12,50", "12.50"),
        ("1,234.56", "1234.56"),
        ("1.234,56", "1234.56"),
        ("1 234,56", "1234.56"),
        ("1,280", "1280"),
        ("1.280", "1280"),
        ("7", "7"),
    ],
)
def test_amount_notations(text: str, value: str) -> None:
    assert str(parse_number(text)) == value


@pytest.mark.parametrize(
    ("text", "iso", "month_first"),
    [
        ("2024-03-05", "2024-03-05", False),
        ("05.03.2024", "2024-03-05", False),
        ("05/03/24", "2024-03-05", False),
        ("03/05/2024", "2024-03-05", True),
        ("25/12/2023", "2023-12-25", True),
        ("March 5, 2024", "2024-03-05", False),
        ("5. März 2024", "2024-03-05", False),
        ("le 5 avril 2024", "2024-04-05", False),
        ("2024年3月5日", "2024-03-05", False),
        ("no date 12:30", None, False),
    ],
)
def test_date_formats(text: str, iso: str | None, month_first: bool) -> None:
    assert find_date(text, month_first=month_first) == iso


def test_yen_and_a_total_without_keyword() -> None:
    parsed = parse_receipt(
        "ラーメン一番\n2024年3月15日\n醤油ラーメン ¥900\n餃子 ¥380\n合計 ¥1,280\n消費税 ¥116"
    )
    assert parsed["merchant"] == "ラーメン一番" and parsed["currency"] == "JPY"
    assert (parsed["total"], parsed["tax"]) == (1280, 116)
    assert [i["name"] for i in parsed["items"]] == ["醤油ラーメン", "餃子"]
    # No total line: the largest amount that is not cash handed over.
    parsed = parse_receipt("Kiosk\nWater 1.50\nCrisps 2.20\nCash 5.00\n")
    assert parsed["total"] == 2.2 and parsed["date"] is None


# -- the worker functions, in this process (the pool runs them in spawned workers) ---------


def test_the_worker_reads_layers_scans_and_small_pictures() -> None:
    from satsgate.engines.local import ocr_worker as worker

    layered = worker.pdf_text_layer(text_layer_pdf("Harbour pilots log every movement."))
    assert layered == [("Harbour pilots log every movement.", False)]
    scan = scanned_pdf([text_image(["Berth fees"], width=800)])
    assert worker.pdf_text_layer(scan) == [("", True)]
    page = worker.ocr_pdf_page(scan, 0, "en", "document")
    assert page.text == "Berth fees" and page.method == "tesseract"
    # A small picture is enlarged before reading; transparency reads as white paper.
    small = text_image(["Anchor chain"], width=420, size=28).convert("LA")
    page = worker.ocr_image(png(small), None, "receipt")
    assert page.text == "Anchor chain" and (page.confidence or 0) > 0.6
    assert worker.ocr_pil(text_image([""]), None, "document").text == ""  # blank: no OCR
    assert worker._join(["東京", "は", "Tokyo", "です"]) == "東京は Tokyo です"
    with pytest.raises(worker.OcrFailed):
        worker.ocr_image(b"\x89PNG\r\n\x1a\n broken", None, "document")
