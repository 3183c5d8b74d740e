"""Provider kind elevenlabs against a loopback fake of its API: premium and studio speech
with the spec's voice names mapped by configuration, a cloned voice reused for speech,
and errors mapped to catalog codes (voice not found, 422, 429, a bad key)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from satsgate.config.settings import Settings
from satsgate.domain.media import audio_duration_s, audio_format
from satsgate.engines import CpuRunner, EngineDeps, EngineError, ProviderConfig
from satsgate.engines.providers.elevenlabs import (
    DEFAULT_MODELS,
    NARRATION_PART_CHARS,
    ElevenLabsProvider,
)
from satsgate.engines.synthesis import SynthesisRequest
from satsgate.engines.voice_clone import VoiceCloneEngine, VoiceCloneRequest
from tests.conftest import ThreadedServer, make_settings, paid_l402_auth
from tests.engines.test_books import sample_epub
from tests.engines.test_speech import ffprobe, finished_job, paid_post
from tests.fakes.fake_platforms import ELEVEN_KEY, FakeElevenLabs, wav


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeElevenLabs]:
    platform = FakeElevenLabs()
    yield platform
    platform.stop()


def provider(fake: FakeElevenLabs, key: str = ELEVEN_KEY) -> ElevenLabsProvider:
    config = ProviderConfig(
        name="voices", kind="elevenlabs", base_url=fake.url, api_key=key,
        models=dict(DEFAULT_MODELS),
        options={"voices": {"English_Aria": "21m00Tcm4TlvDq8ikWAM"},
                 "default_voice": "EXAVITQu4vr4xnSDxMaL"},
    )  # fmt: skip
    return ElevenLabsProvider(config, EngineDeps(Settings(), CpuRunner(ThreadPoolExecutor(1), 1)))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeElevenLabs
) -> Iterator[ThreadedServer]:
    providers = {"voices": {
        "kind": "elevenlabs", "base_url": fake.url, "api_key": ELEVEN_KEY,
        "models": dict(DEFAULT_MODELS), "voices": {"English_Aria": "21m00Tcm4TlvDq8ikWAM"},
    }}  # fmt: skip
    srv = ThreadedServer(
        make_settings(
            tmp_path_factory.mktemp("eleven"),
            providers=providers,
            engines={"tts": "voices", "voice_clone": "voices", "audiobook": "voices"},
        )
    )
    yield srv
    srv.stop()


async def test_text_to_speech_in_a_premium_voice_through_the_gate(
    server: ThreadedServer, fake: FakeElevenLabs
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        text = "Good evening from satsgate."
        body = {"text": text, "voice": "English_Aria", "format": "wav", "modelId": 33}
        auth = await paid_l402_auth(client, "text-to-speech", body)
        resp = await client.post(
            "/api/l402/text-to-speech", json=body, headers={"Authorization": auth}
        )
        assert resp.status_code == 200, resp.text
        audio = (await client.get(resp.json()["audioUrl"])).content
        assert audio_duration_s(audio) == pytest.approx(0.06 * len(text), abs=0.01)
        assert fake.calls[-1]["voice"] == "21m00Tcm4TlvDq8ikWAM"
        # A voice this node maps to no voice id: refused before any invoice.
        other = {**body, "voice": "English_Brian"}
        resp = await client.post("/api/l402/text-to-speech", json=other)
        assert resp.status_code == 503 and "invoice" not in resp.json(), resp.text


@pytest.fixture
async def eleven(fake: FakeElevenLabs) -> AsyncIterator[ElevenLabsProvider]:
    p = provider(fake)
    yield p
    await p.aclose()


def speech(p: ElevenLabsProvider) -> Any:
    return p.engine("tts")


async def test_premium_speech_in_a_mapped_voice(
    eleven: ElevenLabsProvider, fake: FakeElevenLabs
) -> None:
    text = "Hello from a premium voice."
    out = await speech(eleven).synthesize(
        SynthesisRequest(
            text,
            33,
            voice="English_Aria",
            speed=1.5,
            language="en",
            format="wav",
            model_name=DEFAULT_MODELS["33"],
        )
    )
    assert out.format == "wav" and audio_format(out.audio) == "wav"
    assert audio_duration_s(out.audio) == pytest.approx(0.06 * len(text), abs=0.01)
    call = fake.calls[-1]
    assert call["voice"] == "21m00Tcm4TlvDq8ikWAM" and call["model_id"] == "eleven_multilingual_v2"
    assert call["query"] == {"output_format": "wav_44100"} and call["language_code"] == "en"
    assert call["voice_settings"] == {"speed": 1.2}  # clamped into ElevenLabs' range
    mp3 = await speech(eleven).synthesize(
        SynthesisRequest("Studio.", 3, model_name=DEFAULT_MODELS["3"])
    )
    assert audio_format(mp3.audio) == "mp3"
    assert fake.calls[-1]["voice"] == "EXAVITQu4vr4xnSDxMaL"  # the default voice


async def test_a_cloned_voice_is_reusable_for_speech(
    eleven: ElevenLabsProvider, fake: FakeElevenLabs
) -> None:
    clone = cast(VoiceCloneEngine, eleven.engine("voice_clone"))
    result = await clone.clone(VoiceCloneRequest(wav(12.0), "wav", "caller-voice-1", True))
    assert fake.calls[-1] == {"add": "caller-voice-1", "bytes": len(wav(12.0)), "noise": "true"}
    out = await speech(eleven).synthesize(
        SynthesisRequest(
            "In my own voice.",
            33,
            voice=result.voice_id,
            format="wav",
            model_name=DEFAULT_MODELS["33"],
        )
    )
    assert fake.calls[-1]["voice"] == result.voice_id and audio_duration_s(out.audio) > 0.5


async def test_errors_map_to_catalog_codes(
    eleven: ElevenLabsProvider, fake: FakeElevenLabs
) -> None:
    engine = speech(eleven)
    assert engine.unsupported(SynthesisRequest("x", 33, voice="German_Nobody")) is not None
    assert engine.unsupported(SynthesisRequest("x", 33, voice="English_Aria")) is None
    with pytest.raises(EngineError) as err:  # an id-shaped voice the platform does not know
        await engine.synthesize(SynthesisRequest("x", 33, voice="A" * 20, model_name="m"))
    assert err.value.code == "INVALID_INPUT" and not err.value.may_fall_back
    fake.busy = 1
    with pytest.raises(EngineError) as err:
        await engine.synthesize(SynthesisRequest("x", 33, model_name="m"))
    assert err.value.code == "RATE_LIMITED" and err.value.may_fall_back
    bad = provider(fake, key="wrong")
    try:
        with pytest.raises(EngineError) as err:
            await speech(bad).synthesize(SynthesisRequest("x", 33, model_name="m"))
        assert err.value.code == "SERVICE_ERROR" and ELEVEN_KEY not in err.value.message
    finally:
        await bad.aclose()


async def test_clone_voice_through_the_gate_then_speak_in_it(
    server: ThreadedServer, fake: FakeElevenLabs
) -> None:
    sample = wav(12.0)
    body = {"voiceFileBase64": base64.b64encode(sample).decode()}
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        auth = await paid_l402_auth(client, "clone-voice", body)
        resp = await client.post(
            "/api/l402/clone-voice", json=body, headers={"Authorization": auth}
        )
        assert resp.status_code == 200, resp.text
        voice_id = resp.json()["voice_id"]
        assert voice_id.startswith("Custom_")
        assert fake.voices[voice_id.removeprefix("Custom_")].startswith(
            "satsgate-"
        )  # no caller data
        assert fake.calls[-1]["bytes"] == len(sample)
        assert "modelId 3" in resp.json()["message"]
        speak = {"text": "Now in the cloned voice.", "voice": voice_id, "modelId": 3}
        auth = await paid_l402_auth(client, "text-to-speech", speak)
        resp = await client.post(
            "/api/l402/text-to-speech", json=speak, headers={"Authorization": auth}
        )
        assert resp.status_code == 200, resp.text
        assert fake.calls[-1]["voice"] == voice_id.removeprefix("Custom_")
        # Too short a sample: refused before any invoice.
        short = {"voiceFileBase64": base64.b64encode(wav(3.0)).decode()}
        resp = await client.post("/api/l402/clone-voice", json=short)
        assert resp.status_code == 400 and "invoice" not in resp.json(), resp.text
        assert "10 s to 5 minutes" in resp.text


async def test_audiobook_in_a_premium_voice_through_the_gate(
    server: ThreadedServer, fake: FakeElevenLabs, tmp_path: Path
) -> None:
    """The book is read by the provider's voice, one request per part of at most
    NARRATION_PART_CHARS, and assembled here into an M4B with the chapters marked."""
    before = len(fake.calls)
    body = {"epubBase64": base64.b64encode(sample_epub()).decode(), "fileName": "mill.epub",
            "modelId": 33, "voice": "English_Aria"}  # fmt: skip
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        done = await finished_job(client, await paid_post(client, "epub-audiobook", body))
        assert done["status"] == "COMPLETED", done
        m4b = tmp_path / "book.m4b"
        m4b.write_bytes((await client.get(done["result"]["url"])).content)
    spoken = [c for c in fake.calls[before:] if "voice" in c]
    assert spoken and all(c["voice"] == "21m00Tcm4TlvDq8ikWAM" for c in spoken)
    assert all(len(c["text"]) <= NARRATION_PART_CHARS for c in spoken)
    assert all(c["model_id"] == DEFAULT_MODELS["33"] for c in spoken)
    probed = ffprobe(m4b)
    assert [c["tags"]["title"] for c in probed["chapters"]] == ["Chapter One", "Chapter Two"]
    # The fake speaks 0.06 s per character: the book lasts as long as its parts together.
    expected = sum(0.06 * len(c["text"]) for c in spoken)
    assert float(probed["format"]["duration"]) == pytest.approx(expected, rel=0.05)
