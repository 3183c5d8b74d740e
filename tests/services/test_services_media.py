"""Measuring caller files before payment (media.py), the callback guard, and the builders of
small real files the other service tests use."""

from __future__ import annotations

import base64
import io
import ipaddress
import struct
import wave
import zipfile

import pytest
from PIL import Image
from pypdf import PdfWriter

from satsgate.domain import media
from satsgate.public_urls import (
    IPAddress,
    Outbound,
    UnsafeUrl,
    check_public_https_url,
)

# -- builders of real (small) files ------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def png_bytes(width: int = 64, height: int = 48, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (width, height), 128).save(out, "PNG")
    return out.getvalue()


PNG = b64(png_bytes())


def pdf_bytes(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def wav_bytes(seconds: float, rate: int = 1000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(b"\x80" * int(seconds * rate))
    return out.getvalue()


def flac_bytes(seconds: float, rate: int = 44100) -> bytes:
    samples = int(seconds * rate)
    bits = (rate << 44) | (1 << 41) | (15 << 36) | samples  # 2 channels, 16 bit
    info = struct.pack(">HH", 4096, 4096) + b"\0" * 6 + bits.to_bytes(8, "big") + b"\0" * 16
    return b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info + b"\0" * 64


def mp3_cbr_bytes(seconds: float) -> bytes:
    """MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, no padding: 417-byte frames of silence."""
    frame = b"\xff\xfb\x90\x00" + b"\0" * 413
    return frame * round(seconds * 44100 / 1152)


def mp3_xing_bytes(frames: int) -> bytes:
    first = bytearray(b"\xff\xfb\x90\x00" + b"\0" * 413)
    first[36:48] = b"Xing" + struct.pack(">II", 1, frames)
    return bytes(first) + b"\xff\xfb\x90\x00" + b"\0" * 413


def m4a_bytes(seconds: float, timescale: int = 1000, version: int = 0) -> bytes:
    def box(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", 8 + len(body)) + kind + body

    if version == 0:
        mvhd = bytes([0, 0, 0, 0]) + struct.pack(">IIII", 0, 0, timescale, int(seconds * timescale))
    else:
        mvhd = bytes([1, 0, 0, 0]) + struct.pack(">QQIQ", 0, 0, timescale, int(seconds * timescale))
    return box(b"ftyp", b"M4A \0\0\0\0") + box(b"moov", box(b"mvhd", mvhd + b"\0" * 80))


def ogg_opus_bytes(seconds: float, pre_skip: int = 312) -> bytes:
    def page(granule: int, payload: bytes) -> bytes:
        return (
            b"OggS\x00\x00"
            + struct.pack("<q", granule)
            + b"\0" * 12
            + bytes([1, len(payload)])
            + payload
        )

    head = b"OpusHead" + bytes([1, 2]) + struct.pack("<H", pre_skip) + b"\0" * 8
    return page(0, head) + page(int(seconds * 48000) + pre_skip, b"\0" * 10)


def epub_bytes(chapters: list[str], spine_repeats: int = 1) -> bytes:
    """An EPUB of ``chapters``; its spine names them ``spine_repeats`` times over."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container xmlns="urn:oasis:names:tc:opendocument:xmlns:'
            'container" version="1.0"><rootfiles><rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        items = "".join(
            f'<item id="c{i}" href="text/c{i}.xhtml" media-type="application/xhtml+xml"/>'
            for i in range(len(chapters))
        )
        spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters))) * spine_repeats
        z.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for i, text in enumerate(chapters):
            z.writestr(
                f"OEBPS/text/c{i}.xhtml",
                '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Not counted</title>'
                f"<style>p {{ color: red }}</style></head><body><p>{text}</p></body></html>",
            )
    return out.getvalue()


# -- audio --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fmt", "seconds"),
    [
        (wav_bytes(12.5), "wav", 12.5),
        (flac_bytes(95.0), "flac", 95.0),
        (mp3_cbr_bytes(10.0), "mp3", 10.0),
        (mp3_xing_bytes(2297), "mp3", 2297 * 1152 / 44100),
        (m4a_bytes(61.5), "m4a", 61.5),
        (m4a_bytes(3600.0, timescale=44100, version=1), "m4a", 3600.0),
        (ogg_opus_bytes(42.0), "ogg", 42.0),
    ],
    ids=["wav", "flac", "mp3-cbr", "mp3-xing", "m4a-v0", "m4a-v1", "ogg-opus"],
)
def test_audio_duration_from_headers(data: bytes, fmt: str, seconds: float) -> None:
    assert media.audio_format(data) == fmt
    assert media.audio_duration_s(data) == pytest.approx(seconds, abs=0.05)


def test_id3_tag_is_skipped_before_the_first_frame() -> None:
    tag_body = b"\0" * 300
    size = bytes([0, 0, 300 >> 7, 300 & 0x7F])  # syncsafe
    data = b"ID3\x04\x00\x00" + size + tag_body + mp3_cbr_bytes(5.0)
    assert media.audio_duration_s(data) == pytest.approx(5.0, abs=0.05)


@pytest.mark.parametrize(
    "data",
    [b"hello world, not audio", b"RIFF\0\0\0\0WAVEjunk", b"fLaC\x81\0\0\0", png_bytes()],
    ids=["text", "wav-without-chunks", "flac-without-streaminfo", "png"],
)
def test_unmeasurable_audio_is_refused(data: bytes) -> None:
    with pytest.raises(media.MediaError):
        media.audio_duration_s(data)


# -- images and documents -----------------------------------------------------------------------


def test_image_info_reads_the_header_only() -> None:
    info = media.image_info(png_bytes(300, 200))
    assert (info.format, info.width, info.height) == ("PNG", 300, 200)
    with pytest.raises(media.MediaError):
        media.image_info(b"GIF89a-truncated")


def test_document_pages_counts_pdf_pages_and_images_as_one() -> None:
    assert media.document_pages(pdf_bytes(3)) == 3
    assert media.document_pages(png_bytes()) == 1
    with pytest.raises(media.MediaError):
        media.document_pages(b"%PDF-1.7 broken")
    with pytest.raises(media.MediaError):
        media.document_pages(b"just text")


def test_book_visible_characters_by_chapter() -> None:
    book = media.measure_book(epub_bytes(["Hello   world", "x" * 1000]), "b.epub")
    assert book.chapters == (11, 1000)  # whitespace runs count once; head is not counted
    assert book.chars_of([1]) == 1000
    with pytest.raises(media.MediaError):
        book.chars_of([2])
    txt = media.measure_book(b"one\n\n\ntwo  three", "b.txt")
    assert txt.chars == len("one") + len("two three")
    assert media.measure_book(pdf_bytes(2), "b.pdf").chapters == (0, 0)
    with pytest.raises(media.MediaError):
        media.measure_book(b"not a zip", "b.epub")
    with pytest.raises(media.MediaError):
        media.measure_book(b"x", "b.docx")


# -- callback guard -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.org/cb",  # not https
        "https://127.0.0.1/cb",
        "https://127.1/cb",  # inet_aton short form
        "https://2130706433/cb",  # decimal
        "https://0x7f000001/cb",  # hex
        "https://[::1]/cb",
        "https://[::ffff:10.0.0.1]/cb",  # v4-mapped private
        "https://[::127.0.0.1]/cb",  # IPv4-compatible loopback
        "https://[::8.8.8.8]/cb",  # IPv4-compatible: deprecated, refused whatever it holds
        "https://[::ffff:0:127.0.0.1]/cb",  # SIIT IPv4-translated
        "https://[64:ff9b::127.0.0.1]/cb",  # NAT64 well-known prefix, loopback
        "https://[64:ff9b::a9fe:a9fe]/cb",  # NAT64 of 169.254.169.254 (cloud metadata)
        "https://[64:ff9b::10.0.0.1]/cb",  # NAT64 of a private address
        "https://[64:ff9b:1::808:808]/cb",  # local-use NAT64: refused outright
        "https://[64:ff9b:1:7f:0:1::]/cb",  # local-use NAT64 /48 spelling of 127.0.0.1
        "https://[2002:7f00:1::1]/cb",  # 6to4 of 127.0.0.1
        "https://[2002:c0a8:10a::1]/cb",  # 6to4 of 192.168.1.10
        "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/cb",  # Teredo, client 127.0.0.1
        "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/cb",  # Teredo, public client
        "https://[2606:4700::5efe:10.0.0.1]/cb",  # ISATAP interface id of a private IPv4
        "https://[2606:4700::200:5efe:127.0.0.1]/cb",  # ISATAP, u bit set, loopback
        "https://10.1.2.3/cb",
        "https://172.16.0.1/cb",
        "https://192.168.1.10:8443/cb",
        "https://169.254.169.254/latest",  # link-local (cloud metadata)
        "https://100.64.0.1/cb",  # CGNAT
        "https://[fe80::1]/cb",
        "https://[fc00::1]/cb",
        "https://0.0.0.0/cb",
        "https://localhost/cb",
        "https://printer.local/cb",
        "https://intranet/cb",  # single label
        "https://user:pw@hooks.example.org/cb",
        "https://hooks.example.org/a b",
        "ftp://hooks.example.org/",
    ],
)
def test_non_public_or_non_https_urls_are_refused(url: str) -> None:
    with pytest.raises(UnsafeUrl):
        check_public_https_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.org/cb?x=1",
        "https://8.8.8.8/cb",
        "https://[2606:4700::1]:8443/",
        "https://[::ffff:8.8.8.8]/cb",  # v4-mapped public
        "https://[64:ff9b::8.8.8.8]/cb",  # NAT64 of a public address (DNS64 hands these out)
        "https://[2002:808:808::1]/cb",  # 6to4 of a public address
        "https://[2606:4700::200:5efe:8.8.8.8]/cb",  # ISATAP id of a public address
    ],
)
def test_public_https_urls_pass(url: str) -> None:
    assert check_public_https_url(url) == url


async def test_public_addresses_refuse_names_that_resolve_inside() -> None:
    answers = {"inside.example.org": ["127.0.0.1"], "mixed.example.org": ["1.1.1.1", "10.0.0.7"],
               "ula.example.org": ["fd00::1"], "out.example.org": ["2606:4700::1"]}  # fmt: skip

    async def dns(host: str, port: int) -> list[IPAddress]:  # a fake of the resolver
        return [ipaddress.ip_address(a) for a in answers[host]]

    outbound = Outbound(lookup=dns)
    with pytest.raises(UnsafeUrl):
        await outbound.public_addresses("https://localhost./cb")  # trailing dot: still local
    for host in ("inside", "mixed", "ula"):
        with pytest.raises(UnsafeUrl, match="non-public"):
            await outbound.public_addresses(f"https://{host}.example.org/cb")
    found = await outbound.public_addresses("https://out.example.org/cb")
    assert [str(a) for a in found] == ["2606:4700::1"]
    assert [str(a) for a in await outbound.public_addresses("https://1.1.1.1/x")] == ["1.1.1.1"]


# Spellings of inside IPv4 addresses in IPv6 that a DNS server can answer as AAAA records.
IPV4_IN_IPV6_INSIDE = [
    "::127.0.0.1",  # IPv4-compatible
    "::ffff:0:10.0.0.1",  # SIIT IPv4-translated
    "64:ff9b::127.0.0.1",  # NAT64 well-known prefix
    "64:ff9b::169.254.169.254",
    "64:ff9b:1::a00:1",  # local-use NAT64
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2606:4700::5efe:7f00:1",  # ISATAP of 127.0.0.1
]


@pytest.mark.parametrize("answer", IPV4_IN_IPV6_INSIDE)
async def test_names_that_resolve_to_an_inside_ipv4_in_ipv6_are_refused(answer: str) -> None:
    """The DNS answers an AAAA record that carries an inside IPv4 address: the connect-time
    check (the one every pinned fetch runs) refuses it by the IPv4 rules."""

    async def dns(host: str, port: int) -> list[IPAddress]:  # a fake of the resolver
        return [ipaddress.ip_address(answer)]

    with pytest.raises(UnsafeUrl, match="non-public"):
        await Outbound(lookup=dns).public_addresses("https://hooks.example.org/cb")


async def test_a_name_whose_aaaa_is_nat64_of_a_public_address_passes() -> None:
    async def dns(host: str, port: int) -> list[IPAddress]:  # a DNS64 resolver's answer
        return [ipaddress.ip_address("64:ff9b::8.8.8.8")]

    found = await Outbound(lookup=dns).public_addresses("https://ipv4-only.example.org/cb")
    assert [str(a) for a in found] == ["64:ff9b::808:808"]


def test_a_book_is_measured_within_bounds_before_any_invoice() -> None:
    """Measuring runs before the invoice: a spine naming one file thousands of times, or
    a PDF of thousands of pages, is refused instead of parsed for seconds."""
    many = epub_bytes(["one chapter"], spine_repeats=media.MAX_BOOK_CHAPTERS + 1)
    with pytest.raises(media.MediaError, match="more than 2000 chapters"):
        media.measure_book(many, "b.epub")
    repeats = media.MAX_BOOK_SPINE_BYTES // (2 * 1024 * 1024) + 1
    heavy = epub_bytes(["word " * 420_000], spine_repeats=repeats)  # over 2 MiB a document
    with pytest.raises(media.MediaError, match="more than 100 MB"):
        media.measure_book(heavy, "b.epub")
    # Within the bounds, a repeated document counts at each place it is read.
    assert media.measure_book(epub_bytes(["abc"], spine_repeats=3), "b.epub").chapters == (3,) * 3
    writer = PdfWriter()
    for _ in range(media.MAX_BOOK_CHAPTERS + 1):
        writer.add_blank_page(72, 72)
    pdf = io.BytesIO()
    writer.write(pdf)
    with pytest.raises(media.MediaError, match="at most 2000"):
        media.measure_book(pdf.getvalue(), "b.pdf")


def test_corrupt_epub_member_is_a_media_error_not_a_crash() -> None:
    good = zipfile.ZipFile(io.BytesIO(epub_bytes(["x"])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in ("META-INF/container.xml", "OEBPS/content.opf"):
            z.writestr(name, good.read(name))
        z.writestr("OEBPS/text/c0.xhtml", b"<p>" + b"hello " * 5000 + b"</p>")
    data = bytearray(out.getvalue())
    start = data.find(b"OEBPS/text/c0.xhtml") + 40
    data[start : start + 50] = b"\xff" * 50  # break the deflate stream
    with pytest.raises(media.MediaError):
        media.measure_book(bytes(data), "b.epub")
