"""Local engine ``wallet_pass``: boarding passes to Apple Wallet passes (.pkpass).

- zxing-cpp reads PDF417, Aztec, QR and Data Matrix codes from photos and from PDF pages
  (rendered with pypdfium2), in the process pool;
- the IATA BCBP message of each code is parsed (satsgate.engines.local.bcbp): one pass
  per passenger per leg, carrying the original message in its original format;
- each pass is a zip of pass.json (``boardingPass``, ``PKTransitTypeAir``), icons,
  manifest.json (SHA-1 of every file) and, when the operator has configured a Pass Type ID
  certificate, ``signature``: a detached PKCS#7 signature of the manifest with that
  certificate, Apple's WWDR intermediate included. Without one the passes are built
  unsigned and the result says so (Apple Wallet opens only signed passes).

Settings (top-level keys, or ``SATSGATE_PASS_*`` environment variables)::

    pass_certificate = "/etc/satsgate/pass.pem"   # PEM or DER; or a .p12 / .pfx with its key
    pass_key = "/etc/satsgate/pass.key"           # PEM private key (not with a .p12)
    pass_key_password = ""                        # better: SATSGATE_PASS_KEY_PASSWORD
    pass_wwdr_certificate = "/etc/satsgate/AppleWWDRCAG4.pem"
    pass_organization_name = "My node"            # shown on the pass; default "satsgate"

The pass type identifier and team identifier are read from the certificate (its UID and
OU, as Apple issues them).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import hashlib
import importlib.util
import io
import json
import math
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs7, pkcs12
from cryptography.x509.oid import NameOID

from satsgate.config.settings import Settings
from satsgate.engines.config import EngineConfigError
from satsgate.engines.local import bcbp
from satsgate.engines.registry import EngineDeps, LocalEngine
from satsgate.engines.wallet_pass import PassBatch, WalletPass

ENGINE = "wallet_pass"
# Pages of one PDF searched for barcodes (a PDF per passenger rarely has more than 3).
MAX_PDF_PAGES = 10
_DPI = (200, 300)  # a page with no boarding-pass code at the first is tried at the second
MAX_RENDER_PIXELS = 40_000_000  # a page bigger than A2 at 300 dpi is rendered smaller
UNSIGNED_PASS_TYPE = "pass.org.satsgate.unsigned"
UNSIGNED_WARNING = (
    "These passes are not signed: this node has no pass certificate configured. Apple "
    "Wallet opens only signed passes; other wallet apps may import them. The barcode on "
    "each pass is the original one and scans at the gate either way."
)
PK_FORMATS = {
    "PDF417": "PKBarcodeFormatPDF417",
    "Aztec": "PKBarcodeFormatAztec",
    "QRCode": "PKBarcodeFormatQR",
    "DataMatrix": "PKBarcodeFormatQR",  # Wallet shows no Data Matrix: the same message as QR
}


# -- reading barcodes (process pool) -----------------------------------------------------


@dataclass(frozen=True)
class FoundBarcode:
    format: str  # a PK_FORMATS key
    message: str  # the code's bytes as ISO-8859-1 (BCBP is ASCII)
    page: int  # 1-based; 1 for an image


def _zxing_formats() -> Any:
    import zxingcpp

    f = zxingcpp.BarcodeFormat
    return f.PDF417 | f.Aztec | f.QRCode | f.DataMatrix


def _format_name(fmt: Any) -> str:
    import zxingcpp

    f = zxingcpp.BarcodeFormat
    names = {f.PDF417: "PDF417", f.Aztec: "Aztec", f.QRCode: "QRCode", f.DataMatrix: "DataMatrix"}
    return names.get(fmt, str(fmt))


def _scan(image: Any, formats: Any = None) -> list[FoundBarcode]:
    import zxingcpp

    found = zxingcpp.read_barcodes(
        image, formats=formats or _zxing_formats(), text_mode=zxingcpp.TextMode.Plain
    )
    return [
        FoundBarcode(_format_name(b.format), bytes(b.bytes).decode("latin-1"), 1)
        for b in found
        if b.valid
    ]


def _has_pass(found: list[FoundBarcode]) -> bool:
    return any(bcbp.looks_like_bcbp(b.message) for b in found)


def _scan_photo(image: Any) -> list[FoundBarcode]:
    """A photo: as is, then (small photos) enlarged, then sharpened: phone pictures of a
    printed pass are often soft."""
    from PIL import Image, ImageFilter

    found = _scan(image)
    if _has_pass(found):
        return found
    if max(image.size) < 1600:
        scaled = image.resize((image.width * 2, image.height * 2), Image.Resampling.LANCZOS)
        found += _scan(scaled)
        if _has_pass(found):
            return found
    found += _scan(image.filter(ImageFilter.UnsharpMask(radius=2, percent=150)))
    if _has_pass(found):
        return found
    return found + _deskew_pdf417(image)


# PDF417 is read only within a few degrees of level (Aztec and QR at any angle): a tilted
# photo is turned back in these steps until it reads.
_DESKEW_STEP = 5
_DESKEW_MAX = 45
_DESKEW_SIDE = 2000  # pixels: the photo is reduced to this first (the turns are the cost)


def _deskew_pdf417(image: Any) -> list[FoundBarcode]:
    import zxingcpp
    from PIL import Image

    if max(image.size) > _DESKEW_SIDE:
        ratio = _DESKEW_SIDE / max(image.size)
        image = image.resize(
            (round(image.width * ratio), round(image.height * ratio)), Image.Resampling.BOX
        )
    for step in range(_DESKEW_STEP, _DESKEW_MAX + 1, _DESKEW_STEP):
        for angle in (step, -step):
            turned = image.rotate(
                angle, resample=Image.Resampling.BILINEAR, expand=True, fillcolor=255
            )
            found = _scan(turned, zxingcpp.BarcodeFormat.PDF417)
            if _has_pass(found):
                return found
    return []


def _read_pdf(document: bytes, notes: list[str]) -> list[FoundBarcode]:
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    found: list[FoundBarcode] = []
    try:
        pdf = pdfium.PdfDocument(document)
    except pdfium.PdfiumError:
        notes.append("the PDF could not be opened")
        return found
    try:
        pages = len(pdf)
        if pages > MAX_PDF_PAGES:
            notes.append(f"only its first {MAX_PDF_PAGES} of {pages} pages were searched")
        for number in range(min(pages, MAX_PDF_PAGES)):
            page = pdf[number]
            try:
                width_pt, height_pt = page.get_size()
                # A page of any size renders to at most MAX_RENDER_PIXELS.
                cap = math.sqrt(MAX_RENDER_PIXELS / max(1.0, width_pt * height_pt))
                on_page: list[FoundBarcode] = []
                for dpi in _DPI:
                    bitmap = page.render(scale=min(dpi / 72, cap), grayscale=True)
                    on_page = _scan(bitmap.to_pil())
                    bitmap.close()
                    if _has_pass(on_page) or dpi / 72 >= cap:
                        break
            finally:
                page.close()
            found += [FoundBarcode(b.format, b.message, number + 1) for b in on_page]
    finally:
        pdf.close()
    return found


def read_barcodes(document: bytes) -> tuple[list[FoundBarcode], list[str]]:
    """Every 2D code of a PDF (its first pages) or an image, each message once; notes."""
    notes: list[str] = []
    found: list[FoundBarcode] = []
    if document[:1024].lstrip().startswith(b"%PDF-"):
        found = _read_pdf(document, notes)
    else:
        from PIL import Image, ImageOps, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(document)) as opened:
                image = ImageOps.exif_transpose(opened).convert("L")
        except (UnidentifiedImageError, OSError):
            notes.append("the image could not be decoded")
        else:
            found = _scan_photo(image)
    unique: dict[str, FoundBarcode] = {}
    for barcode in found:
        unique.setdefault(barcode.message, barcode)
    return list(unique.values()), notes


# -- building passes (process pool) ------------------------------------------------------


@dataclass(frozen=True)
class Signing:
    """The operator's pass-signing identity, as bytes (it crosses to pool workers)."""

    certificate_pem: bytes
    key_pem: bytes = b""  # PKCS#8, unencrypted in memory only
    wwdr_pem: bytes = b""
    pass_type_identifier: str = ""
    team_identifier: str = ""


