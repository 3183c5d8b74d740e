"""The local speech engines end to end through the gate (real server on loopback, paid
through the dev node): eSpeak NG text-to-speech on the global tier, Whisper tiny.en
transcription as a job, and epub-audiobook's M4B with chapter markers and annexe. Each
test measures the output itself (durations, decoded words, chapters, the annexe's text)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pypdf import PdfReader

from satsgate.domain.media import audio_duration_s
from tests.conftest import (
    ThreadedServer,
    challenge,
    paid_l402_auth,
    serve_with_engines,
    skip_unless_ci,
)
from tests.engines.test_books import HASH, sample_epub
from tests.epub_maker import Doc, chapter, make_epub, nav_doc, prose
from tests.payments.test_gateway import assert_envelope, payment_count

SENTENCE = "The quick brown fox jumps over the lazy dog near the old river bank."


@pytest.fixture(autouse=True)
def _tools() -> None:
    for tool in ("espeak-ng", "ffmpeg", "ffprobe"):
        if shutil.which(tool) is None:
            skip_unless_ci(f"{tool} is not installed")


async def paid_post(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


async def finished_job(client: httpx.AsyncClient, accepted: httpx.Response) -> dict[str, Any]:
    assert accepted.status_code == 202, accepted.text
    url = accepted.json()["poll_url"]
    for _ in range(600):
        body: dict[str, Any] = (await client.get(url)).json()
        if body["status"] in ("COMPLETED", "FAILED"):
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"the job did not finish: {body}")


def ffprobe(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-print_format", "json", "-show_format", "-show_streams",
         "-show_chapters", str(path)],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    doc: dict[str, Any] = json.loads(out)
    return doc


def decode_pcm(path: Path) -> bytes:
    return subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-f", "s16le", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip


def espeak_wav(text: str, tmp_path: Path) -> bytes:
    path = tmp_path / "said.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(path), text], check=True)
    return path.read_bytes()


# -- text-to-speech ------------------------------------------------------------------------


async def test_tts_speaks_the_sentence_and_speed_shortens_it(client: httpx.AsyncClient) -> None:
    durations = []
    for speed in (1.0, 2.0):
        resp = await paid_post(
            client, "text-to-speech",
            {"text": SENTENCE, "modelId": 43, "format": "wav", "speed": speed},
        )  # fmt: skip
        assert resp.status_code == 200, resp.text
        audio = await client.get(resp.json()["audioUrl"])
        assert audio.status_code == 200 and audio.headers["content-type"] == "audio/wav"
        durations.append(audio_duration_s(audio.content))
    normal, fast = durations
    assert 2.5 < normal < 8.0, normal  # 13 words at 175 words a minute
    assert 0.4 * normal < fast < 0.65 * normal, durations


async def test_tts_mp3_in_a_described_voice_decodes(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    lengths = {}
    for fmt in ("wav", "mp3"):
        body = {"text": SENTENCE, "modelId": 43, "format": fmt, "language": "en-GB",
                "voice_description": "female, elderly, british"}  # fmt: skip
        resp = await paid_post(client, "text-to-speech", body)
        assert resp.status_code == 200, resp.text
        path = tmp_path / f"speech.{fmt}"
        path.write_bytes((await client.get(resp.json()["audioUrl"])).content)
        probed = ffprobe(path)
        assert probed["streams"][0]["codec_name"] == ("pcm_s16le" if fmt == "wav" else "mp3")
        lengths[fmt] = float(probed["format"]["duration"])
    assert abs(lengths["mp3"] - lengths["wav"]) < 0.2, lengths
    decoded = decode_pcm(tmp_path / "speech.mp3")
    assert len(decoded) > 2 * 22050 * 2  # more than two seconds of decoded samples


async def test_tts_voice_description_changes_the_voice(client: httpx.AsyncClient) -> None:
    spoken = []
    for description in ("male, low pitch", "female, child"):
        body = {"text": SENTENCE, "modelId": 43, "format": "wav",
                "voice_description": description}  # fmt: skip
        resp = await paid_post(client, "text-to-speech", body)
        assert resp.status_code == 200, resp.text
        spoken.append((await client.get(resp.json()["audioUrl"])).content)
    assert spoken[0] != spoken[1]


@pytest.mark.parametrize(
    ("extra", "said"),
    [({"voice_description": "male, indian"}, "indian accent"), ({"language": "hmn"}, "'hmn'")],
)
async def test_tts_what_the_local_voice_cannot_do_is_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer, extra: dict[str, str], said: str
) -> None:
    before = payment_count(server)
    resp = await client.post(
        "/api/l402/text-to-speech", json={"text": SENTENCE, "modelId": 43, **extra}
    )
    body = assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
    assert said in body["error"] and "refund" not in body
    assert payment_count(server) == before


async def test_tts_tiers_the_node_does_not_serve_are_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    resp = await client.post(
        "/api/l402/text-to-speech", json={"text": "hi", "modelId": 3, "voice": "English_Narrator"}
    )
    assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
    assert payment_count(server) == before


# -- transcribe-audio ----------------------------------------------------------------------

_CUE = re.compile(r"^(\d\d):(\d\d):(\d\d)[,.](\d\d\d) --> (\d\d):(\d\d):(\d\d)[,.](\d\d\d)$")


def cue_times(subtitles: str) -> list[tuple[float, float]]:
    times = []
    for line in subtitles.splitlines():
        if "-->" not in line:
            continue
        match = _CUE.match(line)
        assert match, line
        h1, m1, s1, f1, h2, m2, s2, f2 = (int(g) for g in match.groups())
        times.append((h1 * 3600 + m1 * 60 + s1 + f1 / 1000, h2 * 3600 + m2 * 60 + s2 + f2 / 1000))
    return times


async def test_transcription_job_writes_out_english_speech(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    said = (
        "Good morning. The president of the United States said the government will spend "
        "more money on schools. Thank you very much."
    )
    audio = espeak_wav(said, tmp_path)
    body = {"file": base64.b64encode(audio).decode(), "language": "en", "timestamps": "word"}
    done = await finished_job(client, await paid_post(client, "transcribe-audio", body))
    assert done["status"] == "COMPLETED", done
    result = done["result"]
    words = set(re.findall(r"[a-z]+", result["text"].lower()))
    assert {"morning", "president", "government", "money", "schools"} <= words, result["text"]
    segments = result["segments"]
    assert segments and all(s["start"] <= s["end"] for s in segments)
    assert segments[-1]["end"] <= audio_duration_s(audio) + 0.5
    assert [s["start"] for s in segments] == sorted(s["start"] for s in segments)
    assert any(s.get("words") for s in segments)
    for subtitles, header in ((result["srt"], "1\n"), (result["vtt"], "WEBVTT\n")):
        assert subtitles.startswith(header)
        times = cue_times(subtitles)
        assert len(times) == len(segments)
        flat = [t for cue in times for t in cue]
        assert flat == sorted(flat), times
    assert result["srt"].count("\n\n") == len(segments) - 1


async def test_transcription_of_another_language_is_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer, tmp_path: Path
) -> None:
    before = payment_count(server)
    audio = base64.b64encode(espeak_wav("Hello.", tmp_path)).decode()
    for extra, said in (
        ({"language": "de"}, "English only"),
        ({"type": "translation"}, "cannot translate"),
    ):
        resp = await client.post("/api/l402/transcribe-audio", json={"file": audio, **extra})
        body = assert_envelope(resp, "L402_INVALID_PARAMS", 400)
        assert body["fields"][0]["field"] == "language" and said in body["error"], body
    assert payment_count(server) == before


async def test_api_languages_says_which_transcription_languages_this_node_serves(
    client: httpx.AsyncClient,
) -> None:
    doc = (await client.get("/api/languages")).json()
    available = {e["code"]: e["here"] for e in doc["transcription"]}
    assert available.pop("en") is True
    assert len(available) == 12 and not any(available.values())
    assert doc["transcriptionEngine"]["source"] == "local"
    assert "English" in doc["transcriptionEngine"]["label"]


@pytest.fixture(scope="module")
def provider_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    yield from serve_with_engines(tmp_path_factory, "speech-provider", ["transcription"])


async def test_api_languages_with_a_transcription_provider_lists_all_13(
    provider_server: ThreadedServer,
) -> None:
    async with httpx.AsyncClient(base_url=provider_server.url, timeout=60) as client:
        doc = (await client.get("/api/languages")).json()
    assert len(doc["transcription"]) == 13 and all(e["here"] for e in doc["transcription"])
    assert doc["transcriptionEngine"] == {
        "engine": "transcription",
        "available": True,
        "source": "provider",
    }


# -- epub-audiobook ------------------------------------------------------------------------


async def test_audiobook_m4b_has_chapter_markers_and_an_annexe(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    body = {"epubBase64": base64.b64encode(sample_epub()).decode(), "fileName": "mill.epub",
            "modelId": 43, "voice": "female"}  # fmt: skip
    done = await finished_job(client, await paid_post(client, "epub-audiobook", body))
    assert done["status"] == "COMPLETED", done
    result = done["result"]
    m4b = tmp_path / "book.m4b"
    m4b.write_bytes((await client.get(result["url"])).content)
    probed = ffprobe(m4b)
    assert probed["streams"][0]["codec_name"] == "aac"
    titles = [c["tags"]["title"] for c in probed["chapters"]]
    assert titles == ["Chapter One", "Chapter Two"]
    starts = [float(c["start_time"]) for c in probed["chapters"]]
    assert starts[0] == 0 and starts[1] > 10
    duration = float(probed["format"]["duration"])
    assert abs(duration - result["duration_s"]) < 0.5
    assert 40 < duration < 200, duration  # about 230 words and two titles at 175 a minute
    assert result["narratedChapters"] == [2, 3]
    assert {s["index"] for s in result["skippedChapters"]} == {0, 1, 4, 5}
    assert result["annexeEntries"] == 2
    annexe = (await client.get(result["annexeUrl"])).content
    text = "".join(p.extract_text() for p in PdfReader(io.BytesIO(annexe)).pages)
    assert "1. Table (Chapter One)" in text and "2. Key or hash (Chapter Two)" in text
    assert HASH[:16] in text.replace("\n", "")


async def test_audiobook_refunds_the_chapters_auto_selection_leaves_out(
    client: httpx.AsyncClient,
) -> None:
    # The quote counts every chapter; the index is not read, so its share comes back.
    words = ["mill", "river", "bread", "wheat"] * 900
    index = "".join(f"<p>{w}, pages {n}, {n + 7} and {n + 30}</p>" for n, w in enumerate(words))
    epub = make_epub(
        "Indexed", [chapter(0, "Story", prose(150, 4)), Doc("ix.xhtml", f"<h1>Index</h1>{index}")]
    )
    body = {"epubBase64": base64.b64encode(epub).decode(), "fileName": "indexed.epub",
            "modelId": 43}  # fmt: skip
    quoted = (await challenge(client, "epub-audiobook", body))["amountSats"]
    assert quoted > 600
    done = await finished_job(client, await paid_post(client, "epub-audiobook", body))
    assert done["status"] == "COMPLETED", done
    assert done["result"]["narratedChapters"] == [0]
    assert done["result"]["skippedChapters"] == [{"index": 1, "reason": "index"}]
    # The story alone costs the minimum, 500 sats: the rest of the quote is refunded.
    assert done["result"]["partial_refund"]["amount_sats"] == quoted - 500


async def test_audiobook_sanity_check_failure_is_refunded(client: httpx.AsyncClient) -> None:
    garbled = "Ã©tÃ© Ã  la plage, câ€™est lâ€™Ã©tÃ© encore une fois " * 4
    epub = make_epub("Bad", [nav_doc(["A"]), chapter(0, "A", [*prose(60, 1), garbled])])
    body = {"epubBase64": base64.b64encode(epub).decode(), "fileName": "bad.epub",
            "modelId": 43}  # fmt: skip
    done = await finished_job(client, await paid_post(client, "epub-audiobook", body))
    assert done["status"] == "FAILED" and done["error_code"] == "BOOK_QUALITY_CHECK_FAILED", done
    assert [(f["chapter"], f["check"]) for f in done["smoke_failures"]] == [(1, "mojibake")]
    assert done["refund"]["amount_sats"] == 500


async def test_audiobook_over_24_hours_is_refused_and_refunded(client: httpx.AsyncClient) -> None:
    # 1.3 million characters at half speed: over 24 hours even for the fastest voice.
    text = "\n\n".join(prose(240_000, 2))[:1_300_000].encode()
    body = {"epubBase64": base64.b64encode(text).decode(), "fileName": "long.txt",
            "modelId": 43, "speed": 0.5}  # fmt: skip
    done = await finished_job(client, await paid_post(client, "epub-audiobook", body))
    assert done["status"] == "FAILED" and done["error_code"] == "OUTPUT_DURATION_INSANE", done
    assert done["output_duration_seconds"] > 24 * 3600
    assert done["refund"]["amount_sats"] > 10_000


async def test_audiobook_bad_chapter_index_is_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    body = {"epubBase64": base64.b64encode(sample_epub()).decode(), "fileName": "mill.epub",
            "modelId": 43, "language": "Hmong"}  # fmt: skip
    resp = await client.post("/api/l402/epub-audiobook", json=body)
    assert "does not speak 'hmn'" in assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)["error"]
    body = {"epubBase64": base64.b64encode(sample_epub()).decode(), "fileName": "mill.epub",
            "modelId": 43, "selectedChapterIndices": [2, 9]}  # fmt: skip
    resp = await client.post("/api/l402/epub-audiobook", json=body)
    assert_envelope(resp, "L402_INVALID_PARAMS", 400)
    assert payment_count(server) == before


async def test_audiobook_selected_chapters_only(client: httpx.AsyncClient, tmp_path: Path) -> None:
    epub = make_epub(
        "Three", [chapter(i, f"Part {w}", prose(40, i)) for i, w in enumerate(("A", "B", "C"))]
    )
    body = {"epubBase64": base64.b64encode(epub).decode(), "fileName": "three.epub",
            "modelId": 43, "selectedChapterIndices": [2, 0]}  # fmt: skip
    done = await finished_job(client, await paid_post(client, "epub-audiobook", body))
    assert done["status"] == "COMPLETED", done
    m4b = tmp_path / "three.m4b"
    m4b.write_bytes((await client.get(done["result"]["url"])).content)
    assert [c["tags"]["title"] for c in ffprobe(m4b)["chapters"]] == ["Part A", "Part C"]
    assert done["result"]["annexeUrl"] is None
