"""What the telephony carriers' adapters (``telnyx``, ``twilio``) share: their options
for spoken calls (the voices by locale, how long a call rings) and the do-not-contact
list fed by their SMS: a STOP reply, or a send refused because the recipient opted out.

Their requests, webhooks and status vocabularies differ (JSON under ``data`` with
Ed25519-signed webhooks, against form posts signed with HMAC-SHA1 over the URL; Call
Control commands against TwiML) and stay in each adapter.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from satsgate.domain.do_not_contact import OptOuts, asks_not_to_be_contacted, opt_out
from satsgate.engines.config import EngineConfigError
from satsgate.engines.delivery import InboundMessage
from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

SOURCE = "sms-stop"  # the do-not-contact list's source for an SMS opt-out


def voices_option(options: Mapping[str, Any], where: str, what: str) -> dict[str, str]:
    """``voices = { "de-DE" = "<voice>" }``: the voice by locale, locales lower-cased;
    ``what`` names the voices in the error ("speak voices", "<Say> voice names")."""
    voices = options.get("voices", {})
    if not isinstance(voices, Mapping) or not all(
        isinstance(v, str) and v for v in voices.values()
    ):
        raise EngineConfigError(f"{where}.voices maps locales to {what}")
    return {str(k).lower(): str(v) for k, v in voices.items()}


def ring_timeout_option(options: Mapping[str, Any], where: str, most: int) -> int:
    """``ring_timeout_s``: how long a call rings, 5 s to ``most`` (default 30)."""
    ring = options.get("ring_timeout_s", 30)
    if isinstance(ring, bool) or not isinstance(ring, int) or not 5 <= ring <= most:
        raise EngineConfigError(f"{where} ring_timeout_s must be 5 to {most} (seconds)")
    return ring


async def opt_out_by_reply(
    opt_outs: OptOuts, message: InboundMessage, name: str, *, stop: bool = False
) -> None:
    """An inbound SMS that asks not to be contacted (or that the carrier classified as a
    STOP: ``stop``) puts its sender on the do-not-contact list."""
    if not stop and not asks_not_to_be_contacted(message.text):
        return
    try:
        added = await opt_out(opt_outs, message.from_number, source=SOURCE)
    except ValueError:
        log.info("%s: an opt-out from an unusable sender ignored", name)
        return
    if added:
        log.info("%s: a number opted out by SMS reply", name)


async def opted_out_recipient(opt_outs: OptOuts, number: str) -> None:
    """The carrier refused a send because the recipient opted out (replied STOP to it):
    the number goes on the list too, so no other carrier is tried for it again."""
    with contextlib.suppress(ValueError):
        await opt_out(opt_outs, number, source=SOURCE)


@contextlib.asynccontextmanager
async def recording_opt_out(opt_outs: OptOuts, number: str) -> AsyncIterator[None]:
    """Around a send to ``number``: a carrier's refusal because the recipient opted out
    (RECIPIENT_OPTED_OUT) puts the number on the list (:func:`opted_out_recipient`),
    then is raised on as it is."""
    try:
        yield
    except EngineError as exc:
        if exc.code == ErrorCode.RECIPIENT_OPTED_OUT:
            await opted_out_recipient(opt_outs, number)
        raise
