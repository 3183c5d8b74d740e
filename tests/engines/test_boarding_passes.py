"""boardingpass-wallet end to end: IATA BCBP messages written here, drawn as PDF417, Aztec
and QR codes into a PDF and into a tilted JPEG photo, sent through the gate; every
.pkpass is unzipped and its pass.json, manifest and (with a test CA) signature checked."""

from __future__ import annotations

import base64
import datetime
import hashlib
import io
import json
import math
import random
import shutil
import subprocess
import time
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import zxingcpp
from cryptography import x509
from cryptography.x509.oid import NameOID
from PIL import Image, ImageDraw, ImageFilter

from satsgate.config.settings import Settings
from satsgate.engines import EngineConfigError
from satsgate.engines.local import bcbp
from satsgate.engines.local.pkpass import UNSIGNED_WARNING, load_signing, read_barcodes
from tests.certs import Issued, common_name, issue
from tests.conftest import (
    ThreadedServer,
    http_client,
    make_settings,
    paid_l402_auth,
    skip_unless_ci,
)

TODAY = datetime.date.today()


def _julian(days_ahead: int) -> tuple[int, str]:
    day = TODAY + datetime.timedelta(days=days_ahead)
    return day.timetuple().tm_yday, day.isoformat()


DAY1, DATE1 = _julian(3)
DAY2, DATE2 = _julian(4)

ONE_LEG = bcbp.encode(
    "DESMARAIS/LUC MR",
    [bcbp.LegInput("ABC123", "YUL", "FRA", "AC", "834", DAY1, "J", "1A", 25)],
)
TWO_LEGS = bcbp.encode(
    "DOE/JANE",
    [
        bcbp.LegInput(
            "XYZ789", "LHR", "JFK", "BA", "117", DAY1, "Y", "23F", 7, frequent_flyer="BA 12345678"
        ),
        bcbp.LegInput("XYZ789", "JFK", "SFO", "AA", "15", DAY2, "Y", "12C", 88),
    ],
    issue_date=f"{TODAY.year % 10}{TODAY.timetuple().tm_yday:03d}",
    issuer="BA",
)
SECOND_PASSENGER = bcbp.encode(
    "DOE/JOHN",
    [bcbp.LegInput("XYZ789", "LHR", "JFK", "BA", "117", DAY1, "Y", "23E", 8)],
)


# -- making the documents ------------------------------------------------------------------


def barcode_image(message: str, fmt: Any, scale: int) -> Image.Image:
    code = zxingcpp.create_barcode(message, fmt)
    view = memoryview(zxingcpp.write_barcode_to_image(code, scale=scale))  # type: ignore[arg-type]
    assert view.shape is not None
    height, width = view.shape[0], view.shape[1]
    return Image.frombytes("L", (width, height), bytes(view))


def page_with(code: Image.Image, caption: str) -> Image.Image:
    """A letter-size page at 150 dpi: a caption and the code, as airlines print them."""
    page = Image.new("L", (1275, 1650), 255)
    draw = ImageDraw.Draw(page)
    draw.text((100, 100), caption, fill=0)
    draw.rectangle((90, 150, 1185, 160), fill=80)
    page.paste(code, (150, 400))
    return page


def pdf_of(page: Image.Image) -> bytes:
    out = io.BytesIO()
    page.save(out, "PDF", resolution=150)
    return out.getvalue()


def photo_of(page: Image.Image, angle: float = 4.0, scale: float = 0.8) -> bytes:
    """A phone photo of a printed page: grey surroundings, turned, smaller, soft, noisy, JPEG."""
    rgb = page.convert("RGB")
    small = rgb.resize((int(rgb.width * scale), int(rgb.height * scale)), Image.Resampling.BICUBIC)
    turned = small.rotate(
        angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=(118, 110, 100)
    )
    soft = turned.filter(ImageFilter.GaussianBlur(0.8))
    rng = random.Random(7)
    pixels = soft.load()
    assert pixels is not None
    for _ in range(4000):
        x, y = rng.randrange(soft.width), rng.randrange(soft.height)
        pixels[x, y] = (rng.randrange(256),) * 3
    out = io.BytesIO()
    soft.save(out, "JPEG", quality=82)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@pytest.fixture(scope="module")
