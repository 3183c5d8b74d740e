"""The registry against the spec: every paid service, its tool name, category, models, job
type, schema and price consistency; model routing; BTC-pegged rates; language data; votes."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from aiohttp import web

from satsgate.config.settings import Settings
from satsgate.domain import languages, telephony, voices
from satsgate.jobs.lifecycle import JOB_TYPES
from satsgate.services.base import (
    UNDESCRIBED_PRICE,
    FlatPrice,
    PrecheckMemo,
    ServiceResult,
    sats_for_msat,
)
from satsgate.services.catalog import planned, pricing, rates, routing
from satsgate.services.catalog.models import MODELS_BY_ID
from satsgate.services.catalog.rates import FALLBACK
from satsgate.services.registry import BY_SLUG, BY_TOOL, ESTIMATORS, SERVICES
from satsgate.store import Store
from tests.engines_down import down_engines, engines_for

# slug -> tool name, as the spec names them (a service named only by slug: slug with "_").
SPEC_SERVICES = {
    "generate-image": "generate_image", "edit-image": "edit_image",
    "generate-text": "generate_text", "multilingual-ask": "multilingual_ask",
    "translate-text": "translate_text", "translate-rare-language": "translate_rare_language",
    "translate-epub": "translate_epub", "text-to-speech": "text_to_speech",
    "clone-voice": "clone_voice", "transcribe-audio": "transcribe_audio",
    "transcribe-translate": "transcribe_translate", "analyze-image": "analyze_image",
    "generate-video": "generate_video", "animate-image": "animate_image",
    "generate-music": "generate_music", "generate-3d-model": "generate_3d_model",
    "extract-document": "extract_document", "extract-receipt": "extract_receipt",
    "search": "search", "send-email": "send_email", "send-sms": "send_sms",
    "ai-call": "ai_call", "call": "call", "send-fax": "send_fax", "receive-fax": "receive_fax",
    "voice-bridge-open": "open_voice_bridge", "convert-file": "convert_file",
    "e-signature": "e_signature", "boardingpass-wallet": "boardingpass_wallet",
    "epub-audiobook": "epub_to_audiobook", "remove-background": "remove_background",
    "upscale-image": "upscale_image", "restore-face": "restore_face",
    "detect-nsfw": "detect_nsfw", "detect-objects": "detect_objects",
    "remove-object": "remove_object", "colorize-image": "colorize_image",
    "deblur-image": "deblur_image", "estimate-depth": "estimate_depth",
    "vote": "vote_on_service", "html-to-pdf": "html_to_pdf", "merge-pdf": "merge_pdf",
    "render-card": "render_card",
}  # fmt: skip

# Async services and their job types (spec: Async job).
SPEC_JOBS = {
    "generate-video": "video", "animate-image": "video-image", "generate-3d-model": "image-3d",
    "transcribe-audio": "transcription", "transcribe-translate": "transcribe-translate",
    "epub-audiobook": "epub-audiobook", "translate-epub": "translate-epub",
}  # fmt: skip

# The spec's pricing rule of every service: (model, the least a call costs in sats).
SPEC_SHAPES = {
    # Catalog prices charged as is.
    "render-card": ("flat", 5), "html-to-pdf": ("flat", 50), "merge-pdf": ("flat", 100),
    "convert-file": ("flat", 100), "e-signature": ("flat", 1000), "edit-image": ("flat", 200),
    "analyze-image": ("flat", 21), "search": ("flat", 21), "generate-3d-model": ("flat", 1600),
    "clone-voice": ("flat", 7500), "send-fax": ("flat", 500), "receive-fax": ("flat", 500),
    "remove-background": ("flat", 44), "upscale-image": ("flat", 5),
    "restore-face": ("flat", 25), "detect-nsfw": ("flat", 2), "detect-objects": ("flat", 5),
    "remove-object": ("flat", 130), "colorize-image": ("flat", 5),
    "deblur-image": ("flat", 110), "estimate-depth": ("flat", 5), "vote": ("flat", 1),
    # image: 1200 best, 150 (1K) or 300 (2K) better, 100 standard.
    "generate-image": ("per_tier", 100),
    # ocr 10 per page, receipt 25 per page; boarding passes 100 per pass.
    "extract-document": ("per_page", 10), "extract-receipt": ("per_page", 25),
    "boardingpass-wallet": ("per_pass", 100),
    # text: minimum 15 best, 5 better and standard.
    "generate-text": ("per_character", 5),
    # (1 + 2000 answer characters) at 1000 chars/sat + 15% = 2.3 sats: the spec's minimum
    # of 2 is below the least question.
    "multilingual-ask": ("per_character", 3),
    "translate-text": ("per_character", 1),  # 0.001 sat per character, minimum 1
    "translate-rare-language": ("per_character", 51),  # 50 base + 0.002 per character
    "translate-epub": ("per_character", 50),
    "text-to-speech": ("per_character", 1),
    "epub-audiobook": ("per_character", 500),
    "transcribe-audio": ("per_minute", 10),
    "transcribe-translate": ("per_minute", 18),  # (10 + 5) + 15%
    "generate-music": ("per_second", 75),  # 15 s at 5 sats
    # 3 s (the request schema's bound) at 250 sats (768p).
    "generate-video": ("per_second", 750), "animate-image": ("per_second", 750),
    "send-email": ("per_recipient", 200),
    # At the fallback rates: the cheapest destination (US) for one message or one minute.
    "send-sms": ("per_destination", 15), "call": ("per_minute", 30),
    "ai-call": ("per_minute", 150), "voice-bridge-open": ("per_minute", 50),
}  # fmt: skip

# Services whose price no unit describes, each with why: none, every spec price has a unit.
DYNAMIC: dict[str, str] = {}

# The cheapest request of each service whose price needs no file: it costs the minimum.
# (Services priced by a file's pages, seconds or characters: the estimate of one unit costs
# the minimum, tests/discovery/test_discovery.py.)
CHEAPEST: dict[str, dict[str, Any]] = {
    "generate-image": {"prompt": "x", "tier": "standard"},
    "generate-text": {"prompt": "x", "tier": "standard"},
    "multilingual-ask": {"question": "x", "language": "en"},
    "translate-text": {"text": "x", "targetLanguage": "es"},
    "translate-rare-language": {"text": "x", "targetLanguage": "tpi"},
    "text-to-speech": {"text": "x", "modelId": "global"},
    "generate-music": {"prompt": "x", "duration": 15},
    "generate-video": {"prompt": "x", "duration": 3},
    "send-email": {"to": "a@example.org", "subject": "s", "text": "t"},
    "send-sms": {"phone_number": "+14155550123", "message": "m"},
    "call": {"phone_number": "+14155550123", "message": "m"},
    "ai-call": {"phone_number": "+14155550123", "task": "t", "duration_minutes": 1},
    "voice-bridge-open": {"phoneNumber": "+14155550123", "durationMinutes": 1},
}


class _RequestStandIn:
    """Passed to ``price_msat`` in place of params: any use of it raises."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def test_every_service_declares_the_spec_price_shape() -> None:
    shapes = {
        s.slug: (s.price_shape.model, sats_for_msat(s.price_shape.minimum_msat(FALLBACK)))
        for s in SERVICES
    }
    assert shapes == SPEC_SHAPES
    assert all(s.price_shape is not UNDESCRIBED_PRICE for s in SERVICES)
    dynamic = {s.slug: s.price_shape.note for s in SERVICES if s.price_shape.model == "dynamic"}
    assert dynamic.keys() == DYNAMIC.keys() and all(dynamic.values())


