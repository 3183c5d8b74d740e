"""What messaging, call and fax providers report after the send: delivery status and
inbound messages, from their webhooks (or a status fetch), in provider-neutral terms.

Shared by the SMS (:mod:`satsgate.engines.messaging`), automated-call
(:mod:`satsgate.engines.voice_call`) and fax adapters. satsgate keeps one delivery record
per message, call or fax (:mod:`satsgate.store.deliveries`); a provider's webhook turns
into :class:`WebhookEvents`, which the app applies to those records (status, billed
duration) and to the do-not-contact list (an opt-out reply).

The webhook route is ``POST <public base URL>/api/webhooks/<kind>/<NAME>`` (``NAME``: the
operator's ``[providers.NAME]``). A provider serving these webhooks has ``webhook_kind``
and implements :class:`DeliveryWebhooks`; the route hands it the request with the full
public URL (Twilio signs the URL and the form parameters) and the raw body (Telnyx
signs the body), and answers the status and body the provider returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol
from urllib.parse import parse_qs, urlsplit

Channel = Literal["sms", "call", "fax"]

# The query parameter an adapter appends to its webhook URL to carry satsgate's delivery
# id (the ``reference`` of a request), so a status report finds its record even when it
# arrives before the send's answer was recorded.
REFERENCE_PARAM = "ref"


def reference_of(url: str) -> str | None:
    """The delivery id a webhook URL carries (its ``ref`` query parameter), if any."""
    refs = parse_qs(urlsplit(url).query).get(REFERENCE_PARAM)
    return refs[0] if refs else None


@dataclass(frozen=True)
class StatusUpdate:
    """One status report of a message, call or fax.

    ``status`` is one of the channel's statuses (:data:`messaging.MessageStatus`,
    :data:`voice_call.CallStatus`, or the fax Protocol's); an adapter maps its provider's
    names onto them and drops what has no equivalent.
    """

    channel: Channel
    provider_ref: str  # the provider's id of the message/call/fax (never shown to callers)
    status: str
    reference: str | None = None  # satsgate's delivery id, when the report carried it
    at: int | None = None  # unix seconds the provider gave; None: when received
    # Calls: the connected duration the provider bills, in seconds (final reports only).
    duration_s: int | None = None
    # The provider's own error code (for the operator's log; callers see the status only).
    error: str | None = None
    # Calls: who answered (human, machine, fax, unknown), when the provider detected it.
    answered_by: str | None = None


@dataclass(frozen=True)
class InboundMessage:
    """An SMS someone sent to one of the node's numbers (e.g. a STOP reply)."""

    from_number: str  # E.164 of the sender
    to_number: str  # E.164 of the node's number
    text: str
    provider_ref: str = ""


@dataclass(frozen=True)
class WebhookRequest:
    """A provider's webhook call as it arrived."""

    url: str  # the full public URL the provider requested (public base URL + path + query)
    method: str
    headers: Mapping[str, str]  # names lower-cased
    body: bytes  # raw, exactly as received
    # The same route at this instance's own address (instance_base_url), when it has one:
    # a provider given that address signs it instead.
    own_url: str = ""

    @property
    def urls(self) -> tuple[str, ...]:
        """The URLs the provider may have requested (each one a signature may cover)."""
        return (self.url, self.own_url) if self.own_url else (self.url,)


@dataclass(frozen=True)
class WebhookEvents:
    """What a webhook brought: the HTTP answer, and (only when genuine) the events."""

    status: int  # 200/204 taken; 403 forged or unsigned (then no events); 400 unreadable
    updates: tuple[StatusUpdate, ...] = ()
    inbound: tuple[InboundMessage, ...] = ()
    body: bytes = b""  # the answer's body (Twilio expects TwiML for inbound messages)
    content_type: str = "text/plain"


class DeliveryWebhooks(Protocol):
    """A provider that receives delivery webhooks at /api/webhooks/<webhook_kind>/<NAME>."""

    webhook_kind: str

    async def receive_events(self, request: WebhookRequest) -> WebhookEvents:
        """Verify the request's signature and read it; a forged or unsigned request
        gives ``WebhookEvents(403)`` and nothing else. Never raises for bad input."""
        ...
