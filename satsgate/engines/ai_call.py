"""AI phone calls: the capability the ``ai_call`` engine name serves (the ai-call service).

A voice-agent platform places an outbound call whose agent follows a prompt, and reports
the call: its state, how it ended, how long it was connected, the transcript and the
platform's analysis. Implemented by the ``retell`` and ``vapi`` provider kinds
(``engines/providers/retell.py``, ``vapi.py``); the service
(satsgate/services/comms/ai_call_runner.py) bills, redials and refunds on what
:class:`AiCallReport` says, in the platform's words normalised here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# Where a call is: placed and not yet answered, connected, or over.
CallState = Literal["queued", "ringing", "in_progress", "ended"]

# How an ended call ended, in the spec's terms (the Limits table's redial rules):
# - completed: connected and ended by either side (the person or the agent hung up);
# - no_answer / busy: never connected;
# - voicemail: a voicemail answered and the agent hung up without a message;
# - voicemail_left: a voicemail answered and the agent left its one message;
# - failed: the platform could not place or carry the call (a dial failure, an invalid
#   number, a platform error).
Outcome = Literal["completed", "no_answer", "busy", "voicemail", "voicemail_left", "failed"]


@dataclass(frozen=True)
class Turn:
    role: Literal["agent", "person"]
    text: str


@dataclass(frozen=True)
class AiCallRequest:
    to_number: str  # E.164
    prompt: str  # the agent's whole instructions (the task and the rules it keeps)
    begin_message: str  # the agent's opening line
    language: str  # a locale of the AI-call list (en-US, ..., multi)
    voice: str | None  # one of the spec's voice names, or None for the agent's own
    voicemail_message: str | None  # the one message to leave on a voicemail; None: hang up
    max_duration_s: int  # the deposit's minutes (what is left of them on a redial)
    reference: str  # satsgate's call id and attempt, stored with the platform's call


@dataclass(frozen=True)
class AiCallReport:
    """One platform call as the platform reports it, normalised."""

    provider_call_id: str
    state: CallState
    outcome: Outcome | None = None  # set once ended
    ended_reason: str = ""  # the platform's own reason (operator-facing, logs)
    connected_s: float = 0.0  # how long the call was connected (0 if it never was)
    turns: tuple[Turn, ...] = ()
    transcript: str | None = None
    summary: str | None = None
    successful: bool | None = None
    data: Mapping[str, Any] = field(default_factory=dict)  # the platform's structured results
    # The platform's analysis (summary, success) is in: some send it after the end.
    analysed: bool = True

    @property
    def ended(self) -> bool:
        return self.state == "ended"

    @property
    def person_spoke(self) -> bool:
        return any(t.role == "person" and t.text.strip() for t in self.turns)

    def person_text(self) -> str:
        return "\n".join(t.text for t in self.turns if t.role == "person")


class AiCallEngine(Protocol):
    async def place_call(self, request: AiCallRequest) -> AiCallReport:
        """Place the call; the platform's call as created. EngineError when it could not
        be placed (``may_fall_back`` only when the platform surely placed nothing)."""
        ...

    async def get_call(self, provider_call_id: str) -> AiCallReport:
        """The call now. EngineError when the platform cannot be asked (transient)."""
        ...

    def on_update(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(provider_call_id)`` whenever a verified webhook says that call
        moved (the listener then asks :meth:`get_call`)."""
        ...
