"""Capability: fax (send-fax, receive-fax). Adapters: satsgate/engines/providers/telnyx.py
(its fax engine: telnyx_fax.py).

Sending: the service hosts the PDF at a signed, expiring URL on the node's public URL
(``ctx.files``), the engine hands that URL to the provider (which fetches it) and reports
the fax's status as the provider's webhooks move it: ``queued`` -> ``sending`` ->
``delivered`` or ``failed``.

Receiving: the operator gives the engine the fax numbers it receives on
(:meth:`FaxEngine.inbound_numbers`); each verified inbound-fax webhook reaches the
handler registered with :meth:`FaxEngine.on_inbound`, which fetches the document with
:meth:`FaxEngine.download` (bounded, only from the provider's own hosts).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

FaxStatus = Literal["queued", "sending", "delivered", "failed"]
FAX_STATUSES: tuple[FaxStatus, ...] = ("queued", "sending", "delivered", "failed")
FINAL_STATUSES: frozenset[FaxStatus] = frozenset({"delivered", "failed"})


@dataclass(frozen=True)
class FaxRequest:
    """One fax to send: a PDF the provider fetches from ``media_url``."""

    to: str  # E.164
    media_url: str  # signed, expiring URL of the PDF on the node's public URL
    pages: int
    reference: str  # satsgate's own id of this fax (the job id), echoed in status updates


@dataclass(frozen=True)
class FaxState:
    """A sent fax's status as the provider last reported it."""

    fax_id: str  # the engine's id of the fax (opaque to satsgate)
    status: FaxStatus
    pages: int | None = None  # pages transmitted, when the provider says
    # Why it failed, in words fit for the payer: never a provider name, URL or key.
    failure_reason: str = ""

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES


@dataclass(frozen=True)
class InboundFax:
    """A fax received on one of the engine's inbound numbers (its document not yet
    downloaded: :meth:`FaxEngine.download`)."""

    fax_id: str
    to: str  # the inbound number (E.164) it was sent to
    sender: str  # the sending number, as the network reported it ("" when withheld)
    pages: int | None
    media_url: str  # where the provider serves the document
    received_at: float  # Unix seconds


InboundHandler = Callable[[InboundFax], Awaitable[None]]


@dataclass(frozen=True)
class InboundRequest:
    """receive-fax's question before any invoice (``engine.unsupported(request)``, see
    satsgate.engines.registry.Binding.unsupported): a number in this country?"""

    country: str  # ISO 3166 alpha-2


class FaxEngine(Protocol):
    async def send(self, request: FaxRequest) -> FaxState:
        """Hand the fax to the provider; its first status (normally ``queued``).
        EngineError when the provider refused it (nothing was sent)."""
        ...

    async def wait(self, fax_id: str, timeout_s: float) -> FaxState:
        """The fax's status as soon as it differs from the last one returned for it, or
        the current one after ``timeout_s`` (webhooks, with polling as the fallback)."""
        ...

    def inbound_numbers(self) -> tuple[str, ...]:
        """The E.164 numbers this engine receives faxes on (empty: it cannot receive)."""
        ...

    def on_inbound(self, handler: InboundHandler) -> None:
        """Call ``handler`` for each verified inbound fax (one handler; set at start-up)."""
        ...

    async def download(self, fax: InboundFax, max_bytes: int) -> bytes:
        """The received document (PDF); EngineError when it is larger than ``max_bytes``,
        not served by the provider's own hosts, or cannot be fetched."""
        ...
