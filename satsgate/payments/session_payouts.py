"""A payment session's end: the close (once), the refund decided once the calls under way
have finished, the balance paid to the return invoice (the node's own payment, under the
payouts' fee limit), retried with back-off, and payouts whose outcome was unknown
resolved by asking the node. Each payout is claimed first in the store (one conditional
UPDATE), so there are never two at once, nor a second after one whose outcome is
unknown; a node pays an invoice once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from satsgate.errors import ErrorCode
from satsgate.lightning.backend import BackendError, PaymentResult, PaymentState
from satsgate.lightning.invoices import InvalidInvoice, decode_invoice
from satsgate.payments.session_wire import SessionProblem
from satsgate.payouts.fees import PayoutFees
from satsgate.store.sessions import Session, SessionRepository

log = logging.getLogger("satsgate.sessions")

# A payout whose return invoice has expired is not tried again (the operator sees it).
_NEVER = 2**62
# How long a close waits for the calls under way at other instances (their debits held)
# before it answers with its refund still pending; the sessions sweep decides it later.
_CALLS_WAIT_S = 30.0
# A debit still held this long after the close is an answered call whose release was
# lost (every call ends long before): the refund is decided with it counted spent.
_HELD_GRACE_S = 900
# The outcomes a close answers with: the refund decided, and paid, failed or not needed.
_ENDED = frozenset({"skipped", "succeeded", "failed"})


@dataclass
class CallsUnderWay:
    """The calls of one session between their debit and their answer (and credit)."""

    count: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class PayoutNode(Protocol):
    async def pay_invoice(
        self, bolt11: str, max_fee_msat: int, timeout_s: int, amount_msat: int | None = None
    ) -> PaymentResult: ...

    async def lookup_payment(self, payment_hash: str) -> PaymentResult: ...


class SessionPayouts:
    """Closes and payouts of the sessions; ``under_way`` is the session desk's own map of
    calls under way (a close waits for them; the sweep leaves their sessions open)."""

    def __init__(
        self,
        *,
        node: PayoutNode,
        sessions: SessionRepository,
        fees: PayoutFees,
        pay_timeout_s: int,
        idle_timeout_s: int,
        under_way: Mapping[str, CallsUnderWay],
    ) -> None:
        self._node = node
        self._sessions = sessions
        self._fees = fees
        self._pay_timeout_s = pay_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._in_flight = under_way
        self._closing: dict[str, asyncio.Future[bool]] = {}
        self._paying: set[str] = set()

    async def close(self, session_id: str, reason: str = "client") -> Session:
        """Close (once) and pay the balance to the return invoice; every close of the same
        session answers the outcome of that one, at whichever instance it arrives.
        Raises SessionProblem for none."""
        session_id = session_id.lower()
        await self._begin_close(session_id, reason)
        running = self._closing.get(session_id)
        if running is not None:
            await asyncio.shield(running)
            session = await self._sessions.get(session_id)
        else:  # closed by another instance, or by a close a restart cut short
            session = await self._outcome(session_id)
        if session is None:
            raise SessionProblem("session-not-found", ErrorCode.PAYMENT_INVALID, "no such session")
        return session

    async def _begin_close(self, session_id: str, reason: str) -> asyncio.Future[bool] | None:
        """open -> closed, for one caller of all instances: the close's finishing task
        (this instance's own), or None."""
        if not await self._sessions.close(session_id, reason, int(time.time())):
            return None
        log.info("session %s closed (%s)", session_id[:16], reason)
        started = asyncio.ensure_future(self._finish_close(session_id, _CALLS_WAIT_S))
        self._closing[session_id] = started
        started.add_done_callback(lambda _: self._closing.pop(session_id, None))
        return started

    async def _outcome(self, session_id: str) -> Session | None:
        """The session once the close under way elsewhere has ended (its refund decided
        and paid, failed or not needed), or as it stands when that takes longer than the
        close itself may wait."""
        deadline = time.monotonic() + _CALLS_WAIT_S + self._pay_timeout_s
        pause = 0.02
        while True:
            session = await self._sessions.get(session_id)
            if session is None or session.payout_status in _ENDED:
                return session
            if time.monotonic() >= deadline:
                return session
            await asyncio.sleep(pause)
            pause = min(0.5, pause * 2)

    async def _finish_close(self, session_id: str, wait_s: float) -> bool:
        """After open -> closed: let calls under way finish (their credits count: this
        instance's as they end, other instances' for up to ``wait_s``, through the debits
        they hold), decide the refund once, pay it. True when it decided here."""
        flight = self._in_flight.get(session_id)
        if flight is not None:
            await flight.idle.wait()
        deadline = time.monotonic() + wait_s
        pause = 0.02
        while True:
            now = int(time.time())
            session = await self._sessions.decide_refund(session_id, now, now - _HELD_GRACE_S)
            if session is not None or time.monotonic() >= deadline:
                break
            decided = await self._sessions.get(session_id)
            if decided is None or decided.refund_msat is not None:
                return False  # decided by another instance (which pays it)
            await asyncio.sleep(pause)
            pause = min(0.5, pause * 2)
        if session is None:
            return False
        if session.payout_status == "pending":
            await self._pay(session_id)
        return True

    async def _pay(self, session_id: str) -> None:
        """One payout attempt, claimed first (never two at once, never a second after an
        attempt whose outcome is unknown)."""
        session = await self._sessions.get(session_id)
        if session is None or session.refund_msat is None:
            return
        now = int(time.time())
        try:
            invoice = decode_invoice(session.return_invoice)
        except InvalidInvoice as exc:  # checked at open; kept for the operator if not
            await self._sessions.note_payout_error(session_id, str(exc)[:500])
            return
        claimed = await self._sessions.claim_payout(session_id, invoice.payment_hash, now)
        if claimed is None:
            return
        amount = session.refund_msat
        if invoice.expired():
            await self._sessions.payout_outcome(
                session_id,
                "failed",
                now,
                error="the return invoice expired before the payout: the operator pays the "
                "payer by other means",
                retry_at=_NEVER,
            )
            log.warning("session %s: return invoice expired, %d msat owed", session_id, amount)
            return
        if claimed.payout_attempts == 1 and await self._paid_before(invoice.payment_hash):
            # Not by an attempt of this session's (this is its first): a node pays an
            # invoice once, and would answer "already paid" for this one.
            await self._sessions.payout_outcome(
                session_id,
                "failed",
                now,
                error="the return invoice was paid already, not by this session: the "
                "operator pays the payer by other means",
                retry_at=_NEVER,
            )
            log.warning("session %s: return invoice paid already, %d msat owed", session_id, amount)
            return
        self._paying.add(session_id)
        try:
            grant = await self._fees.grant(amount)
            result = await self._node.pay_invoice(
                session.return_invoice,
                grant.limit_msat,
                self._pay_timeout_s,
                amount_msat=amount,
            )
            await self._fees.settle(grant, result)
        except (BackendError, OSError, TimeoutError) as exc:
            log.warning("session %s payout: outcome unknown (%s)", session_id[:16], exc)
            await self._sessions.note_payout_error(session_id, f"outcome unknown: {exc}"[:500])
            return
        finally:
            self._paying.discard(session_id)
        await self._apply(session_id, claimed.payout_attempts, result)

    async def _paid_before(self, payment_hash: str) -> bool:
        """Whether the node has paid (or is paying) this hash already. Unknown (the node
        does not answer): False, the payout goes ahead as it would have."""
        try:
            known = await self._node.lookup_payment(payment_hash)
        except (BackendError, OSError, TimeoutError):
            return False
        return known.state is not PaymentState.FAILED

    async def _apply(self, session_id: str, attempts: int, result: PaymentResult) -> None:
        now = int(time.time())
        if result.state is PaymentState.SUCCEEDED:
            await self._sessions.payout_outcome(
                session_id, "succeeded", now, fee_msat=result.fee_msat
            )
            log.info("session %s: balance paid out, fee %d msat", session_id[:16], result.fee_msat)
        elif result.state is PaymentState.FAILED:
            delay = min(3600, 60 * 2 ** max(0, attempts - 1))
            reason = result.failure_reason or "the node gave no reason"
            await self._sessions.payout_outcome(
                session_id, "failed", now, error=reason[:500], retry_at=now + delay
            )
            log.warning("session %s payout failed (%s); retried in %d s", session_id, reason, delay)
        # PENDING: stays paying until the node says (reconcile)

    async def sweep(self) -> dict[str, int]:
        """Close idle sessions, finish closes a restart cut short, retry due payouts and
        resolve payouts whose outcome was unknown. Returns what it did."""
        now = int(time.time())
        done = {"closed": 0, "decided": 0, "paid": 0, "resolved": 0}
        for session_id in await self._sessions.idle(now - self._idle_timeout_s):
            if session_id in self._in_flight:
                continue
            started = await self._begin_close(session_id, "idle")
            if started is not None:
                await asyncio.shield(started)
                done["closed"] += 1
        for session_id in await self._sessions.undecided():
            if session_id in self._closing:
                continue
            if await self._finish_close(session_id, 0):  # a debit still held: next sweep
                done["decided"] += 1
        for session_id in await self._sessions.payouts_due(now):
            if session_id in self._closing or session_id in self._paying:
                continue
            await self._pay(session_id)
            done["paid"] += 1
        settled_before = now - self._pay_timeout_s - 60
        for session_id, payout_hash, updated_at in await self._sessions.payouts_paying():
            if session_id in self._paying or updated_at > settled_before or not payout_hash:
                continue
            session = await self._sessions.get(session_id)
            with contextlib.suppress(BackendError, OSError, TimeoutError):
                result = await self._node.lookup_payment(payout_hash)
                if result.state is not PaymentState.PENDING and session is not None:
                    await self._apply(session_id, session.payout_attempts, result)
                    done["resolved"] += 1
        return done

    async def wait_closing(self) -> None:
        """Let closes under way finish (shutdown, tests)."""
        if self._closing:
            await asyncio.gather(*list(self._closing.values()), return_exceptions=True)
