"""The ``openai`` provider kind end to end: a real satsgate server whose engines route to a
fake OpenAI-compatible API on loopback (tests/fakes/fake_ai_upstream.py), paid calls through
the gate over HTTP, the output itself checked, and every failure after payment refunded
with no upstream detail, URL or key in what the caller sees."""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import random
import wave
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from openai._utils._json import openapi_dumps  # the SDK's own request-body encoder
from PIL import Image

from satsgate.engines import EngineConfigError
from satsgate.engines.chat_translation import split_html, split_text
from satsgate.engines.transcription import Segment, to_srt, to_vtt
from tests.conftest import ThreadedServer, http_client, make_settings, paid_l402_auth
from tests.engines_down import engines_for
from tests.fakes.fake_ai_upstream import (
    OPENAI_KEY,
    RETRY_AFTER,
    UPSTREAM_DETAIL,
    FakeAIUpstream,
    png,
    wav,
)
from tests.payments.test_gateway import assert_envelope, payment_count

MODELS = {
    "6": "fake-best", "1": "fake-better", "31": "fake-mini", "5": "fake-vision",
    "16": "fake-image-best", "8": "fake-image-better", "2": "fake-image-std-url",
    "18": "fake-image-edit", "33": "fake-tts-hd", "34": "fake-tts-mini", "43": "fake-tts-global",
    "3": "fake-tts-studio", "10": "fake-whisper",
}  # fmt: skip
ENGINES = ("text", "vision", "image", "image_edit", "tts", "transcription", "translation",
           "rare_translation", "speech_translation")  # fmt: skip
TIMEOUT_S = 2.0
CHAT = "/v1/chat/completions"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAIUpstream]:
    upstream = FakeAIUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def ai_server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream
) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("ai-openai"),
        providers={
            "cloud": {
                "kind": "openai",
                "base_url": f"{fake.url}/v1",
                "api_key": OPENAI_KEY,
                "timeout_s": TIMEOUT_S,
                "models": MODELS,
            }
        },
        engines={name: "cloud" for name in ENGINES},
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def ai(ai_server: ThreadedServer, fake: FakeAIUpstream) -> AsyncIterator[httpx.AsyncClient]:
    fake.clear()
    async for c in http_client(ai_server):
        yield c


