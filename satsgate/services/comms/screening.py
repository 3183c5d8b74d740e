"""The screen every communication passes just before it reaches a provider.

A communication handler (SMS, e-mail, automated or AI call, fax, voice bridge,
e-signature) builds an :class:`Outreach` with everything that will reach the person
and calls ``await screen(ctx, Outreach(...))`` right before it contacts the provider:

- a recipient on the do-not-contact list (one who opted out since the quote was
  given) is refused: ``ApiError("RECIPIENT_OPTED_OUT")``, which the gate refunds;
- a text the screen flags (impersonation, threats, harassment, credential or code
  solicitation: :mod:`satsgate.domain.screening_rules`, plus the optional LLM check of
  ``[screening] llm = true``) raises :class:`HeldForReview`. The handler lets it
  propagate; the gate then holds the paid request (``CONTENT_POLICY_HELD``: nothing is
  sent, the payment is neither spent with an answer nor refunded) until the operator
  releases it (the handler runs again with the stored request, and the screen is
  skipped for it: ``ctx.desk(SCREENER)`` is the operator's release then) or refunds it.

Screening happens after payment, inside the handler, because what reaches the person
may be made there (an AI call's prompt, a fax's cover page). The do-not-contact check
before any invoice is ``ServiceSpec.recipients``.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Literal, Protocol

from satsgate.services.base import DeskKey, ServiceContext

Channel = Literal["sms", "email", "call", "ai_call", "fax", "voice_bridge", "e_signature"]
CHANNELS: tuple[Channel, ...] = (
    "sms",
    "email",
    "call",
    "ai_call",
    "fax",
    "voice_bridge",
    "e_signature",
)


@dataclass(frozen=True)
class Outreach:
    """One communication about to go out."""

    channel: Channel
    recipients: tuple[str, ...]  # E.164 numbers or e-mail addresses, as sent
    text: str  # everything that will reach the person (subject, body, prompt, cover page)
    sender_name: str | None = None  # the name the person will be shown, when one is given


class HeldForReview(Exception):
    """The screen flagged the communication: the gate holds the paid request.

    ``reasons`` are short machine-readable labels, e.g. ``("impersonation:bank",
    "credential:otp")``; they reach the operator, never the recipient."""

    def __init__(
        self, reasons: tuple[str, ...], message: str = "", outreach: Outreach | None = None
    ) -> None:
        self.reasons = tuple(reasons)
        self.outreach = outreach  # what was screened: the hold's evidence for the operator
        super().__init__(message or "held for review: " + ", ".join(self.reasons))


class Screener(Protocol):
    """What a node screens with (the app's :class:`satsgate.outreach.screener.NodeScreener`:
    the do-not-contact list, the rules, the optional LLM check and the de-identified
    record of each verdict)."""

    async def screen(self, ctx: ServiceContext, outreach: Outreach) -> None: ...


# The node's screen in a handler's context: ``ctx.desk(SCREENER)``; none: the rules alone.
SCREENER: DeskKey[Screener] = DeskKey("screener")


async def screen(ctx: ServiceContext, outreach: Outreach) -> None:
    """Raise :class:`HeldForReview` when ``outreach`` is flagged, or ``ApiError``
    ``RECIPIENT_OPTED_OUT`` when a recipient opted out; return when it may go out.

    Without a node screener (a context built outside the app) the rules still apply."""
    screener = ctx.desk(SCREENER)
    if screener is not None:
        await screener.screen(ctx, outreach)
        return
    from satsgate.domain.screening_rules import check_text

    reasons = check_text(outreach.text, outreach.sender_name)
    if reasons:
        raise HeldForReview(reasons, outreach=outreach)


_TAG = re.compile(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.S | re.I)


def html_text(markup: str) -> str:
    """The text an HTML body shows (tags dropped, entities decoded), for the screen."""
    return html.unescape(_TAG.sub(" ", markup)) if markup else ""
