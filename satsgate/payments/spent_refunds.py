"""Money back from a spent payment, the way it was paid, and how a streamed call's payment
ends.

:class:`SpentRefunds` gives back part or all of a spent (``serving``) payment: a hold
invoice not yet settled is canceled (the payer's wallet gets it back by itself), an
ecash payment gets a fresh token, anything else (or an ecash refund that failed) an
LNURL-withdraw refund link. Each never gives back more in total than was paid: the
refund link's rows and the ecash refund are bounded by the payment in the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from satsgate.errors import ErrorCode
from satsgate.services.base import StreamPiece
from satsgate.store import Payment


class Refunder(Protocol):
    """Issues refund links (the refund service); each returns the refund object, or None
    when there was nothing (left) to refund."""

    async def refund_unspent(self, payment: Payment, reason: str) -> dict[str, Any] | None:
        """paid -> refunded in full; None when the payment is no longer paid (a lost race)."""
        ...

    async def refund_spent(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None:
        """Part or all of a spent (or serving: it becomes spent) payment; never more in
        total than was paid."""
        ...

    async def latest_refund(self, payment_id: str) -> dict[str, Any] | None:
        """The payment's most recent refund, if any."""
        ...


class HoldCancels(Protocol):
    """Cancels a hold invoice not yet settled (see :mod:`satsgate.payments.holds`): the
    cancel's refund object; None when it was settled or canceled already."""

    async def cancel(self, payment: Payment, reason: str) -> dict[str, Any] | None: ...


class EcashRefunds(Protocol):
    """Refunds of payments made in ecash (see :mod:`satsgate.payments.cashu`): a fresh token
    in the refund object; None when nothing could be refunded in ecash."""

    async def refund_spent(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None: ...


class SpentRefunds:
    """Part or all of a spent payment back to its payer, in the way it was paid."""

    def __init__(
        self,
        refunds: Refunder,
        holds: HoldCancels | None = None,
        ecash: EcashRefunds | None = None,
    ) -> None:
        self._refunds = refunds
        self._holds = holds
        self._ecash = ecash

    async def refund(
        self, payment: Payment, amount_msat: int, reason: str
    ) -> dict[str, Any] | None:
        """The refund object; None when nothing was (left) to give back."""
        in_full = amount_msat >= payment.amount_msat
        if self._holds is not None and payment.mode == "hold" and in_full:
            # Not yet settled: cancel it, the payer's wallet gets it back by itself.
            canceled = await self._holds.cancel(payment, reason)
            if canceled is not None:
                return canceled
        if self._ecash is not None and payment.mode == "cashu":
            # Paid in ecash: refunded in ecash (LNURL-withdraw below when that fails).
            token = await self._ecash.refund_spent(payment, amount_msat, reason)
            if token is not None:
                return token
        return await self._refunds.refund_spent(payment, amount_msat, reason[:500])


class PaidStream:
    """How the payment of a streamed call paid one by one ends (StreamSettle): it stays
    serving while the stream runs (a crash mid-stream refunds it in full at start-up, as
    any unanswered call); the stream's end, or the caller leaving, makes it spent
    (``answered``); a failure mid-stream refunds what the call was priced (the answer is
    incomplete), once."""

    def __init__(
        self,
        refunds: SpentRefunds,
        answered: Callable[[str], None],
        payment: Payment,
        price_msat: int,
    ) -> None:
        self._refunds = refunds
        self._answered = answered
        self._payment = payment
        self._price_msat = price_msat
        self._ended = False

    async def failed(self, code: ErrorCode, message: str) -> dict[str, Any]:
        if self._ended:
            return {}
        self._ended = True
        refund = await self._refunds.refund(
            self._payment, self._price_msat, f"the stream failed: {message}"
        )
        return {} if refund is None else {"refund": refund}

    async def finished(self, last: StreamPiece) -> dict[str, Any]:
        self.abandoned()
        return {
            "method": "cashu" if self._payment.mode == "cashu" else "lightning",
            "reference": self._payment.payment_hash,
            "spent": self._price_msat / 1000,
            "spentMsat": self._price_msat,
        }

    def abandoned(self) -> None:
        if not self._ended:
            self._ended = True
            self._answered(self._payment.payment_id)
