"""The local speech engines: time and peak memory per input size.

    python bench/engines_speech.py [--pages 300] [--skip-book] [--json out.json]

* ``tts``: eSpeak NG (engine ``tts``, model 43) on a 100-character and a 5000-character
  English text, WAV and MP3; wall time. ``tools``: the peak RSS of each tool it runs
  (espeak-ng, ffmpeg MP3 and AAC encodes) on the 5000 characters (VmHWM).
* ``transcription``: Whisper tiny.en (engine ``transcription``) on one minute of English
  speech (espeak-ng), in a spawned process pool like the server's; the first call loads
  the model in the worker (cold), the second does not (warm); the worker's peak RSS.
* ``audiobook``: a generated EPUB of ``--pages`` pages (about 1800 characters of prose per
  page, one chapter per 10 pages) read by ``engines.local.book.prepare`` (in the pool)
  and narrated to an M4B by the local narration engine; wall time, audio duration, file
  size, peak RSS of this process (it holds the M4B).
* ``health``: p50/p99 of ``GET /api/health`` on a real server while 4 paid 5000-character
  text-to-speech calls run at a time (the event loop stays free: the tools run as
  subprocesses).

Prints a JSON object (and writes it to ``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from satsgate.backends.dev import DevBackend  # noqa: E402
from satsgate.config.settings import Settings  # noqa: E402
from satsgate.engines import CpuRunner, EngineDeps  # noqa: E402
from satsgate.engines.audiobook import Chapter, NarrationRequest  # noqa: E402
from satsgate.engines.local import book as books  # noqa: E402
from satsgate.engines.local import espeak, narration, whisper  # noqa: E402
from satsgate.engines.synthesis import SynthesisRequest  # noqa: E402
from satsgate.engines.transcription import TranscriptionRequest  # noqa: E402
from satsgate.server.runner import start_service  # noqa: E402
from tests.epub_maker import chapter, make_epub, nav_doc, prose  # noqa: E402

MB = 1024  # ru_maxrss is in KiB on Linux


def tool_peak_mb(args: list[str], stdin: bytes | None = None) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of one run of a tool: its VmHWM, read from /proc
    every few milliseconds until it exits (wait4's ru_maxrss would count the Python
    process it was forked from, before the exec)."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(stdin or b"")
    proc.stdin.close()
    peak_kb = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak_kb = max(peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.002)
    assert proc.returncode == 0, args
    return round(peak_kb / MB, 1), round(time.perf_counter() - started, 3)


def bench_tools() -> dict[str, Any]:
    """Peak memory of each tool the engines run, on the 5000-character input."""
    with tempfile.TemporaryDirectory() as tmp:
        wav, out = Path(tmp) / "s.wav", Path(tmp) / "s"
        espeak_mb, espeak_s = tool_peak_mb(
            ["espeak-ng", "-v", "en-us", "-b", "1", "-w", str(wav)], english(5000).encode()
        )
        mp3_mb, mp3_s = tool_peak_mb(
            [
                "ffmpeg",
                "-nostdin",
                "-v",
                "error",
                "-y",
                "-i",
                str(wav),
                "-codec:a",
                "libmp3lame",
                "-b:a",
                "64k",
                f"{out}.mp3",
            ]
        )
        aac_mb, aac_s = tool_peak_mb(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(wav),
                                      "-c:a", "aac", "-aac_coder", "fast", "-b:a", "32k",
                                      f"{out}.m4a"])  # fmt: skip
    return {
        "espeak_5000_chars": {"peak_rss_mb": espeak_mb, "seconds": espeak_s},
        "ffmpeg_mp3_encode": {"peak_rss_mb": mp3_mb, "seconds": mp3_s},
        "ffmpeg_aac_encode": {"peak_rss_mb": aac_mb, "seconds": aac_s},
    }


def self_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MB


def worker_peak_mb() -> float:
    """Run in a pool worker: its own peak RSS."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MB


