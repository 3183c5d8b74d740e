"""An AI call's agent prompt and its clarification questions (pending_confirm): the fixed
rules, and the chat engine's questions when the node has a text engine (a stand-in for
the remote model here), with the rules deciding when the model fails or answers junk."""

from __future__ import annotations

from typing import Any

import pytest

from satsgate.config.settings import Settings
from satsgate.engines import EngineError
from satsgate.engines.chat import ChatRequest, ChatResult
from satsgate.engines.registry import Binding, Engines, EngineStatus
from satsgate.errors import ErrorCode
from satsgate.services.base import ServiceContext
from satsgate.services.comms import ai_call_prompt


@pytest.mark.parametrize(
    ("task", "extra", "questions"),
    [
        ("Ask whether the pharmacy is open on Sunday.", {}, []),
        ("Book a table for two at 7pm under the name Ann.", {}, []),
        (
            "Book a table at Luigi's.",
            {},
            [
                "For what date and time?",
                "For how many people?",
                "Under what name should it be booked?",
            ],
        ),
        ("Book a haircut appointment tomorrow at 10am.", {"caller_name": "Bo"}, []),
        ("Book a haircut appointment.", {"caller_name": "Bo"}, ["For what date and time?"]),
        ("Ask them to call me back about the invoice.", {}, ["What number should they call back?"]),
        ("Ask them to call me back about the invoice.", {"callback_number": "+14155550100"}, []),
        ("Call.", {}, ["What exactly should the agent find out or get done on this call?"]),
    ],
)
def test_rule_questions(task: str, extra: dict[str, Any], questions: list[str]) -> None:
    assert ai_call_prompt.rule_questions({"task": task, **extra}) == questions


def test_prompt_follows_the_spec_rules() -> None:
    request = {
        "task": "Ask for the opening hours.",
        "caller_name": "Ann",
        "reason": "opening hours",
        "callback_number": "+14155550100",
        "voicemail": "hangup",
        "call_screening": False,
        "language": "de-DE",
    }
    prompt = ai_call_prompt.build_prompt(request, {"Which branch?": "Main street"})
    assert "Speak German (de-DE)" in prompt
    assert "automated assistant" in prompt and "cannot transfer the call" in prompt
    assert "+14155550100" in prompt and "only when you are asked" in prompt
    assert "end the call without answering it" in prompt  # call screening off
    assert "without leaving a message" in prompt
    assert "not to be called again" in prompt
    assert prompt.index("<task>") < prompt.index("Ask for the opening hours.")
    assert "- Which branch?: Main street" in prompt
    assert ai_call_prompt.begin_message(request) == (
        "Hello, I'm calling on behalf of Ann about opening hours."
    )
    assert ai_call_prompt.voicemail_message(request) is None
    message = ai_call_prompt.voicemail_message({**request, "voicemail": "message"})
    assert message is not None and "Ann" in message and "+ 1 4 1 5" in message
    assert ai_call_prompt.begin_message({**request, "begin_message": "Hi!"}) == "Hi!"


class _Model:
    """Stands in for a remote chat model (the text engine's upstream)."""

    def __init__(self, answer: str | Exception) -> None:
        self.answer = answer
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return ChatResult(self.answer)


def _context(model: _Model | None) -> ServiceContext:
    bindings = {} if model is None else {"text": (Binding(model, "provider", "model"),)}
    engines = Engines(bindings, {"text": EngineStatus("text", model is not None)})
    none: Any = None
    return ServiceContext(
        call_id="pay_1",
        settings=Settings(),
        files=none,
        http=none,
        cpu=none,
        votes=none,
        engines=engines,
        progress=lambda _p, _m: None,
    )


TABLE = {"task": "Book a table at Luigi's.", "caller_name": "Ann"}


async def test_the_chat_engine_asks_when_the_node_has_one() -> None:
    model = _Model('Sure: {"questions": ["Which day?", "How many guests?"]}')
    questions = await ai_call_prompt.clarification_questions(_context(model), TABLE)
    assert questions == ["Which day?", "How many guests?"]
    sent = model.requests[0]
    assert sent.system is not None and "JSON" in sent.system
    assert "Luigi" in sent.messages[0].content


async def test_the_chat_engine_may_find_nothing_missing() -> None:
    model = _Model('{"questions": []}')
    assert await ai_call_prompt.clarification_questions(_context(model), TABLE) == []


@pytest.mark.parametrize(
    "answer",
    ["no json here", '{"questions": "Which day?"}', EngineError(ErrorCode.TIMEOUT, "slow")],
)
async def test_the_rules_decide_when_the_chat_engine_fails(answer: str | Exception) -> None:
    questions = await ai_call_prompt.clarification_questions(_context(_Model(answer)), TABLE)
    assert questions == ["For what date and time?", "For how many people?"]


async def test_the_rules_decide_without_a_chat_engine() -> None:
    questions = await ai_call_prompt.clarification_questions(_context(None), TABLE)
    assert questions == ["For what date and time?", "For how many people?"]
