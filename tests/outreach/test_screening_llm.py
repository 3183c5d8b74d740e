"""The optional LLM check of the screen (``[screening] llm = true``) through the gate: the
model can add a flag the rules did not raise; a failed check passes (the rules stand) or
holds, as ``llm_on_error`` says; the text reaches the model fenced as untrusted content."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiosmtpd.controller import Controller

from tests.conftest import ThreadedServer, free_port, http_client, make_settings
from tests.outreach.test_holds import Mailbox, mail, paid_call
from tests.store_access import store_rows

KEY = "sk-test-judge-3c1f"


@dataclass
class Judge:
    """An OpenAI-compatible chat API that judges as scripted by the message: "gift of the
    month" is flagged as a scam, "breakdown" answers 500, "chatty" answers prose."""

    port: int = field(default_factory=free_port)
    prompts: list[dict[str, Any]] = field(default_factory=list)

    async def chat(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"Bearer {KEY}"
        body = await request.json()
        self.prompts.append(body)
        text = body["messages"][-1]["content"]
        if "breakdown" in text:
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        verdict = {"flag": "gift of the month" in text, "categories": ["scam"]}
        content = "Sure! It looks fine." if "chatty" in text else json.dumps(verdict)
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    fake = Judge()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.chat)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", fake.port).start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    yield fake
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@pytest.fixture(scope="module")
def mailbox() -> Iterator[Mailbox]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    box.port = port  # type: ignore[attr-defined]
    yield box
    controller.stop()


def node(tmp: Any, judge: Judge, mailbox: Mailbox, on_error: str) -> ThreadedServer:
    settings = make_settings(
        tmp,
        providers={
            "mail": {
                "kind": "smtp",
                "host": "127.0.0.1",
                "port": mailbox.port,  # type: ignore[attr-defined]
                "from_address": "node@example.com",
                "starttls": False,
            },
            "judge": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{judge.port}/v1",
                "api_key": KEY,
                "timeout_s": 5,
                "models": {"31": "judge-mini"},
            },
        },
        engines={"email": "mail", "text": "judge"},
        screening={"llm": True, "llm_on_error": on_error},
    )
    return ThreadedServer(settings)


@pytest.fixture(scope="module")
def passing(
    tmp_path_factory: pytest.TempPathFactory, judge: Judge, mailbox: Mailbox
) -> Iterator[ThreadedServer]:
    srv = node(tmp_path_factory.mktemp("llm-pass"), judge, mailbox, "pass")
    yield srv
    srv.stop()


@pytest.fixture
async def client(passing: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(passing):
        yield c


def last_record(srv: ThreadedServer) -> tuple[str, str, str]:
    row = store_rows(
        srv.settings, "SELECT verdict, reasons, llm FROM screenings ORDER BY id DESC LIMIT 1"
    )[0]
    return str(row[0]), str(row[1]), str(row[2])


async def test_the_model_adds_a_flag_the_rules_did_not_raise(
    client: httpx.AsyncClient, passing: ThreadedServer, judge: Judge, mailbox: Mailbox
) -> None:
    text = "Claim the gift of the month: reply with the word YES to get it."
    before = len(mailbox.received)
    resp, _ = await paid_call(client, mail("judge@example.org", text, "Hello"))
    assert resp.status_code == 451, resp.text
    assert resp.json()["error_code"] == "CONTENT_POLICY_HELD"
    assert len(mailbox.received) == before
    assert last_record(passing) == ("held", '["llm:scam"]', "flagged")
    prompt = judge.prompts[-1]
    assert prompt["model"] == "judge-mini"
    user = prompt["messages"][-1]["content"]
    assert "<untrusted-content>\nHello\n" + text in user and user.endswith("</untrusted-content>")


async def test_an_ordinary_message_passes_the_model(
    client: httpx.AsyncClient, passing: ThreadedServer, mailbox: Mailbox
) -> None:
    resp, _ = await paid_call(
        client, mail("fine@example.org", "Your table is booked for 7pm.", "Hi")
    )
    assert resp.status_code == 200, resp.text
    assert last_record(passing) == ("passed", "[]", "passed")


@pytest.mark.parametrize("trouble", ["breakdown", "chatty"])
async def test_a_failed_check_leaves_the_rules_verdict_when_on_error_is_pass(
    client: httpx.AsyncClient, passing: ThreadedServer, mailbox: Mailbox, trouble: str
) -> None:
    resp, _ = await paid_call(client, mail("err@example.org", f"See you at 7 ({trouble}).", "Hi"))
    assert resp.status_code == 200, resp.text
    assert last_record(passing) == ("passed", "[]", "error")
    # The rules still hold what they flag, whatever the model says.
    resp, _ = await paid_call(
        client, mail("err@example.org", f"Send me your password now ({trouble}).", "Hi")
    )
    assert resp.status_code == 451
    assert last_record(passing) == ("held", '["credential:code"]', "skipped")


async def test_a_failed_check_holds_when_on_error_is_hold(
    tmp_path_factory: pytest.TempPathFactory, judge: Judge, mailbox: Mailbox
) -> None:
    srv = node(tmp_path_factory.mktemp("llm-hold"), judge, mailbox, "hold")
    try:
        async for c in http_client(srv):
            resp, _ = await paid_call(
                c, mail("hold@example.org", "See you at 7 (breakdown).", "Hi")
            )
            assert resp.status_code == 451, resp.text
        assert last_record(srv) == ("held", '["llm:unavailable"]', "error")
    finally:
        srv.stop()