@dataclass(frozen=True)
class PassJob:
    document: int
    data: bcbp.BoardingPassData
    leg: int
    barcode_format: str
    date: str | None
    organization_name: str


@functools.cache
def _icon(size: int) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (size, size), (30, 41, 59, 255))
    draw = ImageDraw.Draw(image)
    s = size / 29
    # A paper plane: the sign of a boarding pass, drawn, no font needed.
    draw.polygon(
        [(4 * s, 14 * s), (25 * s, 5 * s), (16 * s, 25 * s), (13 * s, 17 * s)],
        fill=(248, 250, 252, 255),
    )
    draw.line([(13 * s, 17 * s), (25 * s, 5 * s)], fill=(30, 41, 59, 255), width=max(1, size // 29))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _field(key: str, label: str, value: str) -> dict[str, str]:
    return {"key": key, "label": label, "value": value}


def pass_json(job: PassJob, signing: Signing | None) -> dict[str, Any]:
    data, leg = job.data, job.data.legs[job.leg]
    barcode = {
        "format": PK_FORMATS[job.barcode_format],
        "message": data.message,
        "messageEncoding": "iso-8859-1",
    }
    serial = hashlib.sha256(f"{data.message}\n{job.leg}".encode("latin-1")).hexdigest()[:32]
    auxiliary = [_field("seat", "SEAT", leg.seat or "-")]
    if leg.compartment:
        auxiliary.append(_field("class", "CLASS", leg.compartment))
    if leg.sequence:
        auxiliary.append(_field("sequence", "SEQ", leg.sequence))
    back = [
        _field("pnr", "Booking reference", leg.pnr),
        _field("carrier", "Operating carrier", leg.carrier),
        _field("name", "Name on the ticket", data.passenger_name),
    ]
    if leg.frequent_flyer:
        back.append(_field("ffp", "Frequent flyer", leg.frequent_flyer))
    back.append(
        _field(
            "note",
            "Note",
            "Made from the boarding pass's barcode, which is unchanged. Gate and boarding time "
            "are not in the barcode: check them with the airline.",
        )
    )
    return {
        "formatVersion": 1,
        "passTypeIdentifier": signing.pass_type_identifier if signing else UNSIGNED_PASS_TYPE,
        "teamIdentifier": signing.team_identifier if signing else "UNSIGNED",
        "serialNumber": serial,
        "organizationName": job.organization_name,
        "description": f"Boarding pass {leg.flight} {leg.origin}-{leg.destination}",
        "logoText": leg.flight,
        "foregroundColor": "rgb(248, 250, 252)",
        "backgroundColor": "rgb(30, 41, 59)",
        "labelColor": "rgb(148, 163, 184)",
        "boardingPass": {
            "transitType": "PKTransitTypeAir",
            "headerFields": [_field("flight", "FLIGHT", leg.flight)],
            "primaryFields": [
                _field("origin", "FROM", leg.origin),
                _field("destination", "TO", leg.destination),
            ],
            "secondaryFields": [
                _field("passenger", "PASSENGER", data.passenger),
                _field("date", "DATE", job.date or "-"),
            ],
            "auxiliaryFields": auxiliary,
            "backFields": back,
        },
        "barcodes": [barcode],
        "barcode": barcode,  # iOS before 9 reads this one
    }


@functools.cache
def _signer(signing: Signing) -> tuple[x509.Certificate, Any, x509.Certificate | None]:
    cert = x509.load_pem_x509_certificate(signing.certificate_pem)
    key = serialization.load_pem_private_key(signing.key_pem, None)
    wwdr = x509.load_pem_x509_certificate(signing.wwdr_pem) if signing.wwdr_pem else None
    return cert, key, wwdr


def sign_manifest(manifest: bytes, signing: Signing) -> bytes:
    """A detached PKCS#7 (DER) signature of the manifest, with the WWDR certificate."""
    cert, key, wwdr = _signer(signing)
    builder = (
        pkcs7.PKCS7SignatureBuilder().set_data(manifest).add_signer(cert, key, hashes.SHA256())
    )
    if wwdr is not None:
        builder = builder.add_certificate(wwdr)
    return builder.sign(
        serialization.Encoding.DER,
        [pkcs7.PKCS7Options.DetachedSignature, pkcs7.PKCS7Options.Binary],
    )


def build_pkpass(job: PassJob, signing: Signing | None) -> bytes:
    files = {
        "pass.json": json.dumps(pass_json(job, signing), indent=2).encode(),
        "icon.png": _icon(29),
        "icon@2x.png": _icon(58),
        "icon@3x.png": _icon(87),
    }
    manifest = json.dumps(
        {name: hashlib.sha1(data).hexdigest() for name, data in files.items()}, indent=2
    ).encode()
    files["manifest.json"] = manifest
    if signing is not None:
        files["signature"] = sign_manifest(manifest, signing)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def build_passes(jobs: list[PassJob], signing: Signing | None) -> list[bytes]:
    return [build_pkpass(job, signing) for job in jobs]


# -- the engine ----------------------------------------------------------------------------


class PkpassEngine:
    def __init__(
        self,
        run_cpu: Callable[..., Any],
        signing: Signing | None,
        organization_name: str = "satsgate",
        today: Callable[[], datetime.date] = datetime.date.today,
    ) -> None:
        self._run_cpu = run_cpu
        self.signing = signing
        self.organization_name = organization_name
        self._today = today

    async def passes(self, documents: Sequence[bytes]) -> PassBatch:
        reads: list[tuple[list[FoundBarcode], list[str]]] = await asyncio.gather(
            *(self._run_cpu(read_barcodes, document) for document in documents)
        )
        today = self._today()
        warnings: list[str] = []
        jobs: list[PassJob] = []
        seen: dict[str, int] = {}
        several = len(documents) > 1
        for index, (found, notes) in enumerate(reads):
            label = f"document {index + 1}" if several else "the document"
            warnings += [f"{label}: {note}" for note in notes]
            usable = 0
            for barcode in found:
                data = _boarding_pass(barcode, label, index, seen, warnings)
                if data is None:
                    continue
                usable += 1
                for leg_index, leg in enumerate(data.legs):
                    date = data.flight_date(leg, today)
                    jobs.append(
                        PassJob(
                            index,
                            data,
                            leg_index,
                            barcode.format,
                            date.isoformat() if date else None,
                            self.organization_name,
                        )
                    )
            if not usable and not any(seen.get(b.message) is not None for b in found):
                warnings.append(f"{label}: no boarding-pass barcode found")
        if jobs and self.signing is None:
            warnings.append(UNSIGNED_WARNING)
        files: list[bytes] = await self._run_cpu(build_passes, jobs, self.signing) if jobs else []
        signed = self.signing is not None
        passes = tuple(
            _wallet_pass(job, pkpass, signed) for job, pkpass in zip(jobs, files, strict=True)
        )
        return PassBatch(passes, tuple(warnings))


def _boarding_pass(
    barcode: FoundBarcode, label: str, index: int, seen: dict[str, int], warnings: list[str]
) -> bcbp.BoardingPassData | None:
    """The boarding pass a barcode of document ``index`` holds, the first time it is
    seen (``seen``: message -> its first document); None, said in ``warnings``, for a
    code that is no boarding pass, cannot be read, or was seen before."""
    if not bcbp.looks_like_bcbp(barcode.message):
        warnings.append(f"{label}: a {barcode.format} code that is not a boarding pass was ignored")
        return None
    try:
        data = bcbp.parse(barcode.message)
    except bcbp.BcbpError as exc:
        warnings.append(f"{label}: a {barcode.format} code is not a readable boarding pass ({exc})")
        return None
    if barcode.message in seen:
        first = seen[barcode.message]
        warnings.append(
            f"{label}: the same boarding pass as document {first + 1}; made once"
            if first != index
            else f"{label}: the same boarding pass appears twice; made once"
        )
        return None
    seen[barcode.message] = index
    if barcode.format == "DataMatrix":
        warnings.append(
            f"{label}: a Data Matrix code is shown as a QR code "
            "(wallets have no Data Matrix); it holds the same data"
        )
    return data


def _wallet_pass(job: PassJob, pkpass: bytes, signed: bool) -> WalletPass:
    leg = job.data.legs[job.leg]
    return WalletPass(
        document=job.document,
        passenger=job.data.passenger,
        flight=leg.flight,
        origin=leg.origin,
        destination=leg.destination,
        date=job.date,
        seat=leg.seat or None,
        compartment=leg.compartment or None,
        sequence=leg.sequence or None,
        pnr=leg.pnr,
        barcode_format=job.barcode_format,
        signed=signed,
        pkpass=pkpass,
    )


# -- configuration -------------------------------------------------------------------------


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise EngineConfigError(f"{setting} = {path!r} cannot be read: {exc.strerror}") from None


def _load_cert(data: bytes, setting: str) -> x509.Certificate:
    try:
        if b"-----BEGIN" in data:
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError:
        raise EngineConfigError(f"{setting} is not a certificate (PEM or DER)") from None


def _subject(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> str:
    values = cert.subject.get_attributes_for_oid(oid)
    return str(values[0].value) if values else ""


def load_signing(settings: Settings) -> Signing | None:
    """The signing identity the settings name; None when none is configured;
    EngineConfigError (satsgate refuses to start) when it is incomplete or unusable."""
    if not (settings.pass_certificate or settings.pass_key or settings.pass_wwdr_certificate):
        return None
    if not settings.pass_certificate or not settings.pass_wwdr_certificate:
        raise EngineConfigError(
            "wallet passes: pass_certificate and pass_wwdr_certificate go together "
            "(and pass_key, unless the certificate is a .p12 holding it)"
        )
    password = settings.pass_key_password.encode() or None
    raw = _read(settings.pass_certificate, "pass_certificate")
    key: Any
    if settings.pass_certificate.lower().endswith((".p12", ".pfx")):
        try:
            key, cert, _extra = pkcs12.load_key_and_certificates(raw, password)
        except ValueError:
            raise EngineConfigError(
                "pass_certificate: the .p12 cannot be opened (wrong pass_key_password?)"
            ) from None
        if key is None or cert is None:
            raise EngineConfigError("pass_certificate: the .p12 holds no key and certificate")
    else:
        if not settings.pass_key:
            raise EngineConfigError("pass_key is needed with a PEM or DER pass_certificate")
        cert = _load_cert(raw, "pass_certificate")
        key_pem = _read(settings.pass_key, "pass_key")
        try:
            key = serialization.load_pem_private_key(key_pem, password)
        except (ValueError, TypeError):
            raise EngineConfigError(
                "pass_key is not a PEM private key, or pass_key_password does not open it"
            ) from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise EngineConfigError("pass_key must be an RSA or EC key")
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise EngineConfigError("pass_key is not the key of pass_certificate")
    wwdr = _load_cert(
        _read(settings.pass_wwdr_certificate, "pass_wwdr_certificate"), "pass_wwdr_certificate"
    )
    pass_type = _subject(cert, NameOID.USER_ID)
    team = _subject(cert, NameOID.ORGANIZATIONAL_UNIT_NAME)
    if not pass_type or not team:
        raise EngineConfigError(
            "pass_certificate: no pass type identifier (UID) or team identifier (OU) in its "
            "subject; use the Pass Type ID certificate Apple issued"
        )
    return Signing(
        certificate_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        wwdr_pem=wwdr.public_bytes(serialization.Encoding.PEM),
        pass_type_identifier=pass_type,
        team_identifier=team,
    )


def _probe() -> str:
    missing = [m for m in ("zxingcpp", "pypdfium2") if importlib.util.find_spec(m) is None]
    return f"{' and '.join(missing)} not installed" if missing else ""


def _build(deps: EngineDeps) -> PkpassEngine:
    return PkpassEngine(
        deps.run_cpu,
        load_signing(deps.settings),
        deps.settings.pass_organization_name or "satsgate",
    )


LOCAL = LocalEngine(
    engine=ENGINE,
    label="zxing-cpp barcodes, IATA BCBP, .pkpass",
    probe=_probe,
    build=_build,
)