async def paid(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


async def job_result(client: httpx.AsyncClient, resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 202, resp.text
    poll = resp.json()["poll_url"]
    for _ in range(300):
        doc = (await client.get(poll)).json()
        if doc["status"] in ("COMPLETED", "FAILED"):
            return dict(doc)
        await asyncio.sleep(0.05)
    raise AssertionError("job did not finish")


async def fetch(client: httpx.AsyncClient, url: str) -> bytes:
    resp = await client.get(url)
    assert resp.status_code == 200
    return resp.content


def assert_no_leak(text: str, fake: FakeAIUpstream) -> None:
    for secret in (
        OPENAI_KEY,
        fake.url,
        str(fake.port),
        UPSTREAM_DETAIL,
        "fake-",
        "openai",
        "cloud",
    ):
        assert secret not in text, secret


async def assert_refusal_window_then_decline(
    client: httpx.AsyncClient, resp: httpx.Response, fake: FakeAIUpstream
) -> dict[str, Any]:
    """A content refusal keeps the payment for a free retry (CONTENT_FILTERED_RETRY, no
    refund, nothing upstream shown); declining the retry refunds it in full."""
    body = assert_envelope(resp, "CONTENT_FILTERED_RETRY", 422)
    assert "refund" not in body and body["rework_token"] and body["attempt"] == 1
    assert_no_leak(resp.text, fake)
    declined = await client.post(
        "/api/decline-retry",
        json={"paymentId": body["paymentId"], "rework_token": body["rework_token"]},
    )
    assert declined.status_code == 200, declined.text
    refund = declined.json()["refund"]
    assert refund["amount_sats"] > 0 and refund["lnurl_withdraw"]
    return body


def assert_refunded(resp: httpx.Response, code: str, fake: FakeAIUpstream) -> dict[str, Any]:
    body = assert_envelope(resp, code, resp.status_code)
    assert resp.status_code >= 400
    refund = body["refund"]
    assert refund["amount_sats"] > 0 and refund["lnurl_withdraw"]
    assert_no_leak(resp.text, fake)
    return body


# -- success -------------------------------------------------------------------------------


async def test_generate_text_sends_mapped_model_and_key_and_returns_the_answer(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    body = {
        "input": [{"role": "user", "content": "Name a colour."}],
        "modelId": 31,
        "systemPrompt": "Be brief.",
        "maxTokens": 50,
        "fileContext": "A red report.",
    }
    resp = await paid(ai, "generate-text", body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    assert resp.text.startswith("You said: Name a colour.")
    assert resp.headers["X-Route-Model"] == "31"
    (seen,) = fake.requests("/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    sent = seen.json or {}
    assert sent["model"] == "fake-mini"
    assert sent["max_tokens"] == 50  # what compatible servers take (not api.openai.com)
    system = sent["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("Be brief.")
    assert "<document>\nA red report.\n</document>" in system["content"]
    assert sent["messages"][-1] == {"role": "user", "content": "Name a colour."}
    assert fake.compressed >= 1  # the answer came gzip-compressed and was read right


async def test_chat_body_is_the_sdks_own_encoding_and_headers(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    """The chat body is encoded once by the provider, as the SDK's own encoder would
    (compact, UTF-8 as is, no NaN), to the URL the SDK merges with base_url, with the
    key; it goes out on the provider's own client session, not the SDK's."""
    resp = await paid(ai, "generate-text", {"prompt": "Ünïcode – ok?", "maxTokens": 9})
    assert resp.status_code == 200, resp.text
    (seen,) = fake.requests("/v1/chat/completions")
    assert seen.json is not None
    assert seen.raw == openapi_dumps(seen.json)  # byte for byte what the SDK sends
    assert "Ünïcode – ok?".encode() in seen.raw
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert seen.headers["user-agent"] == "satsgate"


async def test_generate_text_auto_routes_and_names_the_model(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(ai, "generate-text", {"prompt": "Hi there", "model": "auto"})
    assert resp.status_code == 200, resp.text
    assert resp.headers["X-Route-Model"] == "31"
    assert fake.requests("/v1/chat/completions")[0].json["model"] == "fake-mini"  # type: ignore[index]
    resp = await paid(
        ai, "generate-text", {"prompt": "Prove the theorem step by step", "model": "auto"}
    )
    assert resp.headers["X-Route-Model"] == "6"
    assert fake.requests("/v1/chat/completions")[1].json["model"] == "fake-best"  # type: ignore[index]


async def test_generate_text_sends_the_image_on_the_best_tier(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    image = "data:image/png;base64," + b64(png(40, 30))
    resp = await paid(ai, "generate-text", {"prompt": "What is this?", "imageData": image})
    assert resp.status_code == 200, resp.text
    assert resp.text == "You said: What is this? [image 40x30]"
    sent = fake.requests("/v1/chat/completions")[0].json or {}
    assert sent["model"] == "fake-best"
    parts = sent["messages"][-1]["content"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")


async def test_analyze_image_describes_the_image(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    jpeg = io.BytesIO()
    Image.new("RGB", (33, 21), (0, 90, 200)).save(jpeg, "JPEG")
    resp = await paid(
        ai, "analyze-image", {"imageBase64": b64(jpeg.getvalue()), "prompt": "Which colour?"}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["content"] == "You said: Which colour? [image 33x21]"
    assert body["untrusted_output"] is True
    sent = fake.requests("/v1/chat/completions")[0].json or {}
    assert sent["model"] == "fake-vision"
    assert sent["messages"][-1]["content"][1]["image_url"]["url"].startswith(
        "data:image/jpeg;base64,"
    )


async def test_multilingual_ask_answers_in_the_language(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(
        ai, "multilingual-ask", {"question": "Wie spät ist es?", "language": "fr", "model": "Best"}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body == {
        "answer": "Answer in French.",
        "language": "fr",
        "translated": True,
        "modelId": 6,
        "untrusted_output": True,
    }
    assert fake.requests("/v1/chat/completions")[0].json["model"] == "fake-best"  # type: ignore[index]


async def test_translate_rare_language_reports_quality(ai: httpx.AsyncClient) -> None:
    resp = await paid(ai, "translate-rare-language", {"text": "Welcome", "targetLanguage": "tpi"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["translatedText"] == "[Tok] Welcome"
    assert body["targetLanguage"] == "tpi" and body["targetLanguageName"] == "Tok Pisin"
    assert body["quality"]["tier"] in ("unverified", "experimental")
    assert body["quality"]["chrf"] is None


async def test_long_translation_goes_in_chunks_and_comes_back_in_order(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 300 for i in range(12)]  # ~1.5k chars each
    text = "\n\n".join(p.strip() for p in paragraphs)
    resp = await paid(ai, "translate-rare-language", {"text": text, "targetLanguage": "tpi"})
    assert resp.status_code == 200, resp.text
    sent = fake.requests(CHAT)
    assert 5 <= len(sent) <= 8  # 3500-character chunks, cut at paragraph breaks
    assert all(len(s.json["messages"][-1]["content"]) <= 3500 for s in sent)  # type: ignore[index]
    out = resp.json()["translatedText"].split("\n\n")
    assert out == [f"[Tok] {p.strip()}" for p in paragraphs]
    assert all(s.json["model"] == "fake-mini" for s in sent)  # type: ignore[index]


async def test_generate_image_stores_the_image_at_the_asked_size(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(
        ai,
        "generate-image",
        {"input": {"prompt": "a red square", "width": 512, "height": 768}, "modelId": 8},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["width"], body["height"], body["format"]) == (512, 768, "png")
    with Image.open(io.BytesIO(await fetch(ai, body["image_url"]))) as img:
        assert img.size == (512, 768)
        assert img.getpixel((5, 5)) == (200, 40, 40)
    sent = fake.requests("/v1/images/generations")[0].json or {}
    assert sent["model"] == "fake-image-better" and sent["size"] == "512x768"
    assert sent["response_format"] == "b64_json"
    assert resp.headers["X-Route-Model"] == "8"


async def test_generate_image_with_references_uploads_them_to_the_edits_endpoint(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    refs = [png(30, 20, (0, 0, 0)), png(30, 20, (255, 255, 255))]
    resp = await paid(
        ai, "generate-image", {"prompt": "blend them", "modelId": 8, "file": [b64(r) for r in refs]}
    )
    assert resp.status_code == 200, resp.text
    (seen,) = fake.requests("/v1/images/edits")
    assert [data for _name, data in seen.form["image[]"]] == refs
    assert seen.form["model"] == ["fake-image-better"] and seen.form["prompt"] == ["blend them"]
    with Image.open(io.BytesIO(await fetch(ai, resp.json()["image_url"]))) as img:
        assert img.size == (30, 20)  # the fake inverts the first reference
        assert img.convert("RGB").getpixel((1, 1)) == (255, 255, 255)
    assert not fake.requests("/v1/images/generations")


async def test_generate_image_answered_by_url_is_fetched_and_stored(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(ai, "generate-image", {"prompt": "a small red square", "modelId": 2})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert fake.url not in resp.text  # the upstream's own link is not passed on
    with Image.open(io.BytesIO(await fetch(ai, body["image_url"]))) as img:
        assert img.size == (1024, 1024) and img.getpixel((0, 0)) == (200, 40, 40)
    assert (fake.requests("/v1/images/generations")[0].json or {})["model"] == (
        "fake-image-std-url"
    )


async def test_edit_image_uploads_multipart_and_returns_the_edit(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    source = png(20, 10, (10, 20, 30))
    resp = await paid(
        ai,
        "edit-image",
        {
            "prompt": "invert it",
            "imageBase64": b64(source),
            "outputFormat": "jpeg",
            "returnBase64": True,
        },
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["success"] is True and body["fallback"] is False
    assert body["imageUrl"].split("?")[0].endswith(".jpeg")
    with Image.open(io.BytesIO(base64.b64decode(body["base64Image"]))) as img:
        assert img.format == "JPEG" and img.size == (20, 10)
        pixel = img.convert("RGB").getpixel((10, 5))
        assert isinstance(pixel, tuple)
        r, g, b = pixel
        assert abs(r - 245) < 6 and abs(g - 235) < 6 and abs(b - 225) < 6
    (seen,) = fake.requests("/v1/images/edits")
    assert seen.form["model"] == ["fake-image-edit"]
    assert seen.form["prompt"] == ["invert it"]
    (_name, uploaded) = (seen.form.get("image") or seen.form["image[]"])[0]
    assert uploaded == source


async def test_text_to_speech_maps_the_voice_and_stores_audio(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    text = "Hello from satsgate, twenty chars x"
    resp = await paid(
        ai,
        "text-to-speech",
        {"text": text, "voice": "English_Brian", "format": "wav", "speed": 1.0},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    audio = await fetch(ai, body["audioUrl"])
    with wave.open(io.BytesIO(audio)) as w:
        seconds = w.getnframes() / w.getframerate()
    assert seconds == pytest.approx(0.05 * len(text), abs=0.01)
    assert body["durationSeconds"] == pytest.approx(seconds, abs=0.01)
    sent = fake.requests("/v1/audio/speech")[0].json or {}
    assert sent["model"] == "fake-tts-hd"
    assert sent["voice"] in ("onyx", "echo", "ash", "fable")  # a male voice for Brian
    assert sent["response_format"] == "wav"
    assert resp.headers["X-Route-Model"] == "33"


async def test_text_to_speech_global_tier_sends_language_and_description(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(
        ai,
        "text-to-speech",
        {
            "text": "Bonjour",
            "modelId": 43,
            "language": "fr",
            "format": "wav",
            "voice_description": "female, elderly",
        },
    )
    assert resp.status_code == 200, resp.text
    sent = fake.requests("/v1/audio/speech")[0].json or {}
    assert sent["model"] == "fake-tts-global" and sent["voice"] == "nova"
    assert "Speak in French." in sent["instructions"]
    assert "female, elderly" in sent["instructions"]


async def test_transcribe_audio_job_gives_segments_srt_and_vtt(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    audio = wav(4.0)
    resp = await paid(
        ai,
        "transcribe-audio",
        {"file": b64(audio), "language": "es", "names": ["Zyxxa"], "timestamps": "word"},
    )
    doc = await job_result(ai, resp)
    assert doc["status"] == "COMPLETED", doc
    assert doc["untrusted_output"] is True  # the poll's answer itself says so
    result = doc["result"]
    assert result["text"] == "Hola desde el puerto. Nos vemos Zyxxa a mediodía."
    assert result["language"] == "es"
    assert [s["end"] for s in result["segments"]] == [2.0, 4.0]
    assert [w["word"] for w in result["segments"][0]["words"]] == ["Hola", "desde", "el", "puerto"]
    assert result["srt"].startswith("1\n00:00:00,000 --> 00:00:02,000\nHola desde el puerto.\n")
    assert "2\n00:00:02,000 --> 00:00:04,000\nNos vemos Zyxxa a mediodía.\n" in result["srt"]
    assert result["vtt"].startswith("WEBVTT\n\n00:00:00.000 --> 00:00:02.000\n")
    (seen,) = fake.requests("/v1/audio/transcriptions")
    assert seen.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert seen.form["model"] == ["fake-whisper"]
    assert seen.form["response_format"] == ["verbose_json"]
    assert seen.form["language"] == ["es"]
    assert seen.form["prompt"] == ["Names: Zyxxa."]
    assert seen.form["timestamp_granularities[]"] == ["segment", "word"]
    assert seen.form["file"][0][1] == audio


async def test_transcribe_audio_translation_uses_the_translations_endpoint(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(ai, "transcribe-audio", {"file": b64(wav(2.0)), "type": "translation"})
    doc = await job_result(ai, resp)
    assert doc["result"]["text"] == "Hello from the harbour. Meet at noon."
    assert doc["result"]["language"] == "en"
    assert len(fake.requests("/v1/audio/translations")) == 1
    assert not fake.requests("/v1/audio/transcriptions")


async def test_transcribe_translate_transcribes_then_translates(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(
        ai, "transcribe-translate", {"file": b64(wav(2.0)), "targetLanguage": "German"}
    )
    doc = await job_result(ai, resp)
    assert doc["status"] == "COMPLETED", doc
    result = doc["result"]
    assert result["transcript"] == "Hola desde el puerto. Nos vemos a mediodía."
    assert result["translation"] == "[German] Hola desde el puerto. Nos vemos a mediodía."
    assert result["sourceLanguage"] == "es" and result["targetLanguage"] == "de"
    assert result["translated"] is True
    system = (fake.requests("/v1/chat/completions")[0].json or {})["messages"][0]["content"]
    assert "German" in system and "Spanish" in system
    assert (fake.requests("/v1/audio/transcriptions")[0].form["model"]) == ["fake-whisper"]


def test_subtitles_from_segments() -> None:
    segments = (
        Segment(0.0, 1.5, "One"),
        Segment(1.5, 3661.25, "Two --> three"),
        Segment(4.0, 5.0, "  "),
    )
    assert to_srt(segments) == (
        "1\n00:00:00,000 --> 00:00:01,500\nOne\n\n2\n00:00:01,500 --> 01:01:01,250\nTwo --> three\n"
    )
    assert to_vtt(segments) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nOne\n\n00:00:01.500 --> 01:01:01.250\n"
        "Two -> three\n"
    )


# -- failures after payment: each refunded, nothing upstream shown -------------------------

TEXT_BODY = {"prompt": "Tell me a joke", "modelId": 31}


async def test_refusal_keeps_the_payment_for_a_retry_and_a_decline_refunds_it(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(CHAT, "refusal")
    resp = await paid(ai, "generate-text", TEXT_BODY)
    body = await assert_refusal_window_then_decline(ai, resp, fake)
    assert body["model_said"] == "I'm sorry, I can't help with that."


async def test_image_safety_block_is_content_filtered_and_not_retried(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next("/v1/images/generations", "policy")
    resp = await paid(ai, "generate-image", {"prompt": "forbidden", "modelId": 2})
    body = await assert_refusal_window_then_decline(ai, resp, fake)
    assert body["refusal_scope"] == "prompt"
    # The 400 content_policy_violation's message is the refusal the payer is shown.
    assert body["model_said"] == "Your request was rejected as a result of our safety system"
    assert len(fake.requests("/v1/images/generations")) == 1


async def test_a_chat_content_policy_error_shows_its_message_as_model_said(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(CHAT, "policy")
    resp = await paid(ai, "generate-text", TEXT_BODY)
    body = await assert_refusal_window_then_decline(ai, resp, fake)
    assert body["model_said"] == "Your request was rejected as a result of our safety system"


async def test_timeout_is_refunded_with_a_retry_hint(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(CHAT, "slow")
    resp = await paid(ai, "generate-text", TEXT_BODY)
    body = assert_refunded(resp, "TIMEOUT", fake)
    assert body["retry_after_seconds"] == 20
    assert len(fake.requests(CHAT)) == 1  # a timeout is not retried


async def test_rate_limit_is_refunded_with_the_upstream_retry_after(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(CHAT, "429")
    resp = await paid(ai, "generate-text", TEXT_BODY)
    body = assert_refunded(resp, "RATE_LIMITED", fake)
    assert body["retry_after_seconds"] == int(RETRY_AFTER)
    assert resp.headers["Retry-After"] == RETRY_AFTER
    assert len(fake.requests(CHAT)) == 1  # 429 is never retried upstream


async def test_server_error_is_retried_once_then_refunded(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(CHAT, "500", times=2)
    resp = await paid(ai, "generate-text", TEXT_BODY)
    assert_refunded(resp, "L402_UPSTREAM_FAILED", fake)
    assert len(fake.requests(CHAT)) == 2


async def test_one_server_error_is_absorbed_by_the_retry(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(CHAT, "500")
    resp = await paid(ai, "generate-text", TEXT_BODY)
    assert resp.status_code == 200 and resp.text == "You said: Tell me a joke"
    assert len(fake.requests(CHAT)) == 2


async def test_image_generation_is_never_repeated_upstream(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next("/v1/images/generations", "500")
    resp = await paid(ai, "generate-image", {"prompt": "a boat", "modelId": 2})
    assert_refunded(resp, "L402_UPSTREAM_FAILED", fake)
    assert len(fake.requests("/v1/images/generations")) == 1


@pytest.mark.parametrize("mode", ["malformed", "html"])
async def test_malformed_answer_is_a_refunded_service_error(
    ai: httpx.AsyncClient, fake: FakeAIUpstream, mode: str
) -> None:
    fake.fail_next(CHAT, mode)
    resp = await paid(ai, "generate-text", TEXT_BODY)
    assert_refunded(resp, "SERVICE_ERROR", fake)


async def test_malformed_speech_and_transcription_are_refunded(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next("/v1/audio/speech", "malformed")
    resp = await paid(ai, "text-to-speech", {"text": "Hi", "format": "wav"})
    assert_refunded(resp, "SERVICE_ERROR", fake)
    fake.fail_next("/v1/audio/transcriptions", "malformed")
    resp = await paid(ai, "transcribe-audio", {"file": b64(wav(1.0))})
    doc = await job_result(ai, resp)
    assert doc["status"] == "FAILED"
    error = doc
    assert error["error_code"] == "SERVICE_ERROR" and error["refund"]["amount_sats"] > 0
    assert_no_leak(str(doc), fake)


async def test_rate_limited_job_fails_with_refund_and_hint(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next("/v1/audio/transcriptions", "429")
    resp = await paid(ai, "transcribe-audio", {"file": b64(wav(1.0))})
    doc = await job_result(ai, resp)
    error = doc
    assert error["error_code"] == "RATE_LIMITED"
    assert error["retry_after_seconds"] == int(RETRY_AFTER)
    assert error["refund"]["amount_sats"] > 0
    assert_no_leak(str(doc), fake)


async def test_unmapped_model_is_refused_before_any_invoice(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream
) -> None:
    """A provider that maps only the standard tier: a pinned best model is refused before
    any invoice and never sent upstream; the default and 'auto' run on the standard tier."""
    settings = make_settings(
        tmp_path_factory.mktemp("ai-mini"),
        providers={
            "mini": {
                "kind": "openai",
                "base_url": f"{fake.url}/v1",
                "api_key": OPENAI_KEY,
                "models": {"31": "only-mini"},
                "max_tokens_field": "max_completion_tokens",
            }
        },
        engines={"text": "mini"},
    )
    srv = ThreadedServer(settings)
    fake.clear()
    try:
        async for client in http_client(srv):
            before = payment_count(srv)
            resp = await client.post("/api/l402/generate-text", json={"prompt": "x", "modelId": 6})
            assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
            assert payment_count(srv) == before
            resp = await client.post(
                "/api/l402/generate-text", json={"prompt": "analyze this proof", "model": "auto"}
            )
            assert resp.status_code == 402
            resp = await paid(client, "generate-text", {"prompt": "x", "maxTokens": 7})
            assert resp.status_code == 200, resp.text
            assert resp.headers["X-Route-Model"] == "31"
            resp = await paid(
                client, "generate-text", {"prompt": "prove it step by step", "model": "auto"}
            )
            assert resp.status_code == 200 and resp.headers["X-Route-Model"] == "31"
        sent = [s.json or {} for s in fake.requests(CHAT)]
        assert [s["model"] for s in sent] == ["only-mini"] * 2
        assert sent[0]["max_completion_tokens"] == 7 and "max_tokens" not in sent[0]
    finally:
        srv.stop()


async def test_logs_name_no_upstream_address_or_key(
    ai: httpx.AsyncClient, fake: FakeAIUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert (await paid(ai, "generate-text", TEXT_BODY)).status_code == 200
    fake.fail_next(CHAT, "429")
    assert (await paid(ai, "generate-text", TEXT_BODY)).status_code == 429
    fake.fail_next(CHAT, "500", times=2)
    assert (await paid(ai, "generate-text", TEXT_BODY)).status_code == 502
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "engine text (openai): upstream HTTP 429" in text  # the operator's line is there
    for secret in (OPENAI_KEY, fake.url, f":{fake.port}", f"port={fake.port}", UPSTREAM_DETAIL):
        assert secret not in text, secret


async def test_wrong_key_is_a_refunded_error_that_shows_no_key(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream
) -> None:
    settings = make_settings(
        tmp_path_factory.mktemp("ai-badkey"),
        providers={
            "cloud": {
                "kind": "openai",
                "base_url": f"{fake.url}/v1",
                "api_key": "sk-wrong-KEY-0000",
                "models": MODELS,
            }
        },
        engines={"text": "cloud"},
    )
    srv = ThreadedServer(settings)
    try:
        async for client in http_client(srv):
            resp = await paid(client, "generate-text", TEXT_BODY)
            assert_refunded(resp, "SERVICE_ERROR", fake)
            assert "sk-wrong" not in resp.text
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("provider", "engine", "message"),
    [
        ({"kind": "openai", "max_retries": 5}, "text", "max_retries must be 0, 1 or 2"),
        ({"kind": "openai", "voices": "nova"}, "tts", "voices must be a table"),
        (
            {"kind": "openai", "transcription_format": "srt"},
            "transcription",
            "transcription_format must be",
        ),
        ({"kind": "openai", "image_sizes": "any"}, "image", "image_sizes must be"),
        ({"kind": "openai", "max_tokens_field": "tokens"}, "text", "max_tokens_field must be"),
        ({"kind": "anthropic", "max_tokens": "many"}, "text", "max_tokens must be a number"),
        ({"kind": "anthropic"}, "tts", "cannot serve it"),
        ({"kind": "openai", "models": {"10": "whisper"}}, "translation", "cannot serve it"),
    ],
)
def test_provider_configuration_that_cannot_work_refuses_to_start(
    tmp_path: Any, provider: dict[str, Any], engine: str, message: str
) -> None:
    settings = make_settings(
        tmp_path, providers={"p": {"models": {"31": "m"}, **provider}}, engines={engine: "p"}
    )
    with pytest.raises(EngineConfigError, match=message):
        engines_for(settings)


def test_operator_sees_the_provider_callers_do_not(tmp_path: Any) -> None:
    settings = make_settings(
        tmp_path,
        providers={
            "cloud": {"kind": "openai", "api_key": OPENAI_KEY, "models": {"31": "m", "10": "w"}}
        },
        engines={"text": "cloud", "speech_translation": "cloud"},
    )
    status = engines_for(settings).status("speech_translation")
    assert status.available and status.label == "openai via cloud"
    assert status.public() == {
        "engine": "speech_translation",
        "available": True,
        "source": "provider",
    }
    assert OPENAI_KEY not in repr(status) and OPENAI_KEY not in repr(settings)


def test_html_is_cut_after_block_end_tags_only() -> None:
    blocks = [f'<p class="c{i}">Sentence {i} ' + "text " * 100 + "</p>\n" for i in range(30)]
    html = "<div>" + "".join(blocks) + "</div>"
    pieces = split_html(html, 3500)
    assert "".join(pieces) == html
    assert len(pieces) > 1
    assert all(piece.rstrip("\n").endswith("</p>") for piece in pieces[:-1])
    assert all(len(piece) <= 3500 for piece in pieces)


def test_text_is_cut_at_paragraphs_then_sentences() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "Word. " * 200 for i in range(10))
    pieces = split_text(text, 3500)
    assert "".join(pieces) == text
    assert all(len(p) <= 3500 for p in pieces)
    one_long = "A sentence here. " * 1000
    pieces = split_text(one_long, 3500)
    assert "".join(pieces) == one_long and all(len(p) <= 3500 for p in pieces)


def test_text_pieces_always_join_back_within_the_limit() -> None:
    rng = random.Random(7)
    alphabet = ["a", "bb", " ", "\n", "\n\n", ". ", "。", "longword" * 9]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        pieces = split_text(text, 40)
        assert "".join(pieces) == text
        assert all(0 < len(p) <= 40 for p in pieces) or text == ""