def test_flat_prices_never_read_the_request_and_the_others_do() -> None:
    for spec in SERVICES:
        shape = spec.price_shape
        if shape.model == "flat":
            assert spec.price_msat(cast(Any, _RequestStandIn()), FALLBACK) == (
                shape.minimum_msat(FALLBACK)
            )
        else:
            with pytest.raises(AttributeError):
                spec.price_msat(cast(Any, _RequestStandIn()), FALLBACK)


def test_each_estimator_quotes_one_service_in_its_unit() -> None:
    ids = [s.price_shape.estimate for s in SERVICES if s.price_shape.estimate is not None]
    assert sorted(ids) == sorted(ESTIMATORS)  # each estimator, each once
    for spec in SERVICES:
        if spec.price_shape.estimate is not None:
            assert ESTIMATORS[spec.price_shape.estimate].unit == spec.price_shape.unit


@pytest.mark.parametrize("btc_factor", [1.0, 2.0, 0.25])
def test_the_cheapest_request_costs_the_minimum(btc_factor: float) -> None:
    # The rate book at BTC/USD reference / factor: pegged minimums move with it.
    snapshot = rates.Snapshot(rates.REFERENCE_BTC_USD / btc_factor, 0.0, "test")
    book = rates.RateBook((snapshot,))
    for slug, body in CHEAPEST.items():
        spec = BY_SLUG[slug]
        assert spec.price_msat(spec.parse(body, book), book) == (
            spec.price_shape.minimum_msat(book)
        ), slug
    for spec in SERVICES:  # a tier's minimum is the cheapest request pinned to it
        for model_id, sats in spec.price_shape.tier_min_sats.items():
            body = {**CHEAPEST[spec.slug], "modelId": model_id}
            body.pop("tier")
            quoted = spec.quote_sats(spec.parse(body, book), book)
            assert quoted == sats, (spec.slug, model_id)


