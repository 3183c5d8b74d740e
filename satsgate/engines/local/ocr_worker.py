"""OCR work that runs in the process pool (spawned workers): top-level functions only.

- a PDF's text layer: pypdfium2, no OCR;
- a scanned page or an image: tesseract (through pytesseract) for Latin-script
  languages, RapidOCR (PP-OCRv4 ONNX models shipped in its wheel) for Chinese and
  Japanese, and as the second reading when tesseract is unsure of what it read.

Every function returns plain data (picklable); a failure raises OcrFailed, which the
engine turns into a refunded EngineError.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageOps, ImageStat

# Tesseract language packs (Debian tesseract-ocr-LANG) by ISO 639-1 code: the Latin-script
# ones are read together when no language is named.
LATIN_LANGS = {
    "en": "eng", "de": "deu", "fr": "fra", "es": "spa", "it": "ita", "pt": "por", "nl": "nld",
}  # fmt: skip
TESSERACT_LANGS = {**LATIN_LANGS, "ja": "jpn"}
# Chinese: RapidOCR (PP-OCRv4 Chinese models). Japanese: tesseract's jpn pack, which reads
# kana (the Chinese models read kanji but drop most kana), else RapidOCR.
CJK_LANGS = frozenset({"zh", "ja"})

# Rendering of scanned PDF pages for OCR.
OCR_DPI = 300
MAX_RENDER_SIDE = 4200  # pixels; larger pages are rendered at a lower resolution
# A page holding images and fewer visible characters of text than this is read by OCR;
# a page mostly covered by images (a scan), below SCAN_MAX_TEXT_CHARS.
MIN_TEXT_LAYER_CHARS = 24
SCAN_COVERAGE = 0.5
SCAN_MAX_TEXT_CHARS = 200
# Tesseract below this mean word confidence: RapidOCR reads the page too and the better wins.
UNSURE_CONFIDENCE = 0.6
# Tesseract below this mean word confidence: its orientation detection checks the page
# (cheap: gibberish from a page on its side still scores some 0.6).
CHECK_ORIENTATION_BELOW = 0.8
# Tesseract's orientation detection below this confidence leaves the page as it is.
ORIENTATION_CONFIDENCE = 2.0
# Seconds one tesseract run may take (the pool's time limit stops the rest).
TESSERACT_TIMEOUT_S = 100

_KANA = re.compile(r"[\u3040-\u30ff]")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


class OcrFailed(Exception):
    """The OCR tool failed on this input (not the caller's fault: refunded)."""


@dataclass(frozen=True)
class PageText:
    text: str
    method: str  # "text-layer", "tesseract" or "rapidocr"
    confidence: float | None = None


# -- PDF -----------------------------------------------------------------------------------


def pdf_text_layer(data: bytes) -> list[tuple[str, bool]]:
    """Every page's text layer ("" for none), and whether the page needs OCR: it holds
    an image (a scan) and too little text of its own to be the page's text."""
    import pypdfium2 as pdfium  # type: ignore[import-untyped]
    import pypdfium2.raw as pdfium_c  # type: ignore[import-untyped]

    pdf = pdfium.PdfDocument(data)
    try:
        out = []
        for index in range(len(pdf)):
            page = pdf[index]
            try:
                textpage = page.get_textpage()
                try:
                    text = _tidy_layer(textpage.get_text_range())
                finally:
                    textpage.close()
                width, height = page.get_size()
                covered = 0.0
                for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]):
                    left, bottom, right, top = obj.get_bounds()
                    covered += max(0.0, min(right, width) - max(left, 0.0)) * max(
                        0.0, min(top, height) - max(bottom, 0.0)
                    )
            finally:
                page.close()
            coverage = covered / max(width * height, 1.0)
            out.append((text, needs_ocr(text, coverage)))
        return out
    finally:
        pdf.close()


def _tidy_layer(text: str) -> str:
    """pdfium's text: CRLF line ends, form feeds; -> paragraphs split at blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n").replace("\x00", "")
    lines = [line.rstrip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def needs_ocr(layer_text: str, image_coverage: float) -> bool:
    """A page mostly covered by images with little text (a scan, perhaps with a stamped
    header), or an image with almost no text, is read by OCR."""
    chars = len("".join(layer_text.split()))
    if image_coverage >= SCAN_COVERAGE:
        return chars < SCAN_MAX_TEXT_CHARS
    return image_coverage > 0 and chars < MIN_TEXT_LAYER_CHARS


def render_pdf_page(data: bytes, index: int, dpi: int = OCR_DPI) -> Image.Image:
    """Page ``index`` as a grayscale image at ``dpi`` (lower for very large pages)."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:
        page = pdf[index]
        try:
            width, height = page.get_size()  # points
            scale = min(dpi / 72, MAX_RENDER_SIDE / max(width, height, 1))
            bitmap = page.render(scale=scale, grayscale=True)
            image: Image.Image = bitmap.to_pil()
            image.load()
            return image.convert("L")
        finally:
            page.close()
    finally:
        pdf.close()


