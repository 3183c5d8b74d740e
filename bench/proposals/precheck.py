"""Proposal: run render-card's pre-payment layout check in the CPU process pool.

``_check_card_fits`` runs ``cards.check_fits`` (~0.7-1 ms of pure Python) with
``asyncio.to_thread``: a thread hop that still holds the GIL the event loop
needs, so on the 402 path it costs the loop as much as running inline, plus the
hops. The gate already owns a process pool for CPU-heavy engines; there the check
runs off the GIL (the request is a few hundred bytes to pickle). The worker
returns the error text instead of raising, so nothing custom is pickled back.
"""

from __future__ import annotations

from satsgate.engines.local import cards


def card_fit_error(request: cards.CardRequest) -> str | None:
    """``None`` when the card's text fits, else the message ``check_fits`` would raise."""
    try:
        cards.check_fits(request)
    except cards.CardTextError as exc:
        return str(exc)
    return None
