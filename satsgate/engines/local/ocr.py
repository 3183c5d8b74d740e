"""The local OCR engine: a PDF's text layer first (pypdfium2), tesseract for scanned pages
and images, RapidOCR (ONNX models shipped in its wheel) for Chinese and Japanese.

Every page is one job in the process pool, under the CPU time limit; a call runs at
most PAGES_IN_FLIGHT of its pages at once, so one long document does not queue ahead
of every other call's work.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil

from satsgate.engines.errors import EngineError
from satsgate.engines.local import ocr_worker as worker
from satsgate.engines.ocr import OcrMethod, OcrPage, OcrRequest, OcrResult
from satsgate.engines.registry import EngineDeps, LocalEngine
from satsgate.errors import ErrorCode

PAGES_IN_FLIGHT = 2

# Languages a caller may name; anything else is read as "detect".
LANGUAGES = frozenset(worker.TESSERACT_LANGS) | worker.CJK_LANGS


def reads(language: str) -> bool:
    """Whether this node reads ``language``: Chinese needs RapidOCR, Japanese tesseract's
    jpn pack or RapidOCR; tesseract reads the others (its missing packs fall back to eng).
    A request in a language not read here is refused before payment."""
    rapid = importlib.util.find_spec("rapidocr_onnxruntime") is not None
    if language == "zh":
        return rapid
    if language == "ja":
        return rapid or "jpn" in worker.installed_tesseract_langs()
    return True


def probe() -> str:
    missing = []
    if shutil.which("tesseract") is None:
        missing.append("tesseract not installed")
    for module, name in (("pytesseract", "pytesseract"), ("pypdfium2", "pypdfium2")):
        if importlib.util.find_spec(module) is None:
            missing.append(f"{name} not installed")
    return "; ".join(missing)


class LocalOcr:
    def __init__(self, deps: EngineDeps) -> None:
        self._run = deps.run_cpu

    async def read(self, request: OcrRequest) -> OcrResult:
        language = request.language if request.language in LANGUAGES else None
        try:
            if request.kind == "image":
                page = await self._run(worker.ocr_image, request.data, language, request.layout)
                return OcrResult((_page(page),))
            layer = await self._run(worker.pdf_text_layer, request.data)
            gate = asyncio.Semaphore(PAGES_IN_FLIGHT)

            async def one(index: int, text: str, ocr: bool) -> OcrPage:
                if not ocr:
                    return OcrPage(text, "text-layer")
                async with gate:
                    page = await self._run(
                        worker.ocr_pdf_page, request.data, index, language, request.layout
                    )
                return _page(page)

            tasks = [asyncio.ensure_future(one(i, t, o)) for i, (t, o) in enumerate(layer)]
            try:
                pages = await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:  # one page failed: the others' queued work is dropped
                    task.cancel()
                raise
            return OcrResult(tuple(pages))
        except worker.OcrFailed as exc:
            raise EngineError(ErrorCode.SERVICE_ERROR, f"OCR failed: {exc}") from None


def _page(page: worker.PageText) -> OcrPage:
    method: OcrMethod = "rapidocr" if page.method == "rapidocr" else "tesseract"
    return OcrPage(page.text, method, page.confidence)


ENGINE = LocalEngine(
    engine="ocr",
    label="tesseract OCR (Latin scripts, Japanese), RapidOCR (Chinese), PDF text layer",
    probe=probe,
    build=LocalOcr,
)
