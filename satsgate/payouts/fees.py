"""What every payout the node makes may spend on routing fees.

The payer names each payout invoice (a refund link's, a deposit refund's Lightning
address, a session's return invoice) and may route it through a last hop of its own,
whose fee it collects. Two bounds keep that from paying it:

- per payout, :meth:`PayoutFees.cap_msat`: a small share of the amount, never more than
  ``refund_fee_max_msat`` whatever the amount;
- per UTC day, ``payout_fee_budget_msat`` across every payout: each attempt is granted
  its cap or what the day has left, whichever is smaller, in one statement
  (:class:`satsgate.store.payout_fees.PayoutFeeRepository`). A payer cycling its own
  money through refunds or sessions from any number of addresses, node ids or invoices
  takes at most the day's budget between all of them; once it is spent, payouts route
  at no fee (a direct channel) until the next day, and those that need a fee fail and
  are retried (a refund link opens again, a session payout is retried with back-off).

The node is given the grant as its fee limit (Core Lightning ``maxfee``, LND
``fee_limit_msat``: 0 means zero-fee routes only) and refuses any route that costs more.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from satsgate.config.settings import Settings
from satsgate.lightning.backend import PaymentResult, PaymentState
from satsgate.store.payout_fees import PayoutFeeRepository

log = logging.getLogger(__name__)

_DAY_S = 86_400


@dataclass(frozen=True)
class FeeGrant:
    """The routing fees one payout attempt may spend, out of ``day``'s budget."""

    day: int  # UTC days since the epoch
    limit_msat: int


def fee_cap_msat(settings: Settings, amount_msat: int) -> int:
    """The most one payout of ``amount_msat`` may spend on routing fees: the floor or the
    ppm share, whichever is larger, but never more than ``refund_fee_max_pct`` of the
    amount nor than ``refund_fee_max_msat``."""
    s = settings
    floor = max(s.refund_fee_min_msat, amount_msat * s.refund_fee_ppm // 1_000_000)
    return min(floor, amount_msat * s.refund_fee_max_pct // 100, s.refund_fee_max_msat)


class PayoutFees:
    """The per-payout cap and the daily budget of payout routing fees."""

    def __init__(self, settings: Settings, repository: PayoutFeeRepository) -> None:
        self._settings = settings
        self._repository = repository

    def cap_msat(self, amount_msat: int) -> int:
        """The most one payout of ``amount_msat`` may spend on routing fees."""
        return fee_cap_msat(self._settings, amount_msat)

    async def grant(self, amount_msat: int) -> FeeGrant:
        """The fee limit of one payout attempt of ``amount_msat``, committed to today's
        budget; hand back what it did not spend with :meth:`settle`."""
        day = int(time.time()) // _DAY_S
        wanted = self.cap_msat(amount_msat)
        limit = await self._repository.grant(day, wanted, self._settings.payout_fee_budget_msat)
        if limit < wanted:
            log.warning(
                "payout routing fees: today's budget (payout_fee_budget_msat %d) is spent;"
                " a payout of %d msat may spend %d msat, not %d",
                self._settings.payout_fee_budget_msat,
                amount_msat,
                limit,
                wanted,
            )
        return FeeGrant(day, limit)

    async def settle(self, grant: FeeGrant, result: PaymentResult) -> None:
        """Give the grant's unspent part back to its day once the node has said how the
        payout ended (paid: what the fee left; failed: all of it). A pending payout keeps
        its grant until it is settled here."""
        if result.state is PaymentState.SUCCEEDED:
            await self._repository.release(grant.day, grant.limit_msat - result.fee_msat)
        elif result.state is PaymentState.FAILED:
            await self._repository.release(grant.day, grant.limit_msat)