def documents() -> dict[str, bytes]:
    F = zxingcpp.BarcodeFormat
    return {
        "pdf417_pdf": pdf_of(page_with(barcode_image(ONE_LEG, F.PDF417, 3), "AC834 YUL-FRA")),
        "aztec_photo": photo_of(page_with(barcode_image(TWO_LEGS, F.Aztec, 6), "BA117 LHR")),
        "qr_pdf": pdf_of(page_with(barcode_image(SECOND_PASSENGER, F.QRCode, 6), "BA117")),
        "pdf417_photo": photo_of(
            # PDF417 reads only near level: this one is turned back by the engine.
            page_with(barcode_image(SECOND_PASSENGER, F.PDF417, 4), "BA117"),
            angle=-12,
        ),
        "no_code_photo": photo_of(page_with(Image.new("L", (400, 200), 230), "Receipt 42")),
        "url_qr_pdf": pdf_of(
            page_with(barcode_image("https://example.org/checkin", F.QRCode, 6), "Check in")
        ),
    }


# -- checking the output -------------------------------------------------------------------


async def fetch(client: httpx.AsyncClient, url: str) -> httpx.Response:
    parts = urlsplit(url)
    resp = await client.get(f"{parts.path}?{parts.query}")
    assert resp.status_code == 200, url
    return resp


def link_lifetime(url: str) -> float:
    return int(parse_qs(urlsplit(url).query)["exp"][0]) - time.time()


def unpack(pkpass: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(pkpass)) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(files["manifest.json"])
    hashed = {n for n in files if n not in ("manifest.json", "signature")}
    assert set(manifest) == hashed
    for name in hashed:
        assert manifest[name] == hashlib.sha1(files[name]).hexdigest(), name
    assert {"pass.json", "icon.png"} <= hashed
    return json.loads(files["pass.json"]), files


def fields(doc: dict[str, Any]) -> dict[str, str]:
    board = doc["boardingPass"]
    return {
        f["key"]: f["value"]
        for group in (
            "headerFields",
            "primaryFields",
            "secondaryFields",
            "auxiliaryFields",
            "backFields",
        )
        for f in board[group]
    }


def check_pass(
    doc: dict[str, Any],
    message: str,
    fmt: str,
    passenger: str,
    flight: str,
    origin: str,
    destination: str,
    seat: str,
    date: str,
) -> None:
    assert doc["formatVersion"] == 1
    assert doc["boardingPass"]["transitType"] == "PKTransitTypeAir"
    assert doc["barcodes"][0] == {
        "format": fmt,
        "message": message,
        "messageEncoding": "iso-8859-1",
    }
    assert doc["barcode"] == doc["barcodes"][0]
    values = fields(doc)
    assert (
        values["passenger"],
        values["flight"],
        values["origin"],
        values["destination"],
        values["seat"],
        values["date"],
    ) == (passenger, flight, origin, destination, seat, date)


async def paid(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, "boardingpass-wallet", body)
    return await client.post(
        "/api/l402/boardingpass-wallet", json=body, headers={"Authorization": auth}
    )


# -- unsigned (no certificate configured) ----------------------------------------------------


async def test_pdf417_in_a_pdf_makes_one_unsigned_pass(
    client: httpx.AsyncClient, documents: dict[str, bytes]
) -> None:
    resp = await paid(client, {"documentBase64": b64(documents["pdf417_pdf"])})
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["count"] == 1 and "partial_refund" not in doc
    assert doc["signed"] is False
    assert UNSIGNED_WARNING in doc["warnings"]
    entry = doc["passes"][0]
    assert {k: entry[k] for k in ("passenger", "flight", "from", "to", "seat", "date")} == {
        "passenger": "LUC DESMARAIS",
        "flight": "AC834",
        "from": "YUL",
        "to": "FRA",
        "seat": "1A",
        "date": DATE1,
    }
    assert entry["zone"] is None and entry["gate"] is None and entry["boarding_time"] is None
    assert 1790 <= link_lifetime(entry["save_url"]) <= 1800
    assert 1790 <= link_lifetime(doc["save_all_url"]) <= 1800
    file = await fetch(client, entry["save_url"])
    assert file.headers["Content-Type"] == "application/vnd.apple.pkpass"
    pass_doc, files = unpack(file.content)
    assert "signature" not in files
    check_pass(
        pass_doc,
        ONE_LEG,
        "PKBarcodeFormatPDF417",
        "LUC DESMARAIS",
        "AC834",
        "YUL",
        "FRA",
        "1A",
        DATE1,
    )
    assert fields(pass_doc)["pnr"] == "ABC123"