def test_every_spec_service_is_registered_with_its_tool_name() -> None:
    assert {s.slug: s.tool_name for s in SERVICES} == SPEC_SERVICES
    assert len(BY_TOOL) == len(SERVICES)
    for spec in SERVICES:
        assert "/" not in spec.slug  # one path segment: /api/l402/{slug}


def test_async_services_are_jobs_of_the_spec_types() -> None:
    jobs = {s.slug: s.job_type for s in SERVICES if s.mode == "job"}
    assert jobs == SPEC_JOBS
    assert set(jobs.values()) <= set(JOB_TYPES)


def test_models_exist_in_the_catalog() -> None:
    for spec in SERVICES:
        for model_id in spec.model_ids:
            assert model_id in MODELS_BY_ID, (spec.slug, model_id)


def test_schemas_forbid_unknown_fields_and_document_every_field() -> None:
    for spec in SERVICES:
        schema = spec.params.model_json_schema()
        json.dumps(schema)  # serializable for MCP inputSchema and OpenAPI
        assert schema.get("additionalProperties") is False, spec.slug
        assert schema["properties"], spec.slug
        assert spec.description and spec.title and spec.example, spec.slug
        assert spec.max_body_bytes >= 4096, spec.slug


def test_schema_names_use_the_spec_spelling_first() -> None:
    props = {s.slug: s.params.model_json_schema()["properties"] for s in SERVICES}
    assert "file" in props["generate-image"] and "modelId" in props["generate-image"]
    assert "phone_number" in props["send-sms"] and "phone_number" in props["ai-call"]
    assert "duration_minutes" in props["ai-call"]
    assert "phoneNumber" in props["voice-bridge-open"]
    assert "durationMinutes" in props["voice-bridge-open"]
    assert "image" in props["animate-image"] and "file" in props["transcribe-audio"]
    assert "callback_url" in props["translate-epub"] and "callback_id" in props["translate-epub"]
    assert props["translate-epub"]["callback_id"]["anyOf"][0]["maxLength"] == 128


def test_availability_follows_configured_engines() -> None:
    """A service is available exactly when its engine resolves; routing two engine names
    to a provider makes exactly their services sellable."""
    local = {s.slug for s in SERVICES if s.is_available(engines_for(Settings()))}
    configured = engines_for(Settings(**down_engines(["sms", "tts"])))
    now = {s.slug for s in SERVICES if s.is_available(configured)} - local
    assert now == {"send-sms", "text-to-speech"} - local
    assert configured.status("sms").available and configured.status("sms").providers == ("down",)


# -- routing -----------------------------------------------------------------------------------


def test_select_model_defaults_tiers_and_pins() -> None:
    allowed = (16, 8, 2)
    assert routing.select_model(None, None, allowed=allowed, default=16) == 16
    assert routing.select_model("better", None, allowed=allowed, default=16) == 8
    assert routing.select_model(None, "standard", allowed=allowed, default=16) == 2
    assert routing.select_model("2", "best", allowed=allowed, default=16) == 2  # pin wins
    assert routing.select_model(8, None, allowed=allowed, default=16) == 8
    with pytest.raises(ValueError, match="not a model"):
        routing.select_model(6, None, allowed=allowed, default=16)
    with pytest.raises(ValueError, match="tier"):
        routing.select_model(None, "premium", allowed=allowed, default=16)


def test_auto_routing_heuristics() -> None:
    assert routing.auto_text_model("hi", has_image=False, has_file_context=False) == 31
    assert routing.auto_text_model("hi", has_image=True, has_file_context=False) == 6
    assert routing.auto_text_model("x" * 4001, has_image=False, has_file_context=False) == 6
    assert routing.auto_text_model("a? b? c?", has_image=False, has_file_context=False) == 6
    assert routing.auto_text_model("```py\nx\n```", has_image=False, has_file_context=False) == 6
    assert routing.auto_image_model("a dog", references=0, max_side=1024) == 2
    assert routing.auto_image_model("a dog", references=3, max_side=1024) == 8
    assert routing.auto_image_model("a dog", references=0, max_side=2048) == 8
    assert routing.auto_image_model("logo for a bakery", references=0, max_side=512) == 16


