"""What the hourly retention sweep deletes, and when (the spec's Data retention row).

Every engineer whose tables or files hold what reached or came from a person (message
texts, call transcripts, fax images, held-request evidence) APPENDS its rules here, one
line each. The sweep (:mod:`satsgate.outreach.retention`) runs them hourly with the
clock it is given (tests move it), so something kept ``max_age_s`` is gone at most an
hour later.

- :class:`~satsgate.store.retention.ClearColumns`: set ``columns`` to NULL on rows whose
  ``time_column`` (unix seconds) is older than ``max_age_s`` (amounts and status stay,
  for the ledger);
- :class:`~satsgate.store.retention.DeleteRows`: delete those rows;
- :class:`DeleteFiles`: delete files under ``settings.data_dir / subdir`` whose mtime is
  older than ``max_age_s`` (fax images, recordings).

A rule whose table or directory does not exist (yet) is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from satsgate.store.retention import ClearColumns, DeleteRows

HOUR = 3600
DAY = 24 * HOUR
# Recent message texts and transcript extracts used for abuse checks: deleted by the
# hourly sweep once 24 hours old, so none is kept more than 25 hours.
RECENT_TEXT_S = 24 * HOUR
# Uploaded-call transcripts and held-request or appeal evidence: 30 days.
EVIDENCE_S = 30 * DAY


@dataclass(frozen=True)
class DeleteFiles:
    subdir: str  # under settings.data_dir
    max_age_s: int
    what: str


RetentionRule = ClearColumns | DeleteRows | DeleteFiles

RULES: tuple[RetentionRule, ...] = (
    # holds: the request evidence of a resolved or expired hold, and its appeal text.
    ClearColumns(
        "held_requests",
        "created_at",
        ("params_json", "outreach_text", "appeal_note"),
        EVIDENCE_S,
        "held-request and appeal evidence",
    ),
    # holds: what a released request delivered (its result names the recipients).
    ClearColumns(
        "jobs",
        "updated_at",
        ("result_json", "error_json"),
        EVIDENCE_S,
        "held requests' results",
        match=(("job_type", "held"),),
    ),
    # holds: the do-not-contact list is kept (it is what the person asked for); so is the
    # de-identified record of screened communications (screenings).
    # -- other engineers: append your rules below, one per line --
    # twilio: delivery records keep no text or number; the provider's id (which the
    # provider links to the number in its own records) goes after 30 days.
    ClearColumns(
        "deliveries",
        "created_at",
        ("provider_ref", "error", "answered_by"),
        EVIDENCE_S,
        "provider ids of sent SMS and calls",
    ),
    # telnyx: a received fax's sender and document (the file itself goes with the file
    # store's 12-hour cleanup and satsgate.services.comms.faxes.FaxDesk.clean), 12 hours.
    ClearColumns(
        "fax_received", "received_at", ("sender", "file_name"), 12 * HOUR, "received faxes"
    ),
    # telnyx: the forwarding address of a receive-fax lease, 12 hours after it ended.
    ClearColumns(
        "fax_leases", "expires_at", ("forward_email",), 12 * HOUR, "fax forwarding addresses"
    ),
    # esign: the customer's address of a request (cleared at once when it ends; this
    # catches any left, e.g. a request stuck past the desk's 30-day watch).
    ClearColumns("esign_requests", "created_at", ("customer_email",), EVIDENCE_S, "e-sign"),
    # aicall: an AI call's task, answers, transcript and results (status and amounts stay).
    ClearColumns(
        "ai_calls",
        "updated_at",
        ("request_json", "questions_json", "answers_json", "transcript", "results_json"),
        EVIDENCE_S,
        "AI-call tasks and transcripts",
    ),
    # bridge: voice-bridge events (the called party's transcripts), 24 hours.
    DeleteRows("voice_bridge_events", "at_s", RECENT_TEXT_S, "voice-bridge transcripts"),
)