async def test_two_legs_from_a_photo_and_a_second_passenger(
    client: httpx.AsyncClient, documents: dict[str, bytes]
) -> None:
    body = {"documents": [b64(documents["aztec_photo"]), b64(documents["qr_pdf"])]}
    resp = await paid(client, body)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["count"] == 3 and "partial_refund" not in doc
    got = [
        (p["passenger"], p["flight"], p["from"], p["to"], p["seat"], p["date"], p["document"])
        for p in doc["passes"]
    ]
    assert got == [
        ("JANE DOE", "BA117", "LHR", "JFK", "23F", DATE1, 1),
        ("JANE DOE", "AA15", "JFK", "SFO", "12C", DATE2, 1),
        ("JOHN DOE", "BA117", "LHR", "JFK", "23E", DATE1, 2),
    ]
    bundle = await fetch(client, doc["save_all_url"])
    assert bundle.headers["Content-Type"] == "application/vnd.apple.pkpasses"
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as archive:
        names = archive.namelist()
        passes = [unpack(archive.read(n))[0] for n in names]
    assert len(names) == 3 and all(n.endswith(".pkpass") for n in names)
    check_pass(
        passes[0], TWO_LEGS, "PKBarcodeFormatAztec", "JANE DOE", "BA117", "LHR", "JFK", "23F", DATE1
    )
    check_pass(
        passes[1], TWO_LEGS, "PKBarcodeFormatAztec", "JANE DOE", "AA15", "JFK", "SFO", "12C", DATE2
    )
    check_pass(
        passes[2],
        SECOND_PASSENGER,
        "PKBarcodeFormatQR",
        "JOHN DOE",
        "BA117",
        "LHR",
        "JFK",
        "23E",
        DATE1,
    )
    assert passes[0]["serialNumber"] != passes[1]["serialNumber"]
    for entry, pass_doc in zip(doc["passes"], passes, strict=True):
        single = unpack((await fetch(client, entry["save_url"])).content)[0]
        assert single == pass_doc


async def test_documents_without_a_pass_are_refunded(
    client: httpx.AsyncClient, documents: dict[str, bytes]
) -> None:
    body = {
        "documents": [
            b64(documents["pdf417_photo"]),
            b64(documents["no_code_photo"]),
            b64(documents["url_qr_pdf"]),
        ]
    }
    resp = await paid(client, body)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["count"] == 1
    assert doc["passes"][0]["passenger"] == "JOHN DOE"
    assert doc["passes"][0]["barcode_format"] == "PDF417"
    # Quoted 3 x 100 sats; one pass made: 200 sats back.
    assert doc["partial_refund"]["amount_sats"] == 200
    assert "document 2: no boarding-pass barcode found" in doc["warnings"]
    assert any(
        w.startswith("document 3: a QRCode code that is not a boarding pass")
        for w in doc["warnings"]
    )


async def test_the_same_pass_sent_twice_is_made_once(
    client: httpx.AsyncClient, documents: dict[str, bytes]
) -> None:
    photo = b64(documents["pdf417_photo"])
    resp = await paid(client, {"documents": [photo, photo]})
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["count"] == 1
    assert "document 2: the same boarding pass as document 1; made once" in doc["warnings"]
    assert not any("no boarding-pass barcode found" in w for w in doc["warnings"])
    # Quoted 2 x 100 sats; one pass made: 100 sats back.
    assert doc["partial_refund"]["amount_sats"] == 100


