"""The local voice's choices, without running it: espeak-ng's voice list read, languages and
voice descriptions mapped to its voices, variants, pitch and rate, and what it refuses."""

from __future__ import annotations

import time

import pytest

from satsgate.engines import EngineError
from satsgate.engines.local.espeak import (
    BASE_WPM,
    Unsupported,
    VoicePlan,
    parse_voice_list,
    plan_voice,
)
from satsgate.engines.local.tools import ToolRunner, wav_duration_s
from satsgate.engines.local.whisper import WhisperEngine
from satsgate.engines.transcription import TranscriptionRequest

LISTING = """Pty Language       Age/Gender VoiceName          File                 Other Languages
 5  af              --/M      Afrikaans          gmw/af
 5  cmn             --/M      Chinese_(Mandarin) sit/cmn              (zh-cmn 5)(zh 5)
 5  de              --/M      German             gmw/de
 5  en-gb           --/M      English_(Great_Britain) gmw/en          (en 2)
 5  en-gb-x-rp      --/M      English_(Received_Pronunciation) gmw/en-GB-x-rp (en-gb 4)(en 5)
 5  en-us           --/M      English_(America)  gmw/en-US            (en 3)
 5  nb              --/M      Norwegian_Bokmål   gmq/nb               (no 5)
 5  pt              --/M      Portuguese_(Portugal) roa/pt            (pt-pt 5)
 5  pt-br           --/M      Portuguese_(Brazil) roa/pt-BR           (pt 6)
"""


def test_voice_list_codes_and_aliases() -> None:
    voices = parse_voice_list(LISTING)
    assert voices["en"] == "en-us"  # plain English is American here
    assert voices["zh"] == "cmn" and voices["no"] == "nb" and voices["pt"] == "pt"
    assert voices["pt-br"] == "pt-br" and voices["en-gb"] == "en-gb"


@pytest.mark.parametrize(
    ("language", "description", "speed", "plan"),
    [
        (None, None, 1.0, VoicePlan("en-us", 50, BASE_WPM)),
        ("en", "female, elderly", 1.0, VoicePlan("en-us+grandma", 42, BASE_WPM)),
        ("en-GB", "male, whisper", 2.0, VoicePlan("en-gb+whisper", 50, 2 * BASE_WPM)),
        ("de", "child", 0.5, VoicePlan("de+f4", 80, 88)),
        ("en", "british, very low pitch", 1.0, VoicePlan("en-gb-x-rp", 15, BASE_WPM)),
        ("pt_BR", "male, teenager", 1.0, VoicePlan("pt-br+m2", 62, BASE_WPM)),
        ("zh", None, 1.0, VoicePlan("cmn", 50, BASE_WPM)),
    ],
)
def test_descriptions_map_to_voices_variants_pitch_and_rate(
    language: str | None, description: str | None, speed: float, plan: VoicePlan
) -> None:
    assert plan_voice(parse_voice_list(LISTING), language, description, speed) == plan


@pytest.mark.parametrize(
    ("language", "description", "said"),
    [
        ("xx", None, "does not speak 'xx'"),
        ("en", "male, indian", "no indian accent"),
        ("de", "british", "English only"),
    ],
)
def test_what_the_voice_cannot_do_is_refused(
    language: str, description: str | None, said: str
) -> None:
    with pytest.raises(Unsupported, match=said):
        plan_voice(parse_voice_list(LISTING), language, description, 1.0)


def test_the_recognizer_takes_english_only() -> None:
    engine = WhisperEngine.__new__(WhisperEngine)  # no tools needed to ask
    ask = engine.unsupported
    assert ask(TranscriptionRequest(b"", "wav", None)) is None
    assert ask(TranscriptionRequest(b"", "wav", "en", task="translation")) is None
    assert "English only" in (ask(TranscriptionRequest(b"", "wav", "de")) or "")
    assert "cannot translate" in (ask(TranscriptionRequest(b"", "wav", None, "translation")) or "")
    assert WhisperEngine.languages == frozenset({"en"})


async def test_a_tool_past_its_time_is_killed_and_a_failing_one_refunded() -> None:
    tools = ToolRunner(0.3, parallel=1)
    started = time.monotonic()
    with pytest.raises(EngineError) as late:
        await tools.run(["sleep", "20"], what="the test tool")
    assert late.value.code == "TIMEOUT" and time.monotonic() - started < 5
    assert "did not finish within 0.3 s" in late.value.message
    with pytest.raises(EngineError) as failed:
        await tools.run(["sh", "-c", "echo secret detail >&2; exit 3"], what="the test tool")
    assert failed.value.code == "SERVICE_ERROR" and "secret" not in failed.value.message
    assert await tools.run(["cat"], stdin=b"spoken") == b"spoken"
    with pytest.raises(EngineError):
        wav_duration_s(b"RIFF\0\0\0\0WAVE")
