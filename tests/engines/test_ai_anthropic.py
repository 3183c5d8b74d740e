"""The ``anthropic`` provider kind end to end: satsgate's text, vision and translation
engines on a fake Anthropic Messages API on loopback (tests/fakes/fake_ai_upstream.py), paid
calls through the gate, failures refunded with nothing upstream shown; and a fallback
chain to an OpenAI-compatible provider when the first is overloaded."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conftest import ThreadedServer, http_client, make_settings
from tests.engines.test_ai_openai import assert_refunded, assert_refusal_window_then_decline, paid
from tests.fakes.fake_ai_upstream import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    RETRY_AFTER,
    UPSTREAM_DETAIL,
    FakeAIUpstream,
    png,
)

MODELS = {"6": "fake-claude-best", "1": "fake-claude-better", "31": "fake-claude-small",
          "5": "fake-claude-vision"}  # fmt: skip
MESSAGES = "/anthropic/v1/messages"
CHAT = "/v1/chat/completions"
TEXT_BODY = {"input": [{"role": "user", "content": "Say hi"}], "modelId": 1}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAIUpstream]:
    upstream = FakeAIUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def claude_server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream
) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("ai-anthropic"),
        providers={
            "claude": {
                "kind": "anthropic",
                "base_url": f"{fake.url}/anthropic/v1",
                "api_key": ANTHROPIC_KEY,
                "timeout_s": 2,
                "models": MODELS,
                "max_tokens": 1000,
            },
            "backup": {
                "kind": "openai",
                "base_url": f"{fake.url}/v1",
                "api_key": OPENAI_KEY,
                "models": {"1": "fake-backup-better", "31": "fake-backup-mini"},
            },
        },
        engines={"text": ["claude", "backup"], "vision": "claude", "rare_translation": "claude"},
    )
    srv = ThreadedServer(settings)
    yield srv
    srv.stop()


@pytest.fixture
async def ai(
    claude_server: ThreadedServer, fake: FakeAIUpstream
) -> AsyncIterator[httpx.AsyncClient]:
    fake.clear()
    async for c in http_client(claude_server):
        yield c


async def test_generate_text_speaks_the_messages_api(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    body = {
        "input": [
            {"role": "user", "content": "First"},
            {"role": "assistant", "content": "Ok"},
            {"role": "user", "content": "Say hi"},
        ],
        "systemPrompt": "Be kind.",
        "modelId": 1,
    }
    resp = await paid(ai, "generate-text", body)
    assert resp.status_code == 200, resp.text
    assert resp.text == "You said: Say hi [system 8 chars]"
    (seen,) = fake.requests(MESSAGES)
    key = seen.headers.get("x-api-key") or seen.headers["authorization"].removeprefix("Bearer ")
    assert key == ANTHROPIC_KEY
    assert seen.headers["anthropic-version"]
    sent = seen.json or {}
    assert sent["model"] == "fake-claude-better"
    assert sent["max_tokens"] == 1000  # the operator's default: the API requires one
    assert sent["system"] == "Be kind."
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert not fake.requests(CHAT)


async def test_analyze_image_sends_a_base64_image_block(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(ai, "analyze-image", {"imageBase64": base64.b64encode(png(12, 34)).decode()})
    assert resp.status_code == 200, resp.text
    assert resp.json()["content"] == "You said: Describe this image in detail. [image 12x34]"
    sent = fake.requests(MESSAGES)[0].json or {}
    assert sent["model"] == "fake-claude-vision"
    block = sent["messages"][0]["content"][0]
    assert block["type"] == "image" and block["source"]["media_type"] == "image/png"


async def test_multilingual_ask_and_translation(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    resp = await paid(ai, "multilingual-ask", {"question": "Hi?", "language": "German"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["answer"] == "Answer in German."
    assert (fake.requests(MESSAGES)[0].json or {})["model"] == "fake-claude-small"
    resp = await paid(ai, "translate-rare-language", {"text": "Welcome", "targetLanguage": "gsw"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["translatedText"] == "[Swiss] Welcome"
    system = (fake.requests(MESSAGES)[1].json or {})["system"]
    assert "Swiss German" in system


async def test_refusal_is_content_filtered_and_not_passed_down_the_chain(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(MESSAGES, "refusal")
    resp = await paid(ai, "generate-text", TEXT_BODY)
    await assert_refusal_window_then_decline(ai, resp, fake)
    assert not fake.requests(CHAT)


async def test_timeout_is_refunded(ai: httpx.AsyncClient, fake: FakeAIUpstream) -> None:
    fake.fail_next(MESSAGES, "slow")
    resp = await paid(ai, "analyze-image", {"imageBase64": base64.b64encode(png(8, 8)).decode()})
    body = assert_refunded(resp, "TIMEOUT", fake)
    assert body["retry_after_seconds"] == 20


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("429", "RATE_LIMITED"),
        ("500", "L402_UPSTREAM_FAILED"),
        ("529", "L402_UPSTREAM_FAILED"),
        ("malformed", "SERVICE_ERROR"),
        ("html", "SERVICE_ERROR"),
    ],
)
async def test_failures_are_refunded_with_nothing_upstream_shown(
    ai: httpx.AsyncClient, fake: FakeAIUpstream, mode: str, code: str
) -> None:
    # vision has no second provider: the failure reaches the caller.
    fake.fail_next(MESSAGES, mode, times=2)
    resp = await paid(ai, "analyze-image", {"imageBase64": base64.b64encode(png(8, 8)).decode()})
    body = assert_refunded(resp, code, fake)
    assert UPSTREAM_DETAIL not in resp.text and ANTHROPIC_KEY not in resp.text
    assert "claude" not in resp.text.lower() and "anthropic" not in resp.text.lower()
    if mode in ("429", "529"):  # the upstream's hint, else 10 s
        hint = RETRY_AFTER if mode == "429" else "10"
        assert body["retry_after_seconds"] == int(hint)
        assert resp.headers["Retry-After"] == hint
    # 500 is retried once (a read-only request); nothing else is.
    assert len(fake.requests(MESSAGES)) == (2 if mode == "500" else 1)


async def test_overloaded_first_provider_falls_back_to_the_next(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    fake.fail_next(MESSAGES, "529")
    resp = await paid(ai, "generate-text", TEXT_BODY)
    assert resp.status_code == 200, resp.text
    assert resp.text == "You said: Say hi"
    assert len(fake.requests(MESSAGES)) == 1
    (seen,) = fake.requests(CHAT)
    assert (seen.json or {})["model"] == "fake-backup-better"
    assert seen.headers["authorization"] == f"Bearer {OPENAI_KEY}"


async def test_a_conversation_opened_by_the_assistant_starts_with_a_user_turn(
    ai: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    body = {
        "input": [
            {"role": "assistant", "content": "How can I help?"},
            {"role": "user", "content": "Say hi"},
        ],
        "modelId": 1,
    }
    resp = await paid(ai, "generate-text", body)
    assert resp.status_code == 200, resp.text
    sent = fake.requests(MESSAGES)[0].json or {}
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
