# ruff: noqa: E501  (phrase tables: one phrase family per line reads better unbroken)
"""The do-not-contact list: numbers and addresses that opted out.

Who adds to it:

- a provider's inbound webhook, on a STOP reply: the adapter holds ``deps.opt_outs``
  (:class:`satsgate.engines.EngineDeps`) and calls
  ``await opt_out(deps.opt_outs, "+14155550123", source="sms-stop")``;
- an AI call whose transcript asks not to be called again:
  ``if asks_not_to_be_contacted(transcript): await opt_out(deps.opt_outs, number,
  source="ai-call")``;
- the operator: ``satsgate dnc add``, ``lightning-cli satsgate-dnc add``, the operator
  page.

Who reads it: the gate before any invoice, for every service that declares
``ServiceSpec.recipients``; and :func:`satsgate.services.comms.screening.screen` after payment
(an opt-out that came in since the quote is refused and refunded).

The list itself is the store's repository (:mod:`satsgate.store.do_not_contact`); this
module is what the engines (a carrier's STOP webhook), the gate, the screen and the
desks share, below all of them.

Entries are stored normalised (:func:`satsgate.domain.addresses.normalise_address`):
E.164 digits with ``+``, e-mail addresses lower-cased with an ASCII (IDNA) domain.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Protocol

from satsgate.domain.addresses import normalise_address
from satsgate.domain.plain_text import normalise

log = logging.getLogger(__name__)

# Where an entry came from: "sms-stop", "call-stop", "ai-call", "fax-stop", "operator", ...
SOURCE = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,39}$")


class OptOuts(Protocol):
    """The list (the store's do-not-contact repository)."""

    async def add(self, address: str, source: str, now: int | None = None) -> bool:
        """Add a normalised address; True when it was not on the list yet."""
        ...

    async def opted_out(self, addresses: Sequence[str]) -> list[str]:
        """Those of ``addresses`` (any form) that are on the list, as given."""
        ...


class _NoList:
    """For engine registries built without a store (``satsgate engines``): nothing
    is ever on it, and an opt-out is logged loudly instead of lost silently."""

    async def add(self, address: str, source: str, now: int | None = None) -> bool:
        log.error("opt-out from %s not recorded: no do-not-contact list here", source)
        return False

    async def opted_out(self, addresses: Sequence[str]) -> list[str]:
        return []


NO_OPT_OUTS: OptOuts = _NoList()


async def opt_out(opt_outs: OptOuts, address: str, *, source: str = "sms-stop") -> bool:
    """Put ``address`` (a number or an e-mail address, any common form) on the list;
    True when it was not there yet. ValueError for an address that is neither, or a
    malformed source."""
    if not SOURCE.match(source):
        raise ValueError(f"bad opt-out source {source!r}")
    return await opt_outs.add(normalise_address(address), source)


_STOP_WORD = re.compile(
    r"^(?:stop|stop all|stopall|end|quit|cancel|unsubscribe|optout|opt out|revoke|"
    r"stopp|abmelden|abbestellen|arret|arreter|stop sms|desabonner|desinscrire|"
    r"baja|alta baja|cancelar|parar|pare|sair|descadastrar)$"
)
_STOP_PHRASE = re.compile(
    r"\b(?:"
    r"(?:do not|don't|dont|never) (?:call|text|contact|message|email|fax) (?:me|us|this number)(?: again| anymore| any more)?"
    r"|stop (?:calling|texting|contacting|messaging|emailing) (?:me|us)"
    r"|(?:take|remove) (?:me|my number|this number|my name) (?:off|from) (?:your|the) (?:list|calling list|database)"
    r"|put (?:me|my number) on (?:your|the) do not call list"
    r"|(?:rufen sie|ruf) mich (?:nie )?(?:nicht )?mehr an|nicht mehr anrufen|keine anrufe mehr"
    r"|(?:schreiben sie|schreib) mir nicht mehr|kontaktieren sie mich nicht mehr"
    r"|ne m'appelez plus|ne plus m'appeler|arretez de m'appeler|ne me contactez plus"
    r"|ne m'ecrivez plus|ne me rappelez pas|ne me rappelez plus"
    r"|no me (?:llame|llames|vuelva a llamar|vuelvas a llamar|escriba|escribas|contacte)(?:n)?(?: mas)?"
    r"|deje de llamarme|dejen de llamarme|no vuelvan a llamar"
    r"|nao me (?:ligue|liguem|ligar|mande|contate|contatem)(?: mais)?|pare de me ligar|parem de me ligar"
    r")\b"
)


def asks_not_to_be_contacted(text: str) -> bool:
    """Whether a reply or a call transcript asks not to be contacted again: a STOP
    keyword as the whole reply, or a request such as "don't call me again", "bitte
    nicht mehr anrufen", in English, German, French, Spanish and Portuguese."""
    plain = normalise(text)
    return bool(_STOP_WORD.match(plain.strip(" .")) or _STOP_PHRASE.search(plain))
