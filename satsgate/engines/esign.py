"""Capability: have a PDF signed (e-signature). Adapters: satsgate/engines/providers/documenso.py.

The engine creates a signing request for one PDF with its signers and sends it (the
signers get the provider's e-mails with their signing links), reports the request's
state, hands over the completed signed PDF, and tells its listeners when a request
ends (the provider's verified webhook). satsgate follows the requests it sent
(satsgate.services.documents.esign_desk) and e-mails the signed copy itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

# pending: sent, not everyone has signed yet; completed: everyone signed; the others are
# final without a signed copy (a signer declined, the sender cancelled, a link expired).
EnvelopeStatus = Literal["pending", "completed", "rejected", "cancelled", "expired"]
FINAL_ENVELOPE_STATUSES: frozenset[str] = frozenset(
    {"completed", "rejected", "cancelled", "expired"}
)
SignerStatus = Literal["pending", "signed", "rejected"]


@dataclass(frozen=True)
class Signer:
    name: str
    email: str


@dataclass(frozen=True)
class SigningRequest:
    """One PDF to have signed by ``signers`` (each signs once, in any order)."""

    pdf: bytes
    pages: int  # the PDF's page count (the signature fields go on the last page)
    signers: tuple[Signer, ...]
    title: str
    message: str | None  # the caller's note, shown to the signers
    reference: str  # satsgate's request id (the provider keeps it as an external id)


@dataclass(frozen=True)
class SigningSent:
    """The request went out: the signers have been sent their links."""

    envelope_id: str  # the provider's id of the request
    source: str  # the operator's name of the provider that holds it ([providers.NAME])


@dataclass(frozen=True)
class SignerState:
    email: str
    status: SignerStatus


@dataclass(frozen=True)
class EnvelopeState:
    envelope_id: str
    status: EnvelopeStatus
    signers: tuple[SignerState, ...] = ()

    @property
    def signed(self) -> int:
        return sum(1 for s in self.signers if s.status == "signed")


@dataclass(frozen=True)
class EnvelopeEvent:
    """What a genuine webhook reported: the request ``envelope_id`` of provider ``source``
    reached ``status``."""

    source: str
    envelope_id: str
    status: EnvelopeStatus


EventListener = Callable[[EnvelopeEvent], Awaitable[None]]


class ESignEngine(Protocol):
    # The operator's name of the provider ([providers.NAME]): where a request lives.
    source: str
    # How often a pending request is looked at when no webhook came (seconds).
    poll_interval_s: float

    async def send_for_signature(self, request: SigningRequest) -> SigningSent:
        """Create the request and send it to the signers. EngineError on failure; once
        the signers may have been sent their links, the error has ``may_fall_back=False``
        and the request was withdrawn where it could be."""
        ...

    async def envelope(self, envelope_id: str) -> EnvelopeState:
        """The request's state now; EngineError on failure."""
        ...

    async def signed_pdf(self, envelope_id: str, max_bytes: int) -> bytes:
        """The completed, signed PDF; EngineError on failure (or when larger)."""
        ...

    def on_event(self, listener: EventListener) -> None:
        """Call ``listener`` for each request end a verified webhook reports."""
        ...