async def test_no_pass_at_all_refunds_everything(
    client: httpx.AsyncClient, documents: dict[str, bytes]
) -> None:
    resp = await paid(client, {"documentBase64": b64(documents["no_code_photo"])})
    assert resp.status_code >= 400
    doc = resp.json()
    assert doc["error_code"] == "INVALID_INPUT"
    assert "no boarding-pass barcode found" in doc["error"]
    assert doc["refund"]["amount_sats"] == 100


async def test_a_non_document_is_refused_before_any_invoice(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/api/l402/boardingpass-wallet", json={"documentBase64": b64(b"not a pdf nor an image")}
    )
    assert resp.status_code == 400, resp.text
    assert "invoice" not in resp.json()


# -- signed with the operator's certificate --------------------------------------------------


PASS_TYPE = "pass.org.example.boarding"
TEAM = "TEAM123456"


@pytest.fixture(scope="module")
def pass_ca(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A root, a WWDR-like intermediate, and a Pass Type ID certificate it issues."""
    directory = tmp_path_factory.mktemp("pass-ca")
    root = issue(common_name("Test Root CA"), ca=True)
    wwdr = issue(common_name("Test WWDR Intermediate"), root, ca=True)
    subject = [
        x509.NameAttribute(NameOID.USER_ID, PASS_TYPE),
        x509.NameAttribute(NameOID.COMMON_NAME, f"Pass Type ID: {PASS_TYPE}"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, TEAM),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Node"),
    ]
    signer: Issued = issue(subject, wwdr)
    root_pem, _ = root.write(directory, "root")
    wwdr_pem, _ = wwdr.write(directory, "wwdr")
    cert, key = signer.write(directory, "pass", password=b"pw")
    return {"root": root_pem, "wwdr": wwdr_pem, "cert": cert, "key": key}


@pytest.fixture(scope="module")
def signing_node(
    tmp_path_factory: pytest.TempPathFactory, pass_ca: dict[str, Path]
) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("passes-signed"),
        pass_certificate=str(pass_ca["cert"]),
        pass_key=str(pass_ca["key"]),
        pass_key_password="pw",
        pass_wwdr_certificate=str(pass_ca["wwdr"]),
        pass_organization_name="Example Node",
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def signing_client(signing_node: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(signing_node):
        yield c


async def test_signed_pass_verifies_against_the_operator_chain(
    signing_client: httpx.AsyncClient,
    documents: dict[str, bytes],
    pass_ca: dict[str, Path],
    tmp_path: Path,
) -> None:
    if shutil.which("openssl") is None:
        skip_unless_ci("openssl not installed")
    resp = await paid(signing_client, {"documentBase64": b64(documents["pdf417_pdf"])})
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["signed"] is True and UNSIGNED_WARNING not in doc["warnings"]
    pkpass = (await fetch(signing_client, doc["passes"][0]["save_url"])).content
    pass_doc, files = unpack(pkpass)
    assert pass_doc["passTypeIdentifier"] == PASS_TYPE
    assert pass_doc["teamIdentifier"] == TEAM
    assert pass_doc["organizationName"] == "Example Node"
    (tmp_path / "manifest.json").write_bytes(files["manifest.json"])
    (tmp_path / "signature").write_bytes(files["signature"])

    def verify(manifest: Path) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [
                "openssl",
                "cms",
                "-verify",
                "-binary",
                "-inform",
                "DER",
                "-in",
                str(tmp_path / "signature"),
                "-content",
                str(manifest),
                "-CAfile",
                str(pass_ca["root"]),
                "-purpose",
                "any",
                "-out",
                "/dev/null",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )

    ok = verify(tmp_path / "manifest.json")
    assert ok.returncode == 0, ok.stderr.decode()
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(files["manifest.json"].replace(b'"pass.json"', b'"pass.jsom"'))
    assert verify(tampered).returncode != 0


def test_signing_settings_are_checked_at_start(pass_ca: dict[str, Path]) -> None:
    base = Settings(
        pass_certificate=str(pass_ca["cert"]),
        pass_key=str(pass_ca["key"]),
        pass_key_password="pw",
        pass_wwdr_certificate=str(pass_ca["wwdr"]),
    )
    signing = load_signing(base)
    assert signing is not None and signing.team_identifier == TEAM
    assert load_signing(Settings()) is None
    from dataclasses import replace

    with pytest.raises(EngineConfigError, match="pass_key_password"):
        load_signing(replace(base, pass_key_password="wrong"))
    with pytest.raises(EngineConfigError, match="go together"):
        load_signing(replace(base, pass_wwdr_certificate=""))
    with pytest.raises(EngineConfigError, match="not the key"):
        load_signing(replace(base, pass_certificate=str(pass_ca["wwdr"])))
    with pytest.raises(EngineConfigError, match="cannot be read"):
        load_signing(replace(base, pass_key="/nonexistent/pass.key"))


# -- the BCBP parser -------------------------------------------------------------------------


def test_bcbp_round_trip_and_the_resolution_792_example() -> None:
    example = bcbp.parse("M1DESMARAIS/LUC       EABC123 YULFRAAC 0834 326J001A0025 100")
    leg = example.legs[0]
    assert (
        example.passenger,
        leg.flight,
        leg.origin,
        leg.destination,
        leg.seat,
        leg.sequence,
        leg.compartment,
        leg.julian_date,
    ) == ("LUC DESMARAIS", "AC834", "YUL", "FRA", "1A", "25", "J", 326)
    assert example.flight_date(leg, datetime.date(2026, 11, 25)) == datetime.date(2026, 11, 22)
    assert example.flight_date(leg, datetime.date(2027, 1, 10)) == datetime.date(2026, 11, 22)

    two = bcbp.parse(TWO_LEGS)
    assert [(x.flight, x.origin, x.destination) for x in two.legs] == [
        ("BA117", "LHR", "JFK"),
        ("AA15", "JFK", "SFO"),
    ]
    assert two.legs[0].frequent_flyer == "BA 12345678"
    assert two.issuer == "BA" and two.version == "6"
    # The issue date fixes the year: a flight on day 10 issued on day 360 is next year.
    late = bcbp.encode("A/B", [bcbp.LegInput("P", "AMS", "CDG", "KL", "1", 10)], issue_date="5360")
    parsed = bcbp.parse(late)
    assert parsed.flight_date(parsed.legs[0], datetime.date(2025, 12, 27)) == datetime.date(
        2026, 1, 10
    )


@pytest.mark.parametrize(
    "message",
    [
        "https://example.org/x" + " " * 60,
        "M5DESMARAIS/LUC       EABC123 YULFRAAC 0834 326J001A0025 100",  # 5 legs
        "M1DESMARAIS/LUC       EABC123 YU1FRAAC 0834 326J001A0025 100",  # airport code
        "M1DESMARAIS/LUC       EABC123 YULFRAAC 0834 399J001A0025 100",  # day 399
        "M1DESMARAIS/LUC       EABC123 YULFRAAC 0834 326J001A0025 1FF",  # variable part missing
        "M2DESMARAIS/LUC       EABC123 YULFRAAC 0834 326J001A0025 100",  # second leg missing
    ],
)
def test_bcbp_refuses_what_is_not_a_boarding_pass(message: str) -> None:
    with pytest.raises(bcbp.BcbpError):
        bcbp.parse(message)


def test_photo_is_really_tilted(documents: dict[str, bytes]) -> None:
    """The photo input is what the test says: turned and smaller than the page."""
    with Image.open(io.BytesIO(documents["aztec_photo"])) as photo:
        assert photo.format == "JPEG"
        width, _height = photo.size
    page_w, page_h = 1275 * 0.8, 1650 * 0.8
    expected_w = page_w * math.cos(math.radians(4)) + page_h * math.sin(math.radians(4))
    assert abs(width - expected_w) < 3


def test_reader_in_process(documents: dict[str, bytes]) -> None:
    """The pool's reader called directly: broken files are notes, a tilted PDF417 reads."""
    assert read_barcodes(b"%PDF-1.4 not really") == ([], ["the PDF could not be opened"])
    assert read_barcodes(b"GIF89a not really") == ([], ["the image could not be decoded"])
    found, notes = read_barcodes(documents["pdf417_photo"])
    assert [(b.format, b.message) for b in found] == [("PDF417", SECOND_PASSENGER)]
    assert notes == []
