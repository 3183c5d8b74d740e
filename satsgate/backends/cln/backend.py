"""ClnBackend: the LightningBackend over Core Lightning's JSON-RPC socket.

Invoices are created with ``invoice`` under a unique ``satsgate-`` label and an
explicit expiry. Settlements come from ``waitanyinvoice`` with CLN's
``pay_index`` as the cursor: lightningd answers with the first paid invoice
whose ``pay_index`` is above the one given, so resuming from a persisted cursor
replays exactly what was paid while satsgate was down. Outgoing payments use
``xpay`` (``pay`` on nodes that lack it), and ``listpays`` is the source of
truth whenever an attempt's outcome is unclear: a payment is reported FAILED
only when lightningd said it failed *and* shows no part still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from satsgate.aio import unless_closing
from satsgate.lightning.backend import (
    BackendError,
    CreatedInvoice,
    InvoiceState,
    InvoiceStatus,
    NodeInfo,
    PaymentResult,
    PaymentState,
    Settlement,
    UnknownInvoice,
    invalid_invoice_payment,
    normalize_network,
    require_invoice_terms,
    require_network,
)
from satsgate.lightning.invoices import InvalidInvoice, decode_invoice

from .rpc import (
    INVALID_PARAMS,
    INVOICE_WAIT_TIMED_OUT,
    METHOD_NOT_FOUND,
    ClnConnectionError,
    ClnRpc,
    ClnRpcError,
    parse_msat,
)

LABEL_PREFIX = "satsgate-"

# CLN's error code for "this invoice was already paid by us" (xpay).
PAY_ALREADY_PAID = 219

# Errors after which nothing of ours can still be in flight *provided* listpays
# shows no pending part: bad parameters, no route, too expensive, expired,
# destination refused, retries exhausted, no pay command at all. Any other error (plugin died,
# lightningd shutting down, catch-all -1) leaves the outcome unknown: PENDING.
_FAILURE_CODES = frozenset(
    {METHOD_NOT_FOUND, INVALID_PARAMS, 201, 203, 205, 206, 207, 209, 210, 212, 215, 216, 217, 220}
)

_log = logging.getLogger("satsgate.cln_backend")


class ClnBackend:
    """LightningBackend over lightningd's unix socket at ``rpc_path``.

    ``network_expected``, when given, must match the node's network or
    :meth:`start` raises BackendError. The event loop never blocks: every RPC
    runs on a thread (see :mod:`satsgate.backends.cln.rpc`).
    """

    name = "cln"

    def __init__(
        self,
        rpc_path: str,
        network_expected: str | None = None,
        *,
        wait_timeout_s: int = 10,
        pay_grace_s: float = 10.0,
    ) -> None:
        self.rpc_path = rpc_path
        self.network_expected = network_expected
        # waitanyinvoice's timeout: how long close() may leave a waiting
        # thread behind, and how often an idle stream re-asks lightningd.
        self.wait_timeout_s = wait_timeout_s
        # How long past ``retry_for`` xpay/pay may take before we report PENDING:
        # a part stuck at a hop keeps xpay waiting well after its deadline.
        self.pay_grace_s = pay_grace_s
        self._rpc = ClnRpc(rpc_path)
        self._use_xpay = True
        self._closed = False
        self._closing: asyncio.Event | None = None

    async def start(self) -> None:
        self._closing = asyncio.Event()
        info = await self.info()
        if self.network_expected is not None:
            require_network(f"the node at {self.rpc_path}", info.network, self.network_expected)

    async def close(self) -> None:
        self._closed = True
        if self._closing is not None:
            self._closing.set()
        self._rpc.close()

    async def info(self) -> NodeInfo:
        res = await self._rpc.call("getinfo")
        return NodeInfo(
            pubkey=str(res["id"]),
            network=normalize_network(str(res["network"])),
            alias=str(res.get("alias", "")),
        )

    async def initial_cursor(self) -> int:
        """The node's highest pay_index now: a first start resumes here and replays no history."""
        res = await self._rpc.call("listinvoices", {}, filter_={"invoices": [{"pay_index": True}]})
        return max(
            (
                int(inv["pay_index"])
                for inv in res.get("invoices", [])
                if inv.get("pay_index") is not None
            ),
            default=0,
        )

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> CreatedInvoice:
        require_invoice_terms(amount_msat, expiry_s)
        # Unique without a round trip; lightningd refuses a duplicate (900) anyway.
        label = f"{LABEL_PREFIX}{int(time.time())}-{secrets.token_hex(8)}"
        res = await self._rpc.call(
            "invoice",
            {
                "amount_msat": amount_msat,
                "label": label,
                "description": description,
                "expiry": expiry_s,
            },
        )
        return CreatedInvoice(
            bolt11=str(res["bolt11"]),
            payment_hash=str(res["payment_hash"]).lower(),
            amount_msat=amount_msat,
            expires_at=int(res["expires_at"]),
        )

    async def settlements(self, after: int) -> AsyncIterator[Settlement]:
        """satsgate's paid invoices with pay_index > after, backlog first, live after.

        Raises ClnConnectionError once the backend is closed (a consumer that
        restarts the stream then backs off instead of spinning).
        """
        cursor = after
        retry_s = 0.5
        while True:
            if self._closed:
                raise ClnConnectionError("the Core Lightning backend is closed")
            try:
                inv = await self._wait_any(cursor)
            except ClnRpcError as exc:
                if exc.code == INVOICE_WAIT_TIMED_OUT:
                    continue  # nothing paid lately: ask again
                # e.g. -1 "Invoice deleted during wait", -5 shutting down.
                _log.info("waitanyinvoice: %s; asking again in %.1fs", exc, retry_s)
                await self._pause(retry_s)
                retry_s = min(retry_s * 2, 30.0)
                continue
            except ClnConnectionError as exc:
                if not self._closed:
                    _log.warning("waitanyinvoice: %s; retrying in %.1fs", exc, retry_s)
                    await self._pause(retry_s)
                    retry_s = min(retry_s * 2, 30.0)
                continue
            if inv is None:  # closed while waiting
                continue
            retry_s = 0.5
            cursor = max(cursor, int(inv["pay_index"]))
            if inv.get("status") != "paid" or not str(inv.get("label", "")).startswith(
                LABEL_PREFIX
            ):
                continue  # another application's invoice on the same node
            yield Settlement(
                payment_hash=str(inv["payment_hash"]).lower(),
                amount_received_msat=parse_msat(inv["amount_received_msat"]),
                preimage=str(inv["payment_preimage"]).lower(),
                settled_at=int(inv.get("paid_at") or time.time()),
                cursor=int(inv["pay_index"]),
            )

    async def _wait_any(self, cursor: int) -> dict[str, Any] | None:
        """One waitanyinvoice on its own thread; None when close() interrupts it."""
        call = self._rpc.call_blocking(
            "waitanyinvoice",
            {"lastpay_index": cursor, "timeout": self.wait_timeout_s},
            wait_s=self.wait_timeout_s + 30,
        )
        closing = self._closing if self._closing is not None else asyncio.Event()
        try:
            # Closed, or our consumer went away: stop waiting. The thread itself
            # ends within wait_timeout_s and its answer is dropped.
            return await unless_closing(call, closing)
        except TimeoutError as exc:  # lightningd ignored the timeout it was given
            raise ClnConnectionError("waitanyinvoice did not answer in time") from exc

    async def _pause(self, seconds: float) -> None:
        if self._closing is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    async def lookup_invoice(self, payment_hash: str) -> InvoiceStatus:
        """The invoice's state. BackendError if the node has no such invoice (never, or deleted)."""
        res = await self._rpc.call("listinvoices", {"payment_hash": payment_hash.lower()})
        invoices = res.get("invoices", [])
        if not invoices:
            raise UnknownInvoice(
                f"unknown invoice {payment_hash}: not at this node (never created, or deleted)"
            )
        inv = invoices[0]
        status = inv.get("status")
        amount_msat = parse_msat(inv.get("amount_msat", 0))
        if status == "paid":
            return InvoiceStatus(
                payment_hash=str(inv["payment_hash"]).lower(),
                state=InvoiceState.SETTLED,
                amount_msat=amount_msat,
                amount_received_msat=parse_msat(inv["amount_received_msat"]),
                preimage=str(inv["payment_preimage"]).lower(),
            )
        state = InvoiceState.EXPIRED if status == "expired" else InvoiceState.OPEN
        return InvoiceStatus(
            payment_hash=str(inv["payment_hash"]).lower(), state=state, amount_msat=amount_msat
        )

    async def pay_invoice(
        self, bolt11: str, max_fee_msat: int, timeout_s: int, amount_msat: int | None = None
    ) -> PaymentResult:
        """Pay with a fee cap (``amount_msat`` for an amountless invoice: xpay's and pay's
        own ``amount_msat``). FAILED only when nothing can still arrive; unknown is
        PENDING."""
        try:
            payment_hash = decode_invoice(bolt11).payment_hash
        except InvalidInvoice as exc:
            return invalid_invoice_payment(exc)
        try:
            res = await self._send_payment(bolt11, max_fee_msat, timeout_s, amount_msat)
        except ClnRpcError as exc:
            return await self._after_pay_error(payment_hash, exc)
        except (TimeoutError, ClnConnectionError) as exc:
            _log.warning(
                "payment %s outcome unknown: %s", payment_hash, str(exc) or "no answer in time"
            )
            return await self._outcome_unknown(payment_hash)
        amount_msat = parse_msat(res.get("amount_msat", 0))
        sent_msat = parse_msat(res.get("amount_sent_msat", amount_msat))
        return PaymentResult(
            payment_hash=payment_hash,
            state=PaymentState.SUCCEEDED,
            amount_msat=amount_msat,
            fee_msat=max(0, sent_msat - amount_msat),
            preimage=str(res["payment_preimage"]).lower(),
        )

    async def _send_payment(
        self, bolt11: str, max_fee_msat: int, timeout_s: int, amount_msat: int | None = None
    ) -> dict[str, Any]:
        wait_s = timeout_s + self.pay_grace_s
        amount: dict[str, Any] = {} if amount_msat is None else {"amount_msat": amount_msat}
        if self._use_xpay:
            try:
                return await self._rpc.call_blocking(
                    "xpay",
                    {
                        "invstring": bolt11,
                        "maxfee": max_fee_msat,
                        "retry_for": timeout_s,
                        **amount,
                    },
                    wait_s=wait_s,
                )
            except ClnRpcError as exc:
                if exc.code != METHOD_NOT_FOUND:
                    raise
                _log.info("lightningd has no xpay; paying with pay")
                self._use_xpay = False
        return await self._rpc.call_blocking(
            "pay",
            {
                "bolt11": bolt11,
                "maxfee": max_fee_msat,
                "retry_for": timeout_s,
                **amount,
            },
            wait_s=wait_s,
        )

    async def _after_pay_error(self, payment_hash: str, exc: ClnRpcError) -> PaymentResult:
        already_paid = exc.code == PAY_ALREADY_PAID
        try:
            known: PaymentResult | None = await self.lookup_payment(payment_hash)
        except BackendError:
            known = None
        if known is not None and known.state is not PaymentState.FAILED:
            return known
        if already_paid:
            # lightningd holds a completed payment for this hash even if listpays
            # no longer lists it (autoclean): success, preimage unknown here.
            return PaymentResult(payment_hash=payment_hash, state=PaymentState.SUCCEEDED)
        if known is not None and exc.code in _FAILURE_CODES:
            return PaymentResult(
                payment_hash=payment_hash, state=PaymentState.FAILED, failure_reason=exc.message
            )
        _log.warning("payment %s: unclassified error, reporting pending: %s", payment_hash, exc)
        return PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)

    async def _outcome_unknown(self, payment_hash: str) -> PaymentResult:
        # The call may still be running inside lightningd: only success is final.
        try:
            known = await self.lookup_payment(payment_hash)
        except BackendError:
            known = None
        if known is not None and known.state is PaymentState.SUCCEEDED:
            return known
        return PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)

    async def lookup_payment(self, payment_hash: str) -> PaymentResult:
        """What listpays knows: any complete -> SUCCEEDED, any pending -> PENDING, else FAILED.

        No record at all is FAILED: lightningd never started paying this hash.
        """
        payment_hash = payment_hash.lower()
        res = await self._rpc.call("listpays", {"payment_hash": payment_hash})
        pays: list[Mapping[str, Any]] = res.get("pays", [])
        for pay in pays:
            if pay.get("status") == "complete":
                amount_msat = parse_msat(pay.get("amount_msat", 0))
                sent_msat = parse_msat(pay.get("amount_sent_msat", amount_msat))
                preimage = pay.get("preimage")
                return PaymentResult(
                    payment_hash=payment_hash,
                    state=PaymentState.SUCCEEDED,
                    amount_msat=amount_msat,
                    fee_msat=max(0, sent_msat - amount_msat) if amount_msat else 0,
                    preimage=str(preimage).lower() if preimage else None,
                )
        if any(pay.get("status") == "pending" for pay in pays):
            return PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)
        reason = "every attempt failed" if pays else "no payment for this hash at the node"
        return PaymentResult(
            payment_hash=payment_hash, state=PaymentState.FAILED, failure_reason=reason
        )
