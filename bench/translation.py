"""Local translation (Apertium): time and peak memory per language pair, for a small and a
large text, and translate-epub end to end through the gate for a small and a large book.

    python bench/translation.py            # 1 000 and 100 000 characters; 3 and 300 pages
    python bench/translation.py --quick    # 1 000 and 20 000 characters; 3 and 30 pages

Text: each measurement is one ``apertium`` pipeline run from a fresh helper process, so
its peak memory (the largest process of the pipeline, ru_maxrss of the helper's children)
is that run's alone. EPUB: a paid translate-epub job on a satsgate server of its own
(dev node), from the paid call to the COMPLETED poll; the first job also starts the
process pool. Pages are ~2 000 visible characters (Spanish prose), 10 pages a chapter.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SENTENCES = {
    "spa-eng": "El perro come pan en la casa de mi madre, y mañana vamos a la playa con "
    "los niños del pueblo. ",
    "eng-spa": "The dog eats bread in my mother's house, and tomorrow we go to the beach "
    "with the children of the village. ",
    "eng-cat": "The dog eats bread in my mother's house, and tomorrow we go to the beach "
    "with the children of the village. ",
    "es-pt": "El perro come pan en la casa de mi madre, y mañana vamos a la playa con los "
    "niños del pueblo. ",
    "fr-es": "Le chien mange du pain dans la maison de ma mère, et demain nous allons à la "
    "plage avec les enfants du village. ",
}

_RUN = """
import resource, subprocess, sys, time
text = sys.stdin.buffer.read()
start = time.perf_counter()
subprocess.run(["apertium", "-u", sys.argv[1]], input=text, capture_output=True, check=True)
seconds = time.perf_counter() - start
print(seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def text_round(mode: str, chars: int) -> tuple[float, int]:
    base = SENTENCES[mode]
    text = (base * (chars // len(base) + 1))[:chars]
    out = subprocess.run(
        [sys.executable, "-c", _RUN, mode],
        input=text.encode(),
        capture_output=True,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1])


def book(pages: int) -> bytes:
    from tests.engines.test_translation import _CHAPTER, _CONTAINER, _OPF

    paragraph = "<p>" + SENTENCES["spa-eng"] * 20 + "</p>"  # ~2 000 characters
    chapters = max(1, pages // 10)
    items = "".join(
        f'<item id="c{n}" href="text/c{n}.xhtml" media-type="application/xhtml+xml"/>'
        for n in range(chapters)
    )
    spine = "".join(f'<itemref idref="c{n}"/>' for n in range(chapters))
    opf = (
        _OPF.split("<manifest>")[0] + f"<manifest>{items}</manifest><spine>{spine}"
        "</spine></package>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as epub:
        epub.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        epub.writestr("META-INF/container.xml", _CONTAINER)
        epub.writestr("OEBPS/content.opf", opf)
        for n in range(chapters):
            body = paragraph * (pages // chapters if pages >= 10 else pages)
            epub.writestr(
                f"OEBPS/text/c{n}.xhtml",
                _CHAPTER.format(title=f"Capítulo {n}", n=n, paragraphs=body),
                compress_type=zipfile.ZIP_DEFLATED,
            )
    return out.getvalue()


async def epub_round(url: str, pages: int, target: str) -> dict[str, float]:
    import httpx

    from tests.conftest import paid_l402_auth

    body = {
        "epubBase64": base64.b64encode(book(pages)).decode(),
        "targetLanguage": target,
        "sourceLanguage": "es",
    }
    async with httpx.AsyncClient(base_url=url, timeout=3600) as client:
        auth = await paid_l402_auth(client, "translate-epub", body)
        start = time.perf_counter()
        accepted = await client.post(
            "/api/l402/translate-epub", json=body, headers={"Authorization": auth}
        )
        poll = accepted.json()["poll_url"]
        status = (await client.get(poll)).json()
        for _ in range(18_000):  # an hour of polls at most
            if status["status"] != "IN_PROGRESS":
                break
            await asyncio.sleep(0.2)
            status = (await client.get(poll)).json()
        seconds = time.perf_counter() - start
    if status["status"] != "COMPLETED":
        raise SystemExit(f"translate-epub failed: {status}")
    chars = status["result"]["visibleChars"]
    return {
        "pages": pages,
        "visibleChars": chars,
        "seconds": round(seconds, 2),
        "msPer1000Chars": round(seconds / chars * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    small, large = (1000, 20_000) if args.quick else (1000, 100_000)
    for mode in SENTENCES:
        for chars in (small, large):
            seconds, peak_kib = text_round(mode, chars)
            row = {
                "mode": mode,
                "chars": chars,
                "seconds": round(seconds, 3),
                "msPer1000Chars": round(seconds / chars * 1e6, 1),
                "peakMiB": round(peak_kib / 1024, 1),
            }
            print(json.dumps(row), flush=True)

    from tests.conftest import ThreadedServer, make_settings

    server = ThreadedServer(make_settings(Path(tempfile.mkdtemp()) / "data"))
    try:
        for pages in (3, 30 if args.quick else 300):
            job = asyncio.run(epub_round(server.url, pages, "en"))
            print(json.dumps(job), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":  # the process pool spawns workers that import this module
    main()
