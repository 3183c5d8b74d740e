"""Capability: send an e-mail (send-email). Adapters: satsgate/engines/providers/smtp.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Attachment:
    """A file sent with a message (e.g. the signed PDF of an e-signature request)."""

    filename: str
    content_type: str  # "application/pdf"
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class OutgoingEmail:
    """One message to send, as the caller wrote it (validated by the service's params)."""

    to: tuple[str, ...]
    subject: str
    text: str | None = None
    html: str | None = None
    reply_to: str | None = None
    from_name: str | None = None  # display name; the address is the node's
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class SentEmail:
    """The upstream took the message for these recipients (and refused the others)."""

    message_id: str
    accepted: tuple[str, ...]
    # Recipient -> the upstream's reason, for recipients it refused while accepting others.
    refused: Mapping[str, str] = field(default_factory=dict)


class EmailEngine(Protocol):
    async def send(self, message: OutgoingEmail) -> SentEmail:
        """Send ``message``; EngineError on failure. When the upstream may already have
        accepted it (a failure during or after the data transfer), the error has
        ``may_fall_back=False``: a message is never handed to two upstreams."""
