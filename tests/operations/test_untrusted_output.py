"""Every answer that carries text from outside satsgate says ``untrusted_output: true``.

One table over the whole catalog: each paid service and each free operation is listed
once, with whether its answers carry text from outside (the caller's content worked on by
a model, a document's text, the far end of a call, a search result) and why. A service or
operation added to the registry without a line here fails, so the question is asked every
time. The declarations are checked against the table; the answers themselves are checked
live where they are served (test_ai_calls: the AI-call poll and confirmation;
test_voice_bridge_calls: poll and end over HTTP; test_ai_openai: a job's poll;
test_callbacks: a job's callback; test_predictions: detect-objects)."""

from __future__ import annotations

from typing import Any

import pytest

from satsgate.operations.answers import AiCallRecord, JobStatusBody
from satsgate.operations.base import AnyOperation
from satsgate.operations.comms import POLL_AI_CALL
from satsgate.operations.registry import OPERATIONS
from satsgate.services.comms.ai_calls import AiCallRecord as CallRecord
from satsgate.services.registry import SERVICES

# Paid services: True when their answer carries text from outside satsgate.
SERVICE_TEXT: dict[str, tuple[bool, str]] = {
    "render-card": (False, "an image satsgate rendered"),
    "html-to-pdf": (False, "a file link"),
    "merge-pdf": (False, "a file link"),
    "extract-document": (True, "the document's text"),
    "extract-receipt": (True, "the receipt's text"),
    "convert-file": (False, "a file (link and base64), no text field"),
    "e-signature": (False, "satsgate's request record"),
    "boardingpass-wallet": (False, "pass files"),
    "generate-image": (False, "an image link and its size"),
    "edit-image": (False, "an image link"),
    "analyze-image": (True, "the model's description of the image"),
    "remove-background": (False, "an image link"),
    "upscale-image": (False, "an image link"),
    "restore-face": (False, "an image link"),
    "detect-nsfw": (False, "a fixed label and scores"),
    "detect-objects": (True, "labels: the model's words for what the prompt named"),
    "remove-object": (False, "an image link"),
    "colorize-image": (False, "an image link"),
    "deblur-image": (False, "an image link"),
    "estimate-depth": (False, "image links"),
    "generate-3d-model": (False, "a model file link"),
    "generate-text": (True, "generated text"),
    "multilingual-ask": (True, "generated text"),
    "translate-text": (True, "the translation of the caller's text"),
    "translate-rare-language": (True, "the translation of the caller's text"),
    "translate-epub": (False, "a book file link"),
    "search": (True, "titles and snippets of fetched pages"),
    "text-to-speech": (False, "an audio link"),
    "clone-voice": (False, "a voice id and satsgate's message"),
    "transcribe-audio": (True, "the transcript"),
    "transcribe-translate": (True, "the transcript and its translation"),
    "epub-audiobook": (False, "audio links"),
    "generate-music": (False, "an audio link"),
    "generate-video": (False, "a video link"),
    "animate-image": (False, "a video link"),
    "send-email": (False, "satsgate's delivery record"),
    "send-sms": (False, "satsgate's delivery record"),
    "call": (False, "satsgate's call record"),
    # Marked per answer: questions made from the task (the record marks itself).
    "ai-call": (False, "per answer: AiCallRecord.body marks questions and transcripts"),
    "send-fax": (False, "satsgate's fax record"),
    "receive-fax": (False, "the leased number"),
    "voice-bridge-open": (False, "the session's terms"),
    "vote": (False, "a vote count"),
}

# Free operations: "always", "per answer" (op.untrusted decides) or "never".
OPERATION_TEXT: dict[str, tuple[str, str]] = {
    "check_payment_status": ("never", "satsgate's payment record"),
    "request_refund": ("never", "a refund"),
    "decline_retry": ("never", "a refund"),
    "check_job_status": ("per answer", "a completed job of an untrusted service"),
    "get_job_result": ("per answer", "a completed job of an untrusted service"),
    "list_planned_services": ("never", "the roadmap"),
    "estimateCost": ("never", "a price"),
    "get_sms_status": ("never", "a delivery status"),
    "get_call_status": ("never", "a call status and billing"),
    "confirm_ai_call": ("per answer", "the call's questions, transcript or analysis"),
    "poll_ai_call": ("per answer", "the call's questions, transcript or analysis"),
    "claim_refund": ("never", "a refund"),
    "voice_bridge_say": ("never", "bytes sent"),
    "poll_voice_bridge": ("always", "transcript events: the far end's words"),
    "end_voice_bridge": ("always", "the final transcript"),
    "get_e_signature_status": ("never", "satsgate's signing status"),
    "get_fax_status": ("never", "a status; a failure names the provider's reason code"),
    "check_fax_inbox": ("never", "numbers (E.164) and document links"),
}


def test_every_service_and_operation_is_in_the_table() -> None:
    assert sorted(SERVICE_TEXT) == sorted(s.slug for s in SERVICES)
    assert sorted(OPERATION_TEXT) == sorted(op.name for op in OPERATIONS)


@pytest.mark.parametrize("spec", SERVICES, ids=lambda s: s.slug)
def test_a_service_declares_what_its_answers_carry(spec: Any) -> None:
    carries, why = SERVICE_TEXT[spec.slug]
    assert spec.untrusted_output is carries, why


def _blank(op: AnyOperation) -> Any:
    """A result of ``op`` with no text from outside in it (only the required fields)."""
    if op.result is JobStatusBody:
        return JobStatusBody(status="IN_PROGRESS", requestId="j", jobId="j", jobType="t")
    if op.result is AiCallRecord:
        record = CallRecord(call_id="ac_1", status="calling")
        return AiCallRecord.model_validate(record.body("https://node.example"))
    return None


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_an_operation_declares_what_its_answers_carry(op: AnyOperation) -> None:
    kind, why = OPERATION_TEXT[op.name]
    if kind == "never":
        assert op.untrusted is None, why
        return
    assert op.untrusted is not None, why
    if kind == "always":
        assert op.untrusted(object()) is True, why
    else:
        assert op.untrusted(_blank(op)) is False, why


@pytest.mark.parametrize(
    ("record", "marked"),
    [
        (CallRecord("ac_1", "calling", results={"depositSats": 450, "attempts": []}), False),
        (CallRecord("ac_1", "pending_confirm", questions=("For what date?",)), True),
        (CallRecord("ac_1", "ended", transcript="Agent: Hello.\nUser: Hi."), True),
        (CallRecord("ac_1", "ended", results={"summary": "Booked.", "data": {}}), True),
        (CallRecord("ac_1", "ended", results={"summary": None, "data": {"x": 1}}), True),
    ],
    ids=["numbers-only", "questions", "transcript", "summary", "data"],
)
def test_an_ai_call_record_is_marked_when_it_carries_words(
    record: CallRecord, marked: bool
) -> None:
    body = record.body("https://node.example")
    assert ("untrusted_output" in body) is marked
    assert (POLL_AI_CALL.untrusted is not None) and POLL_AI_CALL.untrusted(
        AiCallRecord.model_validate(body)
    ) is marked
