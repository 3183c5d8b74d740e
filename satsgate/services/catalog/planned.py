"""Roadmap voting: the planned services and the paid ``vote`` service.

Votes live in the store's votes repository (``satsgate.store.votes``), reached
through the handler's context. One row per paid call, keyed by the call id
(the payment id), so a vote is counted once however often its handler is
retried. ``GET /api/l402/vote`` and ``list_planned_services`` use
:func:`planned_services`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

from pydantic import Field, field_validator

from satsgate.errors import ErrorCode
from satsgate.services.base import FlatPrice, ServiceContext, ServiceResult, ServiceSpec, Votes
from satsgate.services.inputs.params import ServiceParams


@dataclass(frozen=True)
class PlannedService:
    slug: str
    name: str
    description: str


PLANNED: Final[tuple[PlannedService, ...]] = (
    PlannedService("generate-podcast", "Podcast generation",
                   "A two-voice podcast episode from a document, URL or topic."),
    PlannedService("separate-stems", "Stem separation",
                   "Split a song into vocals, drums, bass and other stems."),
    PlannedService("subtitle-video", "Video subtitles",
                   "Subtitles (SRT, VTT or burned in) for a video, in 119 languages."),
    PlannedService("summarize-video", "Video summary",
                   "Summary, chapters and key frames of a video file."),
    PlannedService("translate-document", "Layout-preserving document translation",
                   "Translate a PDF or DOCX keeping its layout."),
    PlannedService("ocr-handwriting", "Handwriting recognition",
                   "Handwritten notes and forms to text."),
    PlannedService("voice-changer", "Voice changer",
                   "Speech-to-speech conversion into another voice, keeping the timing."),
    PlannedService("send-letter", "Postal letter",
                   "Print and post a physical letter from a PDF."),
)  # fmt: skip
PLANNED_BY_SLUG: Final[dict[str, PlannedService]] = {p.slug: p for p in PLANNED}


class VoteCounts(Protocol):
    """Where the votes are counted (the store's votes repository)."""

    async def counts(self) -> dict[str, int]:
        """Votes per slug, for every slug voted for."""
        ...


async def record_vote(votes: Votes, slug: str, call_id: str) -> int:
    """Count one vote for ``slug`` (once per ``call_id``); returns the slug's total."""
    return await votes.record(slug, call_id)


async def vote_counts(votes: VoteCounts) -> dict[str, int]:
    """Votes per planned slug (zero for a slug nobody voted for)."""
    counted = await votes.counts()
    return {p.slug: counted.get(p.slug, 0) for p in PLANNED}


async def planned_services(votes: VoteCounts) -> list[dict[str, Any]]:
    """``{slug, name, description, votes}`` for every planned service, most voted first."""
    counts = await vote_counts(votes)
    entries = [
        {"slug": p.slug, "name": p.name, "description": p.description, "votes": counts[p.slug]}
        for p in PLANNED
    ]
    return sorted(entries, key=lambda e: (-int(e["votes"]), str(e["slug"])))


class VoteParams(ServiceParams):
    slug: str = Field(description="Slug of a planned service (GET /api/l402/vote lists them).")

    @field_validator("slug")
    @classmethod
    def _planned(cls, value: str) -> str:
        if value not in PLANNED_BY_SLUG:
            raise ValueError(
                f"{value!r} is not a planned service; vote for one of " + ", ".join(PLANNED_BY_SLUG)
            )
        return value


async def vote(ctx: ServiceContext, params: VoteParams) -> ServiceResult:
    votes = await record_vote(ctx.votes, params.slug, ctx.call_id)
    return ServiceResult({"success": True, "slug": params.slug, "votes": votes})


VOTE = ServiceSpec(
    slug="vote",
    tool_name="vote_on_service",
    category="utility",
    title="Vote on a planned service",
    description="Vote for a planned service on the roadmap: { success, slug, votes }.",
    params=VoteParams,
    price_msat=FlatPrice.of_sats(1),  # no estimator quotes it
    handler=vote,
    failure_codes=(ErrorCode.L402_INVALID_PARAMS,),
    max_body_bytes=4 * 1024,
    example={"slug": "generate-podcast"},
)

SERVICES: tuple[ServiceSpec[Any], ...] = (VOTE,)