def ocr_pdf_page(data: bytes, index: int, language: str | None, layout: str) -> PageText:
    return ocr_pil(render_pdf_page(data, index), language, layout)


# -- images --------------------------------------------------------------------------------


def ocr_image(data: bytes, language: str | None, layout: str) -> PageText:
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.seek(0)  # the first frame of a GIF or multi-page TIFF
            image = ImageOps.exif_transpose(img) or img
            image = _flatten(image)
    except OcrFailed:
        raise
    except Exception as exc:  # Pillow's many decoding errors
        raise OcrFailed(f"the image cannot be decoded ({type(exc).__name__})") from None
    # Tesseract reads best with letters some 20-40 px high: enlarge small pictures.
    if max(image.size) < 1000:
        size = (image.width * 2, image.height * 2)
        image = image.resize(size, Image.Resampling.LANCZOS)
    return ocr_pil(image, language, layout)


def _flatten(img: Image.Image) -> Image.Image:
    """Grayscale on white (transparent areas become white, not black)."""
    if img.mode in ("RGBA", "LA", "P", "PA"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    return img.convert("L")


# -- the readers ---------------------------------------------------------------------------


def ocr_pil(image: Image.Image, language: str | None, layout: str) -> PageText:
    if ImageStat.Stat(image.convert("L")).stddev[0] < 1.0:
        return PageText("", "tesseract", 0.0)  # a blank page: nothing to read
    japanese = "jpn" in installed_tesseract_langs()
    if language == "zh" or (language == "ja" and not japanese):
        return rapid_read(image)
    tess = tesseract_read(image, language, layout)
    if (tess.confidence or 0.0) < CHECK_ORIENTATION_BELOW and language != "ja":
        # Unsure: perhaps a page scanned sideways or upside down. Turn it as tesseract's
        # orientation detection says and keep the better reading.
        turned = _upright(image)
        if turned is not None:
            again = tesseract_read(turned, language, layout)
            if (again.confidence or 0.0) > (tess.confidence or 0.0):
                tess, image = again, turned
    if language is None and (tess.confidence or 0.0) < UNSURE_CONFIDENCE and _has_rapid():
        # Unsure: perhaps Chinese or Japanese, or a hard scan. Read it again with RapidOCR.
        rapid = rapid_read(image)
        if rapid.text and _CJK.search(rapid.text):
            if japanese:  # Japanese if tesseract's jpn pack finds kana where RapidOCR saw CJK
                jpn = tesseract_read(image, "ja", layout)
                if len(_KANA.findall(jpn.text)) >= 0.1 * len(_CJK.findall(jpn.text)) > 0:
                    return jpn
            return rapid
        if (rapid.confidence or 0) > (tess.confidence or 0) + 0.1:
            return rapid
    return tess


def _upright(image: Image.Image) -> Image.Image | None:
    """The page turned upright by tesseract's orientation detection (the osd pack), or
    None when it is upright already, or the detection is unsure or unavailable."""
    import pytesseract

    if "osd" not in installed_tesseract_langs():
        return None
    try:
        osd = pytesseract.image_to_osd(
            image,
            config="--psm 0",
            output_type=pytesseract.Output.DICT,
            timeout=TESSERACT_TIMEOUT_S,
        )
    except (RuntimeError, pytesseract.TesseractError):  # too little text to tell
        return None
    rotate = int(osd.get("rotate", 0))
    if rotate % 360 == 0 or float(osd.get("orientation_conf", 0)) < ORIENTATION_CONFIDENCE:
        return None
    return image.rotate(-rotate, expand=True, fillcolor=255)


@functools.cache
def installed_tesseract_langs() -> frozenset[str]:
    try:
        out = subprocess.run(
            ["tesseract", "--list-langs"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(line.strip() for line in out.splitlines()[1:] if line.strip())


def tesseract_langs(language: str | None) -> str:
    installed = installed_tesseract_langs()
    if language is not None:
        code = TESSERACT_LANGS.get(language, "eng")
        return code if code in installed else "eng"
    wanted = [code for code in LATIN_LANGS.values() if code in installed]
    return "+".join(wanted) or "eng"


def tesseract_read(image: Image.Image, language: str | None, layout: str) -> PageText:
    import pytesseract

    # One thread per tesseract: the pool already runs pages side by side.
    os.environ["OMP_THREAD_LIMIT"] = "1"
    # Receipts: one column of lines (psm 4) keeps each amount on its item's line.
    psm = 4 if layout == "receipt" else 3
    try:
        data: dict[str, list[Any]] = pytesseract.image_to_data(
            image,
            lang=tesseract_langs(language),
            config=f"--psm {psm}",
            output_type=pytesseract.Output.DICT,
            timeout=TESSERACT_TIMEOUT_S,
        )
    except RuntimeError as exc:  # pytesseract's timeout
        raise OcrFailed(f"tesseract stopped: {exc}") from None
    except pytesseract.TesseractError as exc:
        raise OcrFailed(f"tesseract failed ({exc.status})") from None
    return _tesseract_text(data)


def _tesseract_text(data: dict[str, list[Any]]) -> PageText:
    paragraphs: dict[tuple[int, int], dict[int, list[str]]] = {}
    confidences: list[float] = []
    for i, word in enumerate(data["text"]):
        word = str(word).strip()
        conf = float(data["conf"][i])
        if not word or conf < 0:
            continue
        confidences.append(conf)
        key = (int(data["block_num"][i]), int(data["par_num"][i]))
        paragraphs.setdefault(key, {}).setdefault(int(data["line_num"][i]), []).append(word)
    blocks = [
        "\n".join(_join(words) for _line, words in sorted(lines.items()))
        for _key, lines in sorted(paragraphs.items())
    ]
    confidence = sum(confidences) / len(confidences) / 100 if confidences else 0.0
    return PageText("\n\n".join(blocks), "tesseract", round(confidence, 3))


def _join(words: list[str]) -> str:
    """A line's words: spaced, but for Chinese and Japanese, which are written unspaced
    (tesseract cuts them into one "word" per few characters)."""
    out = words[0]
    for word in words[1:]:
        out += word if _CJK.match(word[0]) and _CJK.match(out[-1]) else " " + word
    return out


@functools.cache
def _has_rapid() -> bool:
    return importlib.util.find_spec("rapidocr_onnxruntime") is not None


@functools.cache
def _rapid() -> Any:
    from rapidocr_onnxruntime import RapidOCR

    # One thread per worker: the pool already runs pages side by side.
    return RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)


def rapid_read(image: Image.Image) -> PageText:
    import numpy as np

    rgb = np.asarray(image.convert("RGB"))[:, :, ::-1].copy()  # BGR, as OpenCV reads
    try:
        result, _elapsed = _rapid()(rgb)
    except Exception as exc:  # onnxruntime / OpenCV errors
        raise OcrFailed(f"RapidOCR failed ({type(exc).__name__})") from None
    boxes = [
        (
            min(p[1] for p in box),
            max(p[1] for p in box),
            min(p[0] for p in box),
            str(text),
            float(score),
        )
        for box, text, score in (result or [])
        if str(text).strip()
    ]
    if not boxes:
        return PageText("", "rapidocr", 0.0)
    # Boxes -> lines (vertical overlap), lines -> paragraphs (a gap taller than a line).
    boxes.sort(key=lambda b: (b[0] + b[1]) / 2)
    lines: list[list[tuple[float, float, float, str, float]]] = []
    for box in boxes:
        centre = (box[0] + box[1]) / 2
        if lines:
            top = min(b[0] for b in lines[-1])
            bottom = max(b[1] for b in lines[-1])
            if top <= centre <= bottom:
                lines[-1].append(box)
                continue
        lines.append([box])
    out: list[str] = []
    previous_bottom: float | None = None
    for line in lines:
        top = min(b[0] for b in line)
        bottom = max(b[1] for b in line)
        if previous_bottom is not None and out:
            gap = top - previous_bottom
            out.append("\n\n" if gap > (bottom - top) else "\n")
        out.append(" ".join(b[3] for b in sorted(line, key=lambda b: b[2])))
        previous_bottom = bottom
    confidence = sum(b[4] for b in boxes) / len(boxes)
    return PageText("".join(out).strip(), "rapidocr", round(confidence, 3))
