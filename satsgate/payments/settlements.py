"""Settlements: the node's settled invoices applied to the store, and waiting for them.

The watch loop reads the node's settlement stream from a cursor persisted with each
settlement it applies (unpaid -> paid and the cursor move in one transaction), so a
restart resumes exactly where it stopped and a settlement that happened while satsgate
was down is applied on the next start. The cursor is named ``settle:<backend>`` (the
CLN pay_index, the LND settle_index, the dev node's counter).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Protocol

from satsgate.lightning.backend import (
    BackendError,
    InitialCursor,
    InvoiceState,
    InvoiceStatus,
    Settlement,
)
from satsgate.store import Payment, PaymentStatus

log = logging.getLogger(__name__)


class SettlementSource(Protocol):
    """The Lightning node, as far as incoming payments go."""

    name: str

    def settlements(self, after: int) -> AsyncIterator[Settlement]:
        """Settled invoices with cursor > after, first the backlog then live, forever."""
        ...

    async def lookup_invoice(self, payment_hash: str) -> InvoiceStatus: ...


class SettledPayments(Protocol):
    """Payments as settlement changes them (the store's payments repository)."""

    async def mark_paid(
        self,
        payment_hash: str,
        received_msat: int,
        paid_at: int,
        cursor: tuple[str, int] | None = None,
    ) -> bool:
        """unpaid -> paid, and the cursor with it in one transaction."""
        ...

    async def get(self, payment_id: str) -> Payment | None: ...


class SettlementCursors(Protocol):
    """Named cursors that only move forward (the store's cursors repository)."""

    async def get(self, name: str) -> int | None: ...

    async def advance(self, name: str, value: int) -> None: ...


class HoldRefresher(Protocol):
    """Hold invoices (see :mod:`satsgate.payments.holds`): accepted counts as paid."""

    async def refresh(self, payment: Payment) -> Payment: ...


class PaidWaiters:
    """Who waits in this process for which payment hash to be paid: woken by a settlement
    the watcher applied, an unpaid row the node reported settled, or an accepted hold
    (``Holds``' ``on_paid``). Built before both, so neither is patched after."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}

    def notify(self, payment_hash: str) -> None:
        """Wake whoever waits for this payment."""
        for fut in self._waiting.pop(payment_hash, []):
            if not fut.done():
                fut.set_result(None)

    def add(self, payment_hash: str) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(payment_hash, []).append(fut)
        return fut

    def discard(self, payment_hash: str, fut: asyncio.Future[None]) -> None:
        waiters = self._waiting.get(payment_hash, [])
        if fut in waiters:
            waiters.remove(fut)
        if not waiters:
            self._waiting.pop(payment_hash, None)


class Settlements:
    def __init__(
        self,
        *,
        node: SettlementSource,
        payments: SettledPayments,
        cursors: SettlementCursors,
        paid: PaidWaiters | None = None,
        holds: HoldRefresher | None = None,
    ) -> None:
        self._holds = holds  # when the node has hold invoices
        self._node = node
        self._payments = payments
        self._cursors = cursors
        self._cursor_name = f"settle:{node.name}"
        self._paid = paid if paid is not None else PaidWaiters()

    async def init_cursor(self) -> int:
        """The persisted settlement cursor; on first start, the node's current one, saved.

        Saved before any invoice is issued, so a settlement that happens while satsgate
        is down is always after the cursor and is applied on the next start. A node
        without history before satsgate (no :class:`InitialCursor`) starts from 0.
        """
        cursor = await self._cursors.get(self._cursor_name)
        if cursor is None:
            node = self._node
            cursor = int(await node.initial_cursor()) if isinstance(node, InitialCursor) else 0
            await self._cursors.advance(self._cursor_name, cursor)
        return cursor

    async def watch(self) -> None:
        """Apply the node's settlements to the store forever, resuming from the cursor."""
        name = self._cursor_name
        cursor = await self.init_cursor()
        started_at = int(time.time())
        log.info("watching the node's settlements after cursor %s=%d", name, cursor)
        backoff = 1.0
        while True:
            try:
                stream: AsyncIterator[Settlement] = self._node.settlements(cursor)
                async for s in stream:
                    await self._payments.mark_paid(
                        s.payment_hash, s.amount_received_msat, s.settled_at, (name, s.cursor)
                    )
                    cursor = s.cursor
                    if s.settled_at < started_at:  # paid while satsgate was not watching
                        log.info(
                            "applied a settlement made before this start: %d msat,"
                            " payment hash %s (cursor %d)",
                            s.amount_received_msat,
                            s.payment_hash,
                            s.cursor,
                        )
                    self._paid.notify(s.payment_hash)
                    backoff = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the node went away: retry, never give up
                log.warning("settlement stream failed (%s); retrying in %.0f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def wait_paid(self, payment: Payment, timeout_s: float) -> Payment:
        """Wait until the payment is settled (or the timeout); returns the fresh row."""
        fut = self._paid.add(payment.payment_hash)
        try:
            fresh = await self._payments.get(payment.payment_id)
            if fresh is not None and fresh.status is not PaymentStatus.UNPAID:
                return fresh
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, timeout_s)
        finally:
            self._paid.discard(payment.payment_hash, fut)
        return await self._payments.get(payment.payment_id) or payment

    async def preimage_of(self, payment: Payment) -> str | None:
        """The preimage of ``payment``'s settled invoice, as the node reports it; None
        while it is unsettled, for a hold invoice (whose preimage is satsgate's own until
        the call succeeds), or when the node cannot be asked."""
        if payment.mode == "hold":
            return None
        try:
            status = await self._node.lookup_invoice(payment.payment_hash)
        except (BackendError, OSError):
            return None
        if status.state is not InvoiceState.SETTLED or status.preimage is None:
            return None
        return status.preimage.lower()

    async def refresh_paid(self, payment: Payment) -> Payment:
        """An unpaid row may lag the node by a moment: ask the node before refusing."""
        if payment.status is not PaymentStatus.UNPAID:
            return payment
        if payment.mode == "hold" and self._holds is not None:
            return await self._holds.refresh(payment)
        try:
            status = await self._node.lookup_invoice(payment.payment_hash)
        except (BackendError, OSError):
            return payment
        if status.state is InvoiceState.SETTLED:
            await self._payments.mark_paid(
                payment.payment_hash, status.amount_received_msat, int(time.time())
            )
            self._paid.notify(payment.payment_hash)
            return await self._payments.get(payment.payment_id) or payment
        return payment
