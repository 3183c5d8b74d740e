"""The local OCR engine: wall time and peak memory for a small and a large input.

    python bench/engines_documents.py [--workers 2] [--pages 20] [--json out.json]

Each case runs the engine as extract-document does (satsgate.engines.local.ocr with the
app's spawned process pool and CPU time limit) in a fresh pool, so the peak resident
memory reported is that case's: the largest pool worker (Python, pypdfium2, RapidOCR's
ONNX sessions) and the largest tesseract process those workers started (its own
process). Cases:

- image: one 1200 px wide PNG of a paragraph (tesseract, language detected);
- image-zh: one PNG of Chinese text (RapidOCR, language zh);
- pdf-text: a 20-page PDF with a text layer (no OCR);
- pdf-scan: a 20-page scanned (image-only) A4 PDF at 150 dpi, read at 300 dpi.

With ``--health`` it then starts a satsgate server (bench/satsgate_server.py, the real
app on the dev node) and measures ``GET /api/health`` every 50 ms, idle and while 4
paid extract-document calls (5 scanned pages each) run: the free endpoints must stay
responsive while the pool does the OCR.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from satsgate.config.settings import Settings
from satsgate.engines import CpuRunner, EngineDeps
from satsgate.engines.local.ocr import LocalOcr
from satsgate.engines.ocr import OcrRequest
from tests.documents_inputs import (
    CJK,
    a4_page,
    png,
    scanned_pdf,
    text_image,
    text_layer_pdf,
)

PARAGRAPH = [
    "Lightning invoices settle within seconds, and the node",
    "answers every paid call with its result or a refund.",
    "Die Straße ist schön; les élèves étudient à Paris.",
]
LETTER = [
    "Quarterly report of the harbour authority, page {n}",
    "",
    "Revenue grew by twelve percent over the quarter while",
    "operating costs stayed flat. Forty two vessels berthed",
    "in the new basin, and the pilots logged three hundred",
    "and six movements without incident. The board thanks",
    "the crews for their work through the winter storms.",
    "",
    "Item            Count      Amount",
    "Berth fees        42     18,400.00",
    "Pilotage         306     61,200.00",
    "Storage            9      4,050.00",
    "",
    "The next meeting is on the fifth of March at ten.",
]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _health_latencies(url: str, stop: threading.Event) -> list[float]:
    out = []
    while not stop.is_set():
        started = time.perf_counter()
        with urllib.request.urlopen(url + "/api/health", timeout=30) as resp:
            resp.read()
        out.append((time.perf_counter() - started) * 1000)
        time.sleep(0.05)
    return out


def _paid_ocr(url: str, body: dict[str, Any]) -> float:
    """One paid extract-document call through L402 on the dev node; its seconds."""
    from run import http

    status, challenge, _ = http("POST", url + "/api/l402/extract-document", json.dumps(body))
    assert status == 402, challenge
    status, paid, _ = http(
        "POST", url + "/api/dev/pay", json.dumps({"invoice": challenge["invoice"]})
    )
    assert status == 200, paid
    auth = f"L402 {challenge['macaroon']}:{paid['preimage']}"
    started = time.perf_counter()
    status, result, _ = http(
        "POST", url + "/api/l402/extract-document", json.dumps(body), {"Authorization": auth}
    )
    assert status == 200, result
    return time.perf_counter() - started


def health_under_ocr(calls: int = 4, pages: int = 5) -> dict[str, Any]:
    from run import BENCH, free_port, start_server

    scan = scanned_pdf(
        [a4_page([line.format(n=n) for line in LETTER], size=32) for n in range(pages)]
    )
    body = {"documentBase64": base64.b64encode(scan).decode()}
    with tempfile.TemporaryDirectory(prefix="satsgate-bench-docs-") as tmp:
        server = start_server(
            "satsgate",
            [str(BENCH / "satsgate_server.py"), "--port", str(free_port()), "--data-dir", tmp],
            Path(tmp) / "server.log",
        )
        try:
            stop = threading.Event()
            idle: list[float] = []
            poll = threading.Thread(target=lambda: idle.extend(_health_latencies(server.url, stop)))
            poll.start()
            time.sleep(3)
            stop.set()
            poll.join()
            stop = threading.Event()
            busy: list[float] = []
            poll = threading.Thread(target=lambda: busy.extend(_health_latencies(server.url, stop)))
            poll.start()
            started = time.perf_counter()
            seconds: list[float] = []
            workers = [
                threading.Thread(target=lambda: seconds.append(_paid_ocr(server.url, body)))
                for _ in range(calls)
            ]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            window = time.perf_counter() - started
            stop.set()
            poll.join()
        finally:
            server.stop()
    return {
        "calls": calls,
        "pages_each": pages,
        "window_s": round(window, 1),
        "call_seconds": sorted(round(s, 1) for s in seconds),
        "idle_ms": {
            "n": len(idle),
            "p50": round(statistics.median(idle), 2),
            "p99": round(_pct(idle, 0.99), 2),
            "max": round(max(idle), 2),
        },
        "busy_ms": {
            "n": len(busy),
            "p50": round(statistics.median(busy), 2),
            "p99": round(_pct(busy, 0.99), 2),
            "max": round(max(busy), 2),
        },
    }


def _peak() -> tuple[int, int, int]:
    """In a worker: (pid, its peak RSS, the largest peak of its finished children) in KiB."""
    time.sleep(0.3)  # so that each worker of the pool takes one of these
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return os.getpid(), own, children


async def run_case(name: str, request: OcrRequest, workers: int, limit_s: float) -> dict[str, Any]:
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        runner = CpuRunner(pool, limit_s)
        engine = LocalOcr(EngineDeps(Settings(), runner))
        started = time.perf_counter()
        result = await engine.read(request)
        seconds = time.perf_counter() - started
        loop = asyncio.get_running_loop()
        peaks = await asyncio.gather(
            *(loop.run_in_executor(pool, _peak) for _ in range(workers * 2))
        )
    finally:
        pool.shutdown()
    by_pid = {pid: (own, kids) for pid, own, kids in peaks}
    return {
        "case": name,
        "pages": len(result.pages),
        "methods": sorted({p.method for p in result.pages}),
        "seconds": round(seconds, 2),
        "seconds_per_page": round(seconds / len(result.pages), 2),
        "chars": len(result.text),
        "worker_peak_rss_mib": round(max(o for o, _k in by_pid.values()) / 1024, 1),
        "tesseract_peak_rss_mib": round(max(k for _o, k in by_pid.values()) / 1024, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="pool size (the app's: 2)")
    parser.add_argument("--pages", type=int, default=20, help="pages of the large PDFs")
    parser.add_argument("--limit", type=float, default=600.0, help="CPU job time limit, s")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--health",
        action="store_true",
        help="also: GET /api/health latency while 4 paid OCR calls run on a server",
    )
    args = parser.parse_args()

    scan = scanned_pdf(
        [a4_page([line.format(n=n) for line in LETTER], size=32) for n in range(args.pages)]
    )
    layer = text_layer_pdf(
        *("<br>".join(line.format(n=n) for line in LETTER) for n in range(args.pages))
    )
    cases = [
        ("image", OcrRequest(png(text_image(PARAGRAPH)), "image")),
        (
            "image-zh",
            OcrRequest(
                png(
                    text_image(
                        ["今天天气很好，我们去公园散步。", "闪电网络的发票在几秒钟内结算。"],
                        font=CJK,
                        size=40,
                        width=1000,
                    )
                ),
                "image",
                "zh",
            ),
        ),
        (f"pdf-text-{args.pages}p", OcrRequest(layer, "pdf")),
        (f"pdf-scan-{args.pages}p", OcrRequest(scan, "pdf")),
    ]
    rows = []
    for name, request in cases:
        row = await run_case(name, request, args.workers, args.limit)
        rows.append(row)
        print(json.dumps(row), flush=True)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_1min": round(os.getloadavg()[0], 2),
        "workers": args.workers,
    }
    print(
        "\n| case | pages | read by | wall s | s/page | worker peak RSS MiB | "
        "tesseract peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['pages']} | {', '.join(r['methods'])} | {r['seconds']} | "
            f"{r['seconds_per_page']} | {r['worker_peak_rss_mib']} | "
            f"{r['tesseract_peak_rss_mib']} |"
        )
    print(f"\nmachine: {machine}")
    health = health_under_ocr() if args.health else None
    if health is not None:
        print(f"\nGET /api/health while {health['calls']} OCR calls run: {json.dumps(health)}")
    if args.json:
        args.json.write_text(
            json.dumps({"machine": machine, "results": rows, "health": health}, indent=2)
        )


if __name__ == "__main__":
    asyncio.run(main())
