"""translate-rare-language and transcribe-translate on the local engines, through the gate:
Apertium into Occitan, Asturian and Sardinian (the words of the output are checked, the
source language identified); English speech (made with eSpeak NG) written out by Whisper
and translated by Apertium; what these engines cannot do is refused before any invoice;
a failure after payment is refunded; and a fresh node with no keys offers 20 services."""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.config.settings import Settings
from satsgate.engines.local import apertium, speech_translation
from satsgate.services.registry import SERVICES
from tests.conftest import (
    ThreadedServer,
    http_client,
    make_settings,
    paid_l402_auth,
    skip_unless_ci,
)
from tests.engines_down import engines_for
from tests.payments.test_gateway import assert_envelope, payment_count

RARE_PAIRS = {("ca", "oci"), ("es", "oci"), ("fr", "oci"), ("es", "ast"), ("ca", "srd"),
              ("it", "srd")}  # fmt: skip


@pytest.fixture(autouse=True)
def _apertium() -> None:
    if shutil.which("apertium") is None:
        skip_unless_ci("apertium is not installed")
    missing = RARE_PAIRS - set(apertium.installed_pairs(target_code=apertium.rare_code))
    if missing:
        skip_unless_ci(f"Apertium pairs into rare languages missing: {sorted(missing)}")


def _speech_tools() -> None:
    for tool in ("espeak-ng", "ffmpeg"):
        if shutil.which(tool) is None:
            skip_unless_ci(f"{tool} is not installed")
    if speech_translation.probe():
        skip_unless_ci(speech_translation.probe())


async def _paid(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> httpx.Response:
    auth = await paid_l402_auth(client, slug, body)
    return await client.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


async def _rare(client: httpx.AsyncClient, text: str, target: str) -> dict[str, Any]:
    resp = await _paid(client, "translate-rare-language", {"text": text, "targetLanguage": target})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def _refused(
    client: httpx.AsyncClient, server: ThreadedServer, slug: str, body: dict[str, Any]
) -> str:
    before = payment_count(server)
    resp = await client.post(f"/api/l402/{slug}", json=body)
    error = assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)  # not 402: no invoice
    assert "WWW-Authenticate" not in resp.headers and "invoice" not in error
    assert "nothing was charged" in error["error"]
    assert payment_count(server) == before
    return str(error["error"])


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


# -- translate-rare-language ---------------------------------------------------------------


async def test_catalan_into_occitan_with_the_spec_result_shape(client: httpx.AsyncClient) -> None:
    out = await _rare(
        client, "Bon dia. La casa és molt gran i el gos menja pa cada dia.", "Occitan"
    )
    assert out == {
        "translatedText": out["translatedText"],
        "targetLanguage": "oci",
        "targetLanguageName": "Occitan",
        "quality": {"tier": "unverified", "chrf": None},
        "untrusted_output": True,
    }
    # Occitan, not the Catalan sent: "ostal" (house), "fòrça" (very), "can" (dog), "manja".
    words = _words(out["translatedText"])
    assert {"ostal", "fòrça", "can", "manja"} <= words, out
    assert not {"casa", "molt", "gos"} & words, out


async def test_spanish_into_asturian_and_italian_into_sardinian(
    client: httpx.AsyncClient,
) -> None:
    asturian = await _rare(
        client, "Mañana vamos a la playa con los niños y comemos pescado.", "ast"
    )
    assert asturian["targetLanguage"] == "ast" and asturian["targetLanguageName"] == "Asturian"
    words = _words(asturian["translatedText"])
    # "a la sablera colos neños y comemos pexe": Asturian words, not the Spanish ones.
    assert {"vamos", "sablera", "neños", "pexe"} <= words, asturian
    assert not {"playa", "niños", "pescado"} & words, asturian
    sardinian = await _rare(
        client, "Il cane mangia il pane nella casa grande di mia madre.", "Sardinian"
    )
    assert sardinian["targetLanguage"] == "srd"
    words = _words(sardinian["translatedText"])
    assert {"su", "cane", "pane"} <= words and "il" not in words, sardinian


async def test_what_the_rare_pairs_cannot_do_is_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    # A rare target no installed pair reaches (the spec's own example, Tok Pisin).
    error = await _refused(
        client, server, "translate-rare-language", {"text": "Welcome", "targetLanguage": "tpi"}
    )
    assert "not into Tok Pisin" in error and "ca->oci" in error, error
    # A text in a language not translated into Occitan here.
    error = await _refused(
        client,
        server,
        "translate-rare-language",
        {
            "text": "Der Hund schläft heute im Garten hinter dem großen Haus.",
            "targetLanguage": "oci",
        },
    )
    assert "German (de)" in error, error


@pytest.fixture
def hasty_server(tmp_path: Path) -> Iterator[ThreadedServer]:
    """A node whose engines get 1 ms: every translation runs out of time."""
    srv = ThreadedServer(make_settings(tmp_path / "data", cpu_job_time_limit_s=0.001))
    yield srv
    srv.stop()


