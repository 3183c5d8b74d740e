"""Inputs for the document tests and bench: pages of known text rendered to PNG, to
scanned (image-only) PDFs and to text-layer PDFs, and receipts in several layouts."""

from __future__ import annotations

import io
from collections.abc import Sequence

from PIL import Image, ImageDraw, ImageFont

from satsgate.engines.local import pdf

SANS = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
MONO = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
CJK = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"


def text_image(
    lines: Sequence[str],
    *,
    width: int = 1200,
    size: int = 30,
    font: str = SANS,
    line_height: float = 1.6,
    margin: int = 60,
) -> Image.Image:
    """Black text on white, one line per entry ("" leaves a blank line)."""
    face = ImageFont.truetype(font, size)
    step = int(size * line_height)
    image = Image.new("L", (width, margin * 2 + step * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for index, line in enumerate(lines):
        draw.text((margin, margin + index * step), line, font=face, fill=0)
    return image


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def scanned_pdf(pages: Sequence[Image.Image], dpi: int = 150) -> bytes:
    """An image-only PDF (no text layer), as a scanner makes one."""
    out = io.BytesIO()
    first, *rest = [page.convert("L") for page in pages]
    first.save(out, "PDF", resolution=dpi, save_all=True, append_images=rest)
    return out.getvalue()


def a4_page(lines: Sequence[str], size: int = 36) -> Image.Image:
    """A 150-dpi A4 page (1240 x 1754) of text lines, as a scan of a letter."""
    image = Image.new("L", (1240, 1754), 255)
    draw = ImageDraw.Draw(image)
    face = ImageFont.truetype(SANS, size)
    for index, line in enumerate(lines):
        draw.text((110, 140 + index * int(size * 1.7)), line, font=face, fill=0)
    return image


def text_layer_pdf(*pages: str) -> bytes:
    body = (
        "".join(f'<div style="page-break-after: always"><p>{page}</p></div>' for page in pages[:-1])
        + f"<div><p>{pages[-1]}</p></div>"
    )
    return pdf.html_to_pdf(f"<html><body>{body}</body></html>").data


def receipt_image(
    header: Sequence[str],
    rows: Sequence[tuple[str, str]],
    footer: Sequence[str] = (),
    *,
    width: int = 760,
    size: int = 30,
) -> Image.Image:
    """A till receipt: centred header lines, item rows with the amount right-aligned."""
    face = ImageFont.truetype(MONO, size)
    step = int(size * 1.55)
    height = 80 + step * (len(header) + len(rows) + len(footer) + 2)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    y = 40
    for line in header:
        text_width = draw.textlength(line, font=face)
        draw.text(((width - text_width) / 2, y), line, font=face, fill=0)
        y += step
    y += step
    for left, right in rows:
        draw.text((40, y), left, font=face, fill=0)
        draw.text((width - 40 - draw.textlength(right, font=face), y), right, font=face, fill=0)
        y += step
    y += step
    for line in footer:
        draw.text((40, y), line, font=face, fill=0)
        y += step
    return image
