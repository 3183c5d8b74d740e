"""AI-call sessions and records: the free confirmation and the free poll of an AI call.

The AI-call runner (satsgate/services/comms/ai_call_runner.py, on the ``ai_call`` engine: the
``retell`` and ``vapi`` provider kinds) places the call and creates what this module
looks up:

- a call waiting in ``pending_confirm`` under a ``session_id``, when the task
  lacked critical information (the answer carried clarification questions);
- the call record under its ``call_id``: status, transcript, results, refund status.

:class:`AiCallRecords` is the seam that engine implements. Its records must
outlive a restart and a confirmation must happen once (a conditional UPDATE
``pending_confirm -> placing``): the runner keeps them in the store (``ai_calls``).
Outside an app :func:`records_for` answers from :data:`NO_RECORDS`: every lookup finds
nothing.

Both faces use satsgate.operations.comms's :func:`ai_call_confirm` and :func:`ai_call_poll`
on these records: ``POST /api/l402/ai-call``
with ``{action: 'confirm', ...}`` and ``GET /api/l402/ai-call?call_id=`` over
HTTP, ``confirm_ai_call`` over MCP. Both are free: a confirmation rides on the
call's original payment, and polling costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol
from urllib.parse import quote

from pydantic import Field, StringConstraints

POLL_PATH = "/api/l402/ai-call"

# Answers to a pending_confirm call's clarification questions: short scalars by question.
AiCallAnswer = (
    Annotated[str, StringConstraints(max_length=1000)]
    | bool
    | Annotated[int, Field(ge=-(10**15), le=10**15)]
    | Annotated[float, Field(allow_inf_nan=False)]
)
AiCallAnswers = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1, max_length=100)], AiCallAnswer],
    Field(max_length=50),
]


@dataclass(frozen=True)
class AiCallRecord:
    """One AI call as the telephony engine reports it; ``status`` includes ``pending_confirm``."""

    call_id: str
    status: str
    questions: tuple[str, ...] = ()  # clarification questions while pending_confirm
    transcript: str | None = None
    results: Mapping[str, Any] | None = None
    refund_status: str | None = None
    # More of the call (session_id while pending_confirm, redial_at, ...), as they are.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def carries_words(self) -> bool:
        """The record carries text from outside satsgate: the far end's words (transcript),
        the platform's analysis of them (results' summary and data), or questions made
        from the caller's task (by the text engine when one is configured). Outcomes,
        minutes and sats are satsgate's own."""
        analysis = self.results or {}
        return (
            bool(self.questions)
            or bool(self.transcript)
            or any(analysis.get(key) for key in ("summary", "data"))
        )

    def body(self, base_url: str) -> dict[str, Any]:
        """The spec's ``{ success, call_id, status, poll_url }`` plus what polling returns;
        ``untrusted_output: true`` when it carries text from outside (:attr:`carries_words`)."""
        body: dict[str, Any] = {
            "success": True,
            "call_id": self.call_id,
            "status": self.status,
            "poll_url": poll_url(base_url, self.call_id),
        }
        if self.questions:
            body["questions"] = list(self.questions)
        if self.transcript is not None:
            body["transcript"] = self.transcript
        if self.results is not None:
            body["results"] = dict(self.results)
        if self.refund_status is not None:
            body["refund_status"] = self.refund_status
        body.update({k: v for k, v in self.extra.items() if v is not None and k not in body})
        if self.carries_words:
            body["untrusted_output"] = True
        return body


class AiCallRecords(Protocol):
    """Where AI calls live; the telephony engine creates them and implements this."""

    async def record(self, call_id: str) -> AiCallRecord | None:
        """The call placed under ``call_id``, or None if there is none."""
        ...

    async def confirm(
        self, session_id: str, answers: Mapping[str, AiCallAnswer]
    ) -> AiCallRecord | None:
        """Let the call waiting in ``pending_confirm`` under ``session_id`` proceed with
        ``answers``, at most once; None if no call waits for confirmation under it."""
        ...


class _NoRecords:
    """The records of a node without a telephony engine: no AI call can exist."""

    async def record(self, call_id: str) -> AiCallRecord | None:
        return None

    async def confirm(
        self, session_id: str, answers: Mapping[str, AiCallAnswer]
    ) -> AiCallRecord | None:
        return None


NO_RECORDS: AiCallRecords = _NoRecords()


def records_for(records: AiCallRecords | None) -> AiCallRecords:
    """This node's AI-call records (the app's AiCallRunner), or none outside an app."""
    return NO_RECORDS if records is None else records


def poll_url(base_url: str, call_id: str) -> str:
    return f"{base_url}{POLL_PATH}?call_id={quote(call_id, safe='')}"