async def test_a_rare_translation_past_its_time_limit_is_refunded(
    hasty_server: ThreadedServer,
) -> None:
    async for client in http_client(hasty_server):
        resp = await _paid(
            client,
            "translate-rare-language",
            {
                "text": "El gos menja pa a la casa. " * 100,
                "targetLanguage": "oci",
            },
        )
        error = assert_envelope(resp, "TIMEOUT", resp.status_code)
        assert resp.status_code != 200
        # All of it: 50 + 0.002 * 2700 = 55.4, rounded up.
        assert error["refund"]["amount_sats"] == 56, error


# -- transcribe-translate ------------------------------------------------------------------


def _espeak_wav(text: str, tmp_path: Path) -> str:
    path = tmp_path / "said.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(path), text], check=True)
    return base64.b64encode(path.read_bytes()).decode()


async def _job(client: httpx.AsyncClient, accepted: httpx.Response) -> dict[str, Any]:
    assert accepted.status_code == 202, accepted.text
    url = accepted.json()["poll_url"]
    for _ in range(600):
        body: dict[str, Any] = (await client.get(url)).json()
        if body["status"] in ("COMPLETED", "FAILED"):
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"the job did not finish: {body}")


async def test_english_speech_is_transcribed_then_translated_into_spanish(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    _speech_tools()
    said = "Good morning. The dog sleeps in the big house of my mother."
    body = {"file": _espeak_wav(said, tmp_path), "targetLanguage": "Spanish"}
    done = await _job(client, await _paid(client, "transcribe-translate", body))
    assert done["status"] == "COMPLETED", done
    result = done["result"]
    assert set(result) == {"transcript", "translation", "sourceLanguage", "targetLanguage",
                           "translated", "untrusted_output"}, result  # fmt: skip
    assert {"morning", "dog", "house", "mother"} <= _words(result["transcript"]), result
    assert {"perro", "casa", "grande", "madre"} <= _words(result["translation"]), result
    assert not {"dog", "house", "mother"} & _words(result["translation"]), result
    assert result["sourceLanguage"] == "en" and result["targetLanguage"] == "es"
    assert result["translated"] is True


async def test_what_local_speech_translation_cannot_do_is_refused_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer, tmp_path: Path
) -> None:
    _speech_tools()
    audio = _espeak_wav("Hello.", tmp_path)
    # Speech in another language than English.
    error = await _refused(
        client,
        server,
        "transcribe-translate",
        {"file": audio, "targetLanguage": "es", "sourceLanguage": "de"},
    )
    assert "English speech only" in error, error
    # A target no installed pair reaches from English (French, German).
    for target, name in (("fr", "French"), ("de", "German")):
        error = await _refused(
            client, server, "transcribe-translate", {"file": audio, "targetLanguage": target}
        )
        assert f"not into {name}" in error and "es, " in error, error


async def test_api_languages_says_which_rare_and_speech_pairs_this_node_serves(
    client: httpx.AsyncClient,
) -> None:
    doc = (await client.get("/api/languages")).json()
    rare_node = doc["thisNode"]["rareTranslation"]
    assert rare_node["source"] == "local" and rare_node["label"] == apertium.RARE_LABEL
    listed = {(p["source"], p["target"]): p.get("via") for p in rare_node["pairs"]}
    pairs = set(listed)
    installed = set(apertium.installed_pairs(target_code=apertium.rare_code))
    assert {pair for pair, via in listed.items() if via is None} == installed >= RARE_PAIRS
    rare = {entry["code"]: entry["here"] for entry in doc["rare"]}
    assert rare["oci"] == {"into": True, "from": ["ca", "es", "fr"]}
    assert rare["srd"] == {"into": True, "from": ["ca", "it"]}
    assert rare["tpi"] == {"into": False, "from": []}
    assert sum(here["into"] for here in rare.values()) == len({t for _, t in pairs})
    speech = doc["thisNode"]["speechTranslation"]
    if speech["available"]:
        assert speech["label"] == speech_translation.LABEL
        spoken = {(p["source"], p["target"]) for p in speech["pairs"]}
        assert ("en", "es") in spoken and {s for s, _ in spoken} == {"en"}
        assert spoken == {(s, t) for s, t in apertium.installed_pairs() if s == "en"}
        assert all("via" not in p for p in speech["pairs"])  # installed pairs only


# -- what a fresh node offers --------------------------------------------------------------


def test_a_fresh_node_with_no_keys_offers_twenty_services() -> None:
    _speech_tools()
    engines = engines_for(Settings())
    available = {spec.slug for spec in SERVICES if spec.is_available(engines)}
    assert {"translate-rare-language", "transcribe-translate"} <= available
    assert len(available) == 20, sorted(available)
    for name in ("rare_translation", "speech_translation"):
        status = engines.status(name)
        assert status.available and status.source == "local", status