def english(chars: int, seed: int = 1) -> str:
    text = " ".join(prose(chars // 5 + 50, seed))
    return text[:chars].rsplit(" ", 1)[0] + "."


async def bench_tts(deps: EngineDeps) -> dict[str, Any]:
    engine = espeak.build(deps)
    out: dict[str, Any] = {}
    for chars in (100, 5000):
        text = english(chars)
        for fmt in ("wav", "mp3"):
            started = time.perf_counter()
            request = SynthesisRequest(text, 43, format="wav" if fmt == "wav" else "mp3")
            result = await engine.synthesize(request)
            out[f"{chars}_{fmt}"] = {
                "chars": len(text),
                "seconds": round(time.perf_counter() - started, 3),
                "audio_s": result.duration_s,
                "bytes": len(result.audio),
            }
    return out


async def bench_transcription(deps: EngineDeps, pool: ProcessPoolExecutor) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "minute.wav"
        text = english(1200, 3)
        speak = await asyncio.create_subprocess_exec(
            "espeak-ng", "-v", "en-us", "-w", str(wav), text
        )
        assert await speak.wait() == 0
        audio = wav.read_bytes()
    seconds = (len(audio) - 44) / (22050 * 2)
    engine = whisper.build(deps)
    out: dict[str, Any] = {"audio_s": round(seconds, 1)}
    for run in ("cold", "warm"):
        started = time.perf_counter()
        result = await engine.transcribe(TranscriptionRequest(audio, "wav", "en"))
        out[run] = {
            "seconds": round(time.perf_counter() - started, 2),
            "segments": len(result.segments),
            "words": len(result.text.split()),
        }
    loop = asyncio.get_running_loop()
    peaks = [await loop.run_in_executor(pool, worker_peak_mb) for _ in range(4)]
    out["worker_peak_rss_mb"] = round(max(peaks), 1)
    return out


def book_epub(pages: int) -> bytes:
    per_page_words = 300  # about 1800 characters
    chapters = []
    for index in range(max(1, pages // 10)):
        chapters.append(chapter(index, f"Chapter {index + 1}", prose(per_page_words * 10, index)))
    return make_epub("Bench Book", [nav_doc([f"Chapter {i + 1}" for i in range(len(chapters))]),
                                    *chapters])  # fmt: skip


async def bench_book(deps: EngineDeps, pages: int) -> dict[str, Any]:
    data = book_epub(pages)
    started = time.perf_counter()
    prepared = await deps.run_cpu(books.prepare, data, "bench.epub", None, "en")
    read_s = time.perf_counter() - started
    assert prepared.narration is not None, prepared.failures
    told = prepared.narration
    chars = sum(len(t) + len(h) for h, t in told.chapters)
    engine = narration.build(deps)
    request = NarrationRequest(tuple(Chapter(h, t) for h, t in told.chapters), 43, "en",
                               title="Bench Book")  # fmt: skip
    started = time.perf_counter()
    result = await engine.narrate(request, lambda done, message: None)
    narrate_s = time.perf_counter() - started
    return {
        "pages": pages,
        "epub_bytes": len(data),
        "chapters": len(told.chapters),
        "chars": chars,
        "read_and_check_s": round(read_s, 2),
        "narrate_s": round(narrate_s, 1),
        "audio_hours": round(result.duration_s / 3600, 2),
        "m4b_mb": round(len(result.m4b) / 2**20, 1),
        "chapter_marks": len(result.chapters),
        "process_peak_rss_mb": round(self_peak_mb(), 1),
    }


class _Server:
    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        settings = Settings(host="127.0.0.1", port=0, data_dir=data_dir)
        self.handle = asyncio.run_coroutine_threadsafe(
            start_service(settings, DevBackend(data_dir)), self.loop
        ).result(60)
        self.url = self.handle.url

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.handle.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _paid_tts(client: httpx.AsyncClient, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    challenge = (await client.post("/api/l402/text-to-speech", json=body)).json()
    paid = await client.post("/api/dev/pay", json={"invoice": challenge["invoice"]})
    auth = f"L402 {challenge['macaroon']}:{paid.json()['preimage']}"
    resp = await client.post("/api/l402/text-to-speech", json=body, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    return time.perf_counter() - started


async def bench_health(seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = _Server(Path(tmp))
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
                body = {"text": english(5000, 5), "modelId": 43, "format": "mp3"}
                stop = time.perf_counter() + seconds
                calls: list[float] = []

                async def caller() -> None:
                    while time.perf_counter() < stop:
                        calls.append(await _paid_tts(client, body))

                samples: list[float] = []

                async def prober() -> None:
                    await asyncio.sleep(0.5)
                    while time.perf_counter() < stop:
                        started = time.perf_counter()
                        resp = await client.get("/api/health")
                        assert resp.status_code == 200
                        samples.append((time.perf_counter() - started) * 1000)
                        await asyncio.sleep(0.02)

                await asyncio.gather(*(caller() for _ in range(4)), prober())
                samples.sort()
        finally:
            server.stop()
    return {
        "concurrent_tts_calls": 4,
        "tts_calls_done": len(calls),
        "tts_call_s_median": round(statistics.median(calls), 2),
        "health_samples": len(samples),
        "health_p50_ms": round(samples[len(samples) // 2], 2),
        "health_p99_ms": round(samples[int(len(samples) * 0.99) - 1], 2),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    deps = EngineDeps(Settings(cpu_job_time_limit_s=600), CpuRunner(pool, 600))
    report: dict[str, Any] = {"machine": {"cpus": multiprocessing.cpu_count()}}
    try:
        report["tools"] = bench_tools()
        report["tts"] = await bench_tts(deps)
        report["transcription"] = await bench_transcription(deps, pool)
        if not args.skip_book:
            report["audiobook"] = await bench_book(deps, args.pages)
    finally:
        pool.shutdown()
    report["health"] = await bench_health(args.health_seconds)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--skip-book", action="store_true")
    parser.add_argument("--health-seconds", type=float, default=15.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = asyncio.run(main(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
