"""The services over real HTTP on loopback: unavailable services refuse before any invoice;
with engines configured every service answers 402 with its exact quote, or refuses a bad
body with no invoice; the local services (vote, convert-file) run end to end."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from satsgate.lightning.invoices import decode_invoice
from satsgate.services.catalog.planned import vote_counts
from satsgate.services.registry import BY_SLUG, ENGINE_NAMES
from tests.conftest import ThreadedServer, http_client, paid_l402_auth, serve_with_engines
from tests.payments.test_gateway import assert_envelope, payment_count
from tests.services.test_services_media import PNG, b64, pdf_bytes, png_bytes, wav_bytes
from tests.services.test_services_quotes import quote

US = "+14155550123"

# One valid body per service (the quote table covers the variants).
VALID: dict[str, dict[str, Any]] = {
    "generate-image": {"input": {"prompt": "a cat", "width": 2048}, "modelId": 8},
    "edit-image": {"prompt": "stormy", "imageBase64": PNG},
    "analyze-image": {"image": PNG},
    "remove-background": {"imageBase64": PNG},
    "upscale-image": {"imageBase64": PNG, "scale": 3},
    "restore-face": {"imageBase64": PNG},
    "detect-nsfw": {"imageBase64": PNG},
    "detect-objects": {"imageBase64": PNG, "prompt": "cat"},
    "remove-object": {"imageBase64": PNG, "maskBase64": PNG},
    "colorize-image": {"imageBase64": PNG},
    "deblur-image": {"imageBase64": PNG},
    "estimate-depth": {"imageBase64": PNG},
    "generate-3d-model": {"prompt": "a chair"},
    "generate-text": {"input": [{"role": "user", "content": "x" * 2000}]},
    "multilingual-ask": {"question": "Hola?", "language": "es", "model": "Better"},
    "translate-text": {"text": "x" * 4500, "targetLanguage": "German"},
    "translate-rare-language": {"text": "x" * 2000, "targetLanguage": "nav"},
    "translate-epub": {"epubBase64": b64(b"PK"), "targetLanguage": "es"},  # refused: not EPUB
    "search": {"query": "sats"},
    "text-to-speech": {"text": "x" * 3200, "voice": "English_Emma"},
    "clone-voice": {"voiceFileUrl": "https://files.example.org/v.wav"},
    "transcribe-audio": {"audioBase64": b64(wav_bytes(125))},
    "transcribe-translate": {"file": b64(wav_bytes(125)), "targetLanguage": "fr"},
    "epub-audiobook": {"epubBase64": b64(b"w" * 33_000), "fileName": "book.txt"},
    "generate-music": {"prompt": "jazz", "duration": 45, "lyricsAddon": True},
    "generate-video": {"prompt": "waves", "duration": 8, "resolution": "2K"},
    "animate-image": {"prompt": "blink", "image": PNG, "duration": 4},
    "extract-document": {"documentBase64": b64(pdf_bytes(4))},
    "extract-receipt": {"documentBase64": PNG},
    "convert-file": {"file": PNG, "targetFormat": "webp"},
    "e-signature": {
        "documentBase64": b64(pdf_bytes(1)),
        "customerEmail": "me@example.org",
        "signers": [{"name": "A", "email": "a@example.org"}],
    },
    "boardingpass-wallet": {"documents": [PNG, PNG]},
    "send-email": {"to": ["a@example.org", "b@example.org"], "subject": "s", "text": "t"},
    "send-sms": {"phoneNumber": "+447700900123", "message": "hello"},
    "call": {"phone_number": US, "message": "hi", "duration_minutes": 2},
    "ai-call": {"phoneNumber": US, "task": "Ask for opening hours", "durationMinutes": 2},
    "send-fax": {"faxNumber": US, "documentBase64": b64(pdf_bytes(2))},
    "receive-fax": {"country": "DE"},
    "voice-bridge-open": {"phone_number": US, "durationMinutes": 3},
    "vote": {"slug": "voice-changer"},
}
NOT_QUOTED = {"translate-epub"}

EXPECTED_SATS = {
    "generate-image": 300, "edit-image": 200, "analyze-image": 21, "remove-background": 44,
    "upscale-image": 5, "restore-face": 25, "detect-nsfw": 2, "detect-objects": 5,
    "remove-object": 130, "colorize-image": 5, "deblur-image": 110, "estimate-depth": 5,
    "generate-3d-model": 1600, "generate-text": 200, "multilingual-ask": 24,
    "translate-text": 5, "translate-rare-language": 54, "search": 21, "text-to-speech": 200,
    "clone-voice": 7500, "transcribe-audio": 30, "transcribe-translate": 41,
    "epub-audiobook": 1000, "generate-music": 250, "generate-video": 3200,
    "animate-image": 1000, "extract-document": 40, "extract-receipt": 25, "convert-file": 100,
    "e-signature": 1000, "boardingpass-wallet": 200, "send-email": 400, "send-sms": 40,
    "call": 60, "ai-call": 300, "send-fax": 500, "receive-fax": 500, "voice-bridge-open": 150,
    "vote": 1,
}  # fmt: skip


@pytest.fixture(scope="module")
def engines_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    """A node with every engine configured: every service quotes (none is run here)."""
    yield from serve_with_engines(tmp_path_factory, "engines", ENGINE_NAMES)


@pytest.fixture
async def engines_client(engines_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(engines_server):
        yield c


async def test_unavailable_service_refuses_before_any_invoice(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    before = payment_count(server)
    for slug in ("generate-image", "send-sms", "generate-video", "voice-bridge-open"):
        resp = await client.post(f"/api/l402/{slug}", json=VALID[slug])
        body = assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
        assert "WWW-Authenticate" not in resp.headers
        assert "invoice" not in body
    assert payment_count(server) == before


async def test_every_service_quotes_its_exact_price_over_http(
    engines_client: httpx.AsyncClient, engines_server: ThreadedServer
) -> None:
    assert set(VALID) | {"render-card", "html-to-pdf", "merge-pdf"} == set(BY_SLUG)
    for slug, body in VALID.items():
        resp = await engines_client.post(f"/api/l402/{slug}", json=body)
        if slug in NOT_QUOTED:
            assert_envelope(resp, "L402_INVALID_PARAMS", 400)
            continue
        assert resp.status_code == 402, (slug, resp.text)
        challenge = resp.json()
        assert challenge["amountSats"] == EXPECTED_SATS[slug] == await quote(slug, body), slug
        assert decode_invoice(challenge["invoice"]).amount_msat == EXPECTED_SATS[slug] * 1000


INVALID_HTTP = [
    ("send-sms", {"phone_number": US, "message": "x" * 121}, "L402_INVALID_PARAMS"),
    ("send-sms", {"phone_number": "0044 7700 900123", "message": "hi"}, "L402_INVALID_PARAMS"),
    ("text-to-speech", {"text": "x", "speed": 2.5}, "L402_INVALID_PARAMS"),
    (
        "text-to-speech",
        {"text": "x", "modelId": 43, "voice_description": "female, loud"},
        "L402_INVALID_PARAMS",
    ),
    ("generate-music", {"prompt": "x", "duration": 301}, "L402_INVALID_PARAMS"),
    ("generate-video", {"prompt": "x", "duration": 16}, "L402_INVALID_PARAMS"),
    ("ai-call", {"phoneNumber": US, "task": "t", "durationMinutes": 11}, "L402_INVALID_PARAMS"),
    ("boardingpass-wallet", {"documents": [PNG] * 9}, "L402_INVALID_PARAMS"),
    ("generate-image", {"prompt": "x", "modelId": 77}, "L402_INVALID_PARAMS"),
    ("transcribe-audio", {"file": PNG}, "L402_INVALID_PARAMS"),
    ("extract-document", {"documentBase64": b64(b"%PDF-1.7 truncated")}, "L402_INVALID_PARAMS"),
    (
        "generate-video",
        {"prompt": "x", "callback_url": "https://127.0.0.1/hook"},
        "L402_CALLBACK_INVALID",
    ),
    (
        "transcribe-audio",
        {"file": b64(wav_bytes(3)), "callback_url": "https://10.0.0.1/"},
        "L402_CALLBACK_INVALID",
    ),
]


async def test_invalid_bodies_get_no_invoice_over_http(
    engines_client: httpx.AsyncClient, engines_server: ThreadedServer
) -> None:
    before = payment_count(engines_server)
    for slug, body, code in INVALID_HTTP:
        resp = await engines_client.post(f"/api/l402/{slug}", json=body)
        assert_envelope(resp, code, 400)
        assert "WWW-Authenticate" not in resp.headers, slug
    assert payment_count(engines_server) == before


async def test_oversized_body_is_refused_early_with_413(
    engines_client: httpx.AsyncClient,
) -> None:
    resp = await engines_client.post(
        "/api/l402/send-sms", json={"phone_number": US, "message": "x" * 20_000}
    )
    assert_envelope(resp, "PAYLOAD_TOO_LARGE", 413)


async def test_service_description_lists_the_schema(client: httpx.AsyncClient) -> None:
    resp = await client.get("/api/l402/voice-bridge-open")
    assert resp.status_code in (402, 503)  # the description, as a probe: no invoice
    doc = resp.json()
    assert doc["tool"] == "open_voice_bridge" and doc["mode"] == "sync"
    assert "phoneNumber" in doc["input_schema"]["properties"]


async def test_vote_is_paid_once_and_counted(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    body = {"slug": "separate-stems"}
    totals = []
    for _ in range(2):
        auth = await paid_l402_auth(client, "vote", body)
        resp = await client.post("/api/l402/vote", json=body, headers={"Authorization": auth})
        assert resp.status_code == 200, resp.text
        result = resp.json()
        assert result["success"] is True and result["slug"] == "separate-stems"
        totals.append(result["votes"])
        again = await client.post("/api/l402/vote", json=body, headers={"Authorization": auth})
        assert again.status_code in (200, 402)  # dedup replay or spent: never a second vote
    assert totals[1] == totals[0] + 1
    counts = server.call(lambda: vote_counts(server.store.votes))
    assert counts["separate-stems"] == totals[1]


async def test_convert_file_runs_on_this_node(client: httpx.AsyncClient) -> None:
    body = {"file": b64(png_bytes(40, 30, "RGBA")), "targetFormat": "jpeg"}
    ch = await client.post("/api/l402/convert-file", json=body)
    assert ch.status_code == 402 and ch.json()["amountSats"] == 100
    auth = await paid_l402_auth(client, "convert-file", body)
    resp = await client.post("/api/l402/convert-file", json=body, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["format"] == "jpeg" and result["sourceFormat"] == "image"
    data = base64.b64decode(result["file_base64"])
    with Image.open(io.BytesIO(data)) as img:
        assert (img.format, img.size) == ("JPEG", (40, 30))
    served = await client.get(result["file_url"])
    assert served.status_code == 200 and served.content == data