def test_routed_result_sets_header_and_body() -> None:
    result = routing.routed_result(ServiceResult({"image_url": "u"}), 2)
    assert result.headers["X-Route-Model"] == "2"
    assert isinstance(result.body, dict)
    assert result.body["routed"] == {"modelId": 2, "error_code": "L402_AUTO_ROUTED"}
    text = routing.routed_result(ServiceResult("plain answer"), 31)
    assert text.body == "plain answer" and text.headers["X-Route-Model"] == "31"


def test_apply_path_model_body_field_wins() -> None:
    assert routing.apply_path_model({"prompt": "x"}, "8") == {"prompt": "x", "modelId": 8}
    assert routing.apply_path_model({"prompt": "x"}, "better") == {
        "prompt": "x",
        "modelId": "better",
    }
    assert routing.apply_path_model({"prompt": "x"}, "auto") == {"prompt": "x", "model": "auto"}
    body = {"prompt": "x", "tier": "standard"}
    assert routing.apply_path_model(body, "16") == body
    assert routing.apply_path_model({"modelId": 2}, "16") == {"modelId": 2}


# -- BTC-pegged rates ---------------------------------------------------------------------------


@pytest.fixture
async def price_source() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A loopback BTC price endpoint whose answer a test sets."""
    state: dict[str, Any] = {"status": 200, "body": {"bitcoin": {"usd": 50_000}}}

    async def price(_request: web.Request) -> web.Response:
        return web.json_response(state["body"], status=state["status"])

    app = web.Application()
    app.router.add_get("/price", price)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/price", state
    await runner.cleanup()


async def test_refresh_rates_requotes_pegged_prices(
    price_source: tuple[str, dict[str, Any]],
) -> None:
    url, state = price_source
    settings = Settings(engines={"price_source": url})
    book = rates.Rates()  # one app's rate book; another app's is untouched
    other = rates.Rates()
    async with httpx.AsyncClient() as http:
        assert pricing.tts_msat(book.book, 33, 1600) == 100_000  # fallback: 16 chars/sat
        assert await book.refresh(http, settings) is True
        # BTC at half the reference: fiat-cost prices double in sats ...
        assert book.book.factor == 2.0
        assert pricing.sms_msat(book.book, "+14155550123") == 30_000
        assert pricing.tts_msat(book.book, 33, 1600) == 200_000
        assert other.book == rates.FALLBACK  # no snapshot, the built-in table
        # ... a later rise lowers them at once; a fall waits while an older quote is kept.
        state["body"] = {"USD": 200_000}
        assert await book.refresh(http, settings) is True
        assert book.book.factor == 0.5
        assert pricing.ai_call_msat(book.book, "+14155550123", 1) == 75_000
        state["body"] = {"data": {"amount": "400000"}}
        assert await book.refresh(http, settings) is True
        assert pricing.ai_call_msat(book.book, "+14155550123", 1) == 50_000  # 37.5 -> min 50
        # Failures keep the current book.
        before = book.book
        state["status"] = 500
        assert await book.refresh(http, settings) is False
        state["status"], state["body"] = 200, {"USD": 3}  # implausible
        assert await book.refresh(http, settings) is False
        state["body"] = {"unrelated": True}
        assert await book.refresh(http, settings) is False
        assert book.book is before
        # No source configured: nothing happens.
        assert await book.refresh(http, Settings()) is False


async def test_refresh_rates_tolerates_an_unreachable_source() -> None:
    settings = Settings(engines={"price_source": {"url": "http://127.0.0.1:9/p", "path": "x"}})
    book = rates.Rates()
    async with httpx.AsyncClient() as http:
        assert await book.refresh(http, settings) is False
    assert book.book.factor == 1.0


def test_parse_price_with_a_path() -> None:
    assert rates.parse_price({"a": {"b": {"last": "97,000.5"}}}, "a.b") == 97_000.5
    with pytest.raises(ValueError):
        rates.parse_price({"a": 1}, "a.b")


# -- data tables -----------------------------------------------------------------------------------


def test_language_tables() -> None:
    assert len(languages.TRANSLATION_LANGUAGES) == 119
    assert list(languages.TRANSCRIPTION_LANGUAGES) == [
        "en",
        "zh",
        "hi",
        "es",
        "ar",
        "fr",
        "pt",
        "ru",
        "de",
        "ja",
        "ko",
        "it",
        "nl",
    ]
    assert set(languages.TRANSCRIPTION_LANGUAGES) <= set(languages.TRANSLATION_LANGUAGES)
    assert languages.resolve_translation_language("Filipino") == "tl"
    assert languages.resolve_translation_language("zh-Hant-TW") == "zh"
    assert languages.resolve_translation_language("iw") == "he"
    assert languages.resolve_rare_language("Quechua") == "qu"
    assert languages.resolve_rare_language("nav") == "nav"
    assert len(languages.RARE_LANGUAGES) == 452
    for bad in ("", "xx", "Klingon"):
        with pytest.raises(languages.UnknownLanguage):
            languages.resolve_translation_language(bad)


def test_destinations_longest_prefix_wins() -> None:
    table = telephony.BUILTIN
    assert table.destination("+18765551234").country == "JM"
    assert table.destination("+14155550123").country == "US"
    assert table.destination("+4915112345678").country == "DE"
    with pytest.raises(telephony.NoRoute):
        table.destination("+99912345678")
    with pytest.raises(ValueError):
        table.destination("+1 415 555 0123")


def test_voice_sets_are_disjoint_and_locales_complete() -> None:
    premium, studio = voices.TTS_VOICES["premium"], voices.TTS_VOICES["studio"]
    assert premium and studio and not premium & studio and not voices.TTS_VOICES["global"]
    assert len(voices.AI_CALL_LOCALES) == 64 and len(voices.AI_CALL_VOICES) == 9
    assert voices.check_voice_description("Female,  british accent") == "female, british"


# -- votes -----------------------------------------------------------------------------------------


async def test_votes_are_counted_once_per_call_and_listed_most_voted_first(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "db.sqlite3")
    await store.open()
    try:
        assert (await planned.vote_counts(store.votes))["send-letter"] == 0
        assert await planned.record_vote(store.votes, "send-letter", "pay_1") == 1
        assert await planned.record_vote(store.votes, "send-letter", "pay_1") == 1  # retried
        assert await planned.record_vote(store.votes, "send-letter", "pay_2") == 2
        assert await planned.record_vote(store.votes, "voice-changer", "pay_3") == 1
        listed = await planned.planned_services(store.votes)
        assert [e["slug"] for e in listed[:2]] == ["send-letter", "voice-changer"]
        assert listed[0]["votes"] == 2 and set(listed[0]) == {
            "slug",
            "name",
            "description",
            "votes",
        }
        assert len(listed) == len(planned.PLANNED)
    finally:
        await store.close()


def test_languages_document_prices_each_language_by_its_engine() -> None:
    doc = pricing.languages_document()
    by_code = {entry["code"]: entry for entry in doc["languages"]}
    assert len(by_code) == 119
    assert by_code["es"]["engine"] == "standard" and by_code["es"]["satsPer1000Chars"] == 1
    assert by_code["haw"]["engine"] == "routed" and by_code["haw"]["satsPer1000Chars"] == 10
    assert by_code["de"]["transcription"] and not by_code["sw"]["transcription"]
    # No chrF is measured yet, so no rare language is good or fair (tests/domain/test_languages.py).
    assert {e["quality"] for e in doc["rare"]} == {"unverified", "experimental"}
    json.dumps(doc)


def test_descriptions_state_no_flat_price() -> None:
    """A flat price is stated once, on its spec: every published description is followed by
    the price text made from it (discovery, OpenAPI, llms.txt, MCP), never a copy."""
    for spec in SERVICES:
        if isinstance(spec.price_msat, FlatPrice):
            assert not re.search(r"\d+ sats?\b", spec.description), spec.slug


async def test_precheck_memo_keeps_each_outcome_once_and_is_bounded() -> None:
    memo = PrecheckMemo(size=2)
    runs: list[str] = []

    async def check(key: str) -> str | None:
        runs.append(key)
        return None if key == "fits" else f"{key} does not fit"

    for key in ("fits", "long", "fits", "long"):
        assert await memo.outcome(key, lambda k=key: check(k)) == (  # type: ignore[misc]
            None if key == "fits" else "long does not fit"
        )
    assert runs == ["fits", "long"] and len(memo) == 2  # each checked once
    await memo.outcome("third", lambda: check("third"))
    assert len(memo) == 2  # bounded: the least recently used ("fits") went
    await memo.outcome("fits", lambda: check("fits"))
    assert runs == ["fits", "long", "third", "fits"]
    assert len(PrecheckMemo()) == 0  # another app's memo shares nothing
