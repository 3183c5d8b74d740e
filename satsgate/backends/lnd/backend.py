"""LndBackend: the LightningBackend over LND's gRPC (TLS with the node's tls.cert, a hex
macaroon in every call's metadata).

Invoices are created with ``AddInvoice`` (``value_msat``, ``memo``, an explicit
``expiry``). Settlements come from ``SubscribeInvoices`` with LND's ``settle_index`` as
the cursor: lnd replays every settlement with an index strictly greater than the one
given, then streams live ones. lnd replays nothing for index 0, and settle indexes may
have gaps, so every (re)connect also reconciles: with cursor 0 the node's settled
invoices are read with ``ListInvoices``, and every invoice this backend created and has
not seen settled is asked about with ``LookupInvoice``. A settlement is yielded once per
stream however many of these paths report it.

Refunds are paid with routerrpc ``SendPaymentV2`` and a fee limit. ``ALREADY_EXISTS``
(already paid, or in flight) is followed by ``TrackPaymentV2``; IN_FLIGHT is PENDING,
never FAILED. lnd refuses an expired, amountless or own invoice with a plain error
(status UNKNOWN, before any payment record): that is FAILED when lnd then has no record
of the hash (or a failed one), with lnd's message as the reason.

At start every RPC the backend calls is tried once with a request lnd refuses after
its macaroon check (a malformed hash, both ``value`` and ``value_msat``): an answer of
``permission denied`` means the macaroon lacks that RPC's permission, and start fails
naming every permission missing. Nothing is created or paid by these tries.
``SubscribeInvoices`` is a stream that answers nothing until an invoice changes, so it
is not tried; it needs ``invoices:read``, as ``ListInvoices`` (which is tried) does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from satsgate.lightning.backend import (
    BackendError,
    CreatedInvoice,
    HoldInvoiceStatus,
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

from .proto import invoices_pb2, lightning_pb2, router_pb2
from .proto.invoices_pb2_grpc import InvoicesStub
from .proto.lightning_pb2_grpc import LightningStub
from .proto.router_pb2_grpc import RouterStub

_log = logging.getLogger("satsgate.lnd_backend")

_INV = lightning_pb2.Invoice
_PAY = lightning_pb2.Payment

# How many delivered payment hashes a stream remembers to drop repeats.
_RECENT = 4096
# Open invoices remembered before the expired ones are dropped.
_OPEN_LIMIT = 10_000
# ListInvoices page size while reading the backlog for cursor 0.
_PAGE = 500

# The permission each RPC this backend calls needs, from lnd's permission tables
# (rpcserver.go, lnrpc/invoicesrpc, lnrpc/routerrpc). A macaroon allows a call that it
# grants either this permission or ``uri:<method>``.
REQUIRED_PERMISSIONS: dict[str, str] = {
    "/lnrpc.Lightning/GetInfo": "info:read",
    "/lnrpc.Lightning/AddInvoice": "invoices:write",
    "/lnrpc.Lightning/LookupInvoice": "invoices:read",
    "/lnrpc.Lightning/ListInvoices": "invoices:read",
    "/lnrpc.Lightning/SubscribeInvoices": "invoices:read",
    "/invoicesrpc.Invoices/AddHoldInvoice": "invoices:write",
    "/invoicesrpc.Invoices/SettleInvoice": "invoices:write",
    "/invoicesrpc.Invoices/CancelInvoice": "invoices:write",
    "/routerrpc.Router/SendPaymentV2": "offchain:write",
    "/routerrpc.Router/TrackPaymentV2": "offchain:read",
}
# What lnd answers (gRPC status UNKNOWN) when a valid macaroon lacks the permission.
_PERMISSION_DENIED = "permission denied"


def _describe(exc: grpc.aio.AioRpcError) -> str:
    details = exc.details() or ""
    return f"{exc.code().name}: {details}" if details else exc.code().name


class LndBackend:
    """LightningBackend over lnd's gRPC at ``target`` (``host:port``).

    ``tls_cert`` is the node's tls.cert (PEM), ``macaroon`` a macaroon file (binary, as
    lnd writes it). ``network_expected``, when given, must match GetInfo's chain or
    :meth:`start` raises BackendError.
    """

    name = "lnd"

    def __init__(
        self,
        target: str,
        tls_cert: str | Path,
        macaroon: str | Path,
        network_expected: str | None = None,
        *,
        pay_grace_s: float = 10.0,
        max_backoff_s: float = 30.0,
        hold_cltv_expiry: int = 144,
    ) -> None:
        self.target = target
        self.tls_cert_path = Path(tls_cert).expanduser()
        self.macaroon_path = Path(macaroon).expanduser()
        self.network_expected = network_expected
        # How long past ``timeout_seconds`` a payment stream may run before we say PENDING.
        self.pay_grace_s = pay_grace_s
        self.max_backoff_s = max_backoff_s
        # A hold invoice's final CLTV delta: how many blocks a held payment may wait.
        self.hold_cltv_expiry = hold_cltv_expiry
        self._channel: grpc.aio.Channel | None = None
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._ln: Any = None
        self._invoices: Any = None
        self._router: Any = None
        self._closed = False
        self._closing: asyncio.Event | None = None
        # Invoices created here and not yet seen settled or canceled: reconciled by
        # LookupInvoice on every (re)connect of the settlement stream. hash -> expires_at.
        self._open: dict[str, int] = {}
        self._open_limit = _OPEN_LIMIT

    # -- connection -------------------------------------------------------------------------

    async def start(self) -> None:
        self._closing = asyncio.Event()
        try:
            cert = self.tls_cert_path.read_bytes()
            macaroon = self.macaroon_path.read_bytes()
        except OSError as exc:
            raise BackendError(f"LND: cannot read {exc.filename}: {exc.strerror}") from None
        if not macaroon:
            raise BackendError(f"LND: the macaroon file {self.macaroon_path} is empty")
        self._metadata = (("macaroon", macaroon.hex()),)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert)
        self._channel = grpc.aio.secure_channel(
            self.target, credentials, options=[("grpc.max_receive_message_length", 50 << 20)]
        )
        self._ln = LightningStub(self._channel)  # type: ignore[no-untyped-call]
        self._invoices = InvoicesStub(self._channel)  # type: ignore[no-untyped-call]
        self._router = RouterStub(self._channel)  # type: ignore[no-untyped-call]
        try:
            missing = await self.missing_permissions()
        except BackendError:
            await self.close()
            raise
        if missing:
            await self.close()
            raise BackendError(_missing_message(self.target, missing))
        info = await self.info()
        if self.network_expected is not None:
            try:
                require_network(
                    f"the LND node at {self.target}", info.network, self.network_expected
                )
            except BackendError:
                await self.close()
                raise

    async def close(self) -> None:
        self._closed = True
        if self._closing is not None:
            self._closing.set()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    async def missing_permissions(self) -> dict[str, list[str]]:
        """The permissions the macaroon lacks, each with the RPCs it refused (empty when
        every RPC is allowed). BackendError when lnd refuses the macaroon itself or
        cannot be reached."""
        missing: dict[str, list[str]] = {}
        for method, attempt in self._permission_tries().items():
            try:
                await attempt()
            except grpc.aio.AioRpcError as exc:
                if _PERMISSION_DENIED in (exc.details() or ""):
                    missing.setdefault(REQUIRED_PERMISSIONS[method], []).append(method)
                elif exc.code() is grpc.StatusCode.UNAVAILABLE or _macaroon_refused(exc):
                    raise _backend_error(exc, self.target) from None
                # Any other answer came from the RPC itself, past the macaroon check.
        return missing

    def _permission_tries(self) -> dict[str, Callable[[], Awaitable[Any]]]:
        """One call per RPC that lnd refuses after its macaroon check and before doing
        anything: a one-byte hash or preimage, both ``value`` and ``value_msat``, an
        invoice that does not decode. GetInfo and ListInvoices (one invoice) only read."""
        ln, invoices, router, md = self._ln, self._invoices, self._router, self._metadata
        one_byte = b"\x00"

        def unary(method: Any, request: Any) -> Callable[[], Awaitable[Any]]:
            return lambda: method(request, metadata=md, timeout=30)

        def first(method: Any, request: Any) -> Callable[[], Awaitable[Any]]:
            async def read() -> None:
                call = method(request, metadata=md, timeout=30)
                try:
                    await call.read()
                finally:
                    call.cancel()

            return read

        return {
            "/lnrpc.Lightning/GetInfo": unary(ln.GetInfo, lightning_pb2.GetInfoRequest()),
            "/lnrpc.Lightning/ListInvoices": unary(
                ln.ListInvoices, lightning_pb2.ListInvoiceRequest(num_max_invoices=1)
            ),
            "/lnrpc.Lightning/LookupInvoice": unary(
                ln.LookupInvoice, lightning_pb2.PaymentHash(r_hash=one_byte)
            ),
            "/lnrpc.Lightning/AddInvoice": unary(
                ln.AddInvoice, lightning_pb2.Invoice(value=1, value_msat=1_000)
            ),
            "/invoicesrpc.Invoices/AddHoldInvoice": unary(
                invoices.AddHoldInvoice, invoices_pb2.AddHoldInvoiceRequest(hash=one_byte)
            ),
            "/invoicesrpc.Invoices/SettleInvoice": unary(
                invoices.SettleInvoice, invoices_pb2.SettleInvoiceMsg(preimage=one_byte)
            ),
            "/invoicesrpc.Invoices/CancelInvoice": unary(
                invoices.CancelInvoice, invoices_pb2.CancelInvoiceMsg(payment_hash=one_byte)
            ),
            "/routerrpc.Router/SendPaymentV2": first(
                router.SendPaymentV2, router_pb2.SendPaymentRequest(payment_request="lnbcrt1")
            ),
            "/routerrpc.Router/TrackPaymentV2": first(
                router.TrackPaymentV2, router_pb2.TrackPaymentRequest(payment_hash=one_byte)
            ),
        }

    async def _unary(self, method: Any, request: Any, timeout_s: float = 30.0) -> Any:
        if self._ln is None:
            raise BackendError("the LND backend is not started")
        try:
            return await method(request, metadata=self._metadata, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise _backend_error(exc, self.target) from None

    async def _pause(self, seconds: float) -> None:
        if self._closing is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    # -- node and invoices ------------------------------------------------------------------

    async def info(self) -> NodeInfo:
        res = await self._unary(self._ln.GetInfo, lightning_pb2.GetInfoRequest())
        chains = list(res.chains)
        if not chains:
            raise BackendError(f"LND at {self.target} reports no chain")
        return NodeInfo(
            pubkey=str(res.identity_pubkey),
            network=normalize_network(str(chains[0].network)),
            alias=str(res.alias),
        )

    async def initial_cursor(self) -> int:
        """The node's highest settle_index now: a first start replays no history."""
        highest = 0
        async for inv in self._list_invoices():
            highest = max(highest, int(inv.settle_index))
        return highest

    async def _list_invoices(self) -> AsyncIterator[Any]:
        offset = 0
        while True:
            res = await self._unary(
                self._ln.ListInvoices,
                lightning_pb2.ListInvoiceRequest(index_offset=offset, num_max_invoices=_PAGE),
            )
            for inv in res.invoices:
                yield inv
            if len(res.invoices) < _PAGE or int(res.last_index_offset) <= offset:
                return
            offset = int(res.last_index_offset)

    async def create_invoice(
        self, amount_msat: int, description: str, expiry_s: int
    ) -> CreatedInvoice:
        require_invoice_terms(amount_msat, expiry_s)
        res = await self._unary(
            self._ln.AddInvoice,
            lightning_pb2.Invoice(memo=description, value_msat=amount_msat, expiry=expiry_s),
        )
        created = self._created(str(res.payment_request), bytes(res.r_hash).hex(), amount_msat)
        self._open[created.payment_hash] = created.expires_at
        if len(self._open) > self._open_limit:  # a long stream never reconnects: prune here
            cutoff = int(time.time()) - 3600
            self._open = {h: e for h, e in self._open.items() if e > cutoff}
            self._open_limit = max(_OPEN_LIMIT, 2 * len(self._open))
        return created

    @staticmethod
    def _created(bolt11: str, payment_hash: str, amount_msat: int) -> CreatedInvoice:
        try:
            expires_at = decode_invoice(bolt11).expires_at
        except InvalidInvoice as exc:
            raise BackendError(f"LND returned an invoice that does not decode: {exc}") from None
        return CreatedInvoice(
            bolt11=bolt11,
            payment_hash=payment_hash,
            amount_msat=amount_msat,
            expires_at=expires_at,
        )

    async def _lookup_raw(self, payment_hash: str) -> Any:
        try:
            r_hash = bytes.fromhex(payment_hash)
        except ValueError:
            raise BackendError(f"not a payment hash: {payment_hash!r}") from None
        if self._ln is None:
            raise BackendError("the LND backend is not started")
        try:
            return await self._ln.LookupInvoice(
                lightning_pb2.PaymentHash(r_hash=r_hash), metadata=self._metadata, timeout=30
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:  # lnd's answer for an unknown hash
                raise UnknownInvoice(f"unknown invoice {payment_hash}: not at this node") from None
            raise _backend_error(exc, self.target) from None

    async def lookup_invoice(self, payment_hash: str) -> InvoiceStatus:
        """The invoice's state. BackendError if the node has no such invoice."""
        inv = await self._lookup_raw(payment_hash.lower())
        return _status(inv)

    # -- settlements ------------------------------------------------------------------------

    async def settlements(self, after: int) -> AsyncIterator[Settlement]:
        """Settled invoices, backlog first then live, reconnecting with backoff forever.

        Raises BackendError once the backend is closed.
        """
        cursor = after
        recent: OrderedDict[str, None] = OrderedDict()
        backoff = 0.5

        def fresh(s: Settlement) -> bool:
            if s.payment_hash in recent:
                return False
            recent[s.payment_hash] = None
            if len(recent) > _RECENT:
                recent.popitem(last=False)
            self._open.pop(s.payment_hash, None)
            return True

        while True:
            if self._closed or self._ln is None:
                raise BackendError("the LND backend is closed")
            call: Any = None
            try:
                # Subscribe first, reconcile second: whatever settles in between is in
                # the stream, and whatever settled before is found by reconciliation.
                call = self._ln.SubscribeInvoices(
                    lightning_pb2.InvoiceSubscription(settle_index=cursor),
                    metadata=self._metadata,
                )
                for s in await self._reconcile(cursor):
                    if fresh(s):
                        # A settlement from the complete ListInvoices view moves the
                        # cursor; one LookupInvoice found (a gap) leaves it where it is.
                        cursor = max(cursor, s.cursor)
                        yield Settlement(
                            s.payment_hash,
                            s.amount_received_msat,
                            s.preimage,
                            s.settled_at,
                            max(cursor, s.cursor),
                        )
                backoff = 0.5
                async for inv in _stream(call, self._closing):
                    if inv.state != _INV.SETTLED or not inv.settle_index:
                        continue
                    s = _settlement(inv)
                    if fresh(s):
                        yield s
                    cursor = max(cursor, s.cursor)
                # lnd ended the stream (shutting down): connect again.
            except grpc.aio.AioRpcError as exc:
                if self._closed:
                    pass
                elif _PERMISSION_DENIED in (exc.details() or ""):
                    _log.error(
                        "SubscribeInvoices refused: the macaroon lacks invoices:read (or "
                        "uri:/lnrpc.Lightning/SubscribeInvoices): payments are seen only by "
                        "the lookups of each retry; retrying in %.1fs",
                        backoff,
                    )
                else:
                    _log.warning(
                        "SubscribeInvoices: %s; reconnecting in %.1fs", _describe(exc), backoff
                    )
            except BackendError as exc:
                if not self._closed:
                    _log.warning(
                        "LND settlement reconciliation: %s; reconnecting in %.1fs", exc, backoff
                    )
            finally:
                if call is not None:
                    call.cancel()
            if not self._closed:
                await self._pause(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    async def _reconcile(self, cursor: int) -> list[Settlement]:
        """Settlements a fresh subscription from ``cursor`` will not replay."""
        found: list[Settlement] = []
        if cursor == 0:
            # lnd replays nothing for settle_index 0: read the settled invoices instead.
            async for inv in self._list_invoices():
                if inv.state == _INV.SETTLED and inv.settle_index:
                    found.append(_settlement(inv))
        found.sort(key=lambda s: s.cursor)
        listed = {s.payment_hash for s in found}
        now = int(time.time())
        gaps: list[Settlement] = []
        for payment_hash, expires_at in list(self._open.items()):
            if payment_hash in listed:
                continue
            try:
                inv = await self._lookup_raw(payment_hash)
            except UnknownInvoice:
                self._open.pop(payment_hash, None)
                continue
            if inv.state == _INV.SETTLED and inv.settle_index:
                s = _settlement(inv)
                # Above the cursor the subscription replays it, in order; at or below it
                # the stream never will: a gap, yielded without moving the cursor.
                if s.cursor <= cursor:
                    gaps.append(
                        Settlement(
                            s.payment_hash, s.amount_received_msat, s.preimage, s.settled_at, cursor
                        )
                    )
            elif inv.state == _INV.CANCELED or expires_at + 3600 < now:
                self._open.pop(payment_hash, None)
        return found + gaps

    # -- hold invoices (invoicesrpc) ------------------------------------------------------

    async def create_hold_invoice(
        self, amount_msat: int, description: str, expiry_s: int, payment_hash: str
    ) -> CreatedInvoice:
        if amount_msat <= 0 or expiry_s <= 0:
            raise ValueError("amount_msat and expiry_s must be positive")
        res = await self._unary(
            self._invoices.AddHoldInvoice,
            invoices_pb2.AddHoldInvoiceRequest(
                memo=description,
                hash=bytes.fromhex(payment_hash),
                value_msat=amount_msat,
                expiry=expiry_s,
                cltv_expiry=self.hold_cltv_expiry,
            ),
        )
        return self._created(str(res.payment_request), payment_hash.lower(), amount_msat)

    async def hold_status(self, payment_hash: str) -> HoldInvoiceStatus:
        inv = await self._lookup_raw(payment_hash.lower())
        state = {_INV.OPEN: "open", _INV.ACCEPTED: "accepted", _INV.SETTLED: "settled"}.get(
            inv.state, "canceled"
        )
        blocks_left = None
        if state == "accepted":
            heights = [
                int(h.expiry_height)
                for h in inv.htlcs
                if h.state == lightning_pb2.InvoiceHTLCState.Value("ACCEPTED")
            ]
            if heights:
                info = await self._unary(self._ln.GetInfo, lightning_pb2.GetInfoRequest())
                blocks_left = min(heights) - int(info.block_height)
        return HoldInvoiceStatus(
            payment_hash=payment_hash.lower(),
            state=state,  # type: ignore[arg-type]
            amount_msat=int(inv.value_msat),
            amount_received_msat=int(inv.amt_paid_msat),
            blocks_left=blocks_left,
        )

    async def settle_hold(self, preimage: str) -> None:
        await self._unary(
            self._invoices.SettleInvoice,
            invoices_pb2.SettleInvoiceMsg(preimage=bytes.fromhex(preimage)),
        )

    async def cancel_hold(self, payment_hash: str) -> None:
        await self._unary(
            self._invoices.CancelInvoice,
            invoices_pb2.CancelInvoiceMsg(payment_hash=bytes.fromhex(payment_hash)),
        )

    # -- outgoing payments ------------------------------------------------------------------

    async def pay_invoice(
        self, bolt11: str, max_fee_msat: int, timeout_s: int, amount_msat: int | None = None
    ) -> PaymentResult:
        """Pay with a fee cap (``amount_msat`` for an amountless invoice: SendPaymentV2's
        ``amt_msat``). FAILED only when lnd says so; in flight or unknown is PENDING."""
        try:
            payment_hash = decode_invoice(bolt11).payment_hash
        except InvalidInvoice as exc:
            return invalid_invoice_payment(exc)
        if self._router is None:
            raise BackendError("the LND backend is not started")
        request = router_pb2.SendPaymentRequest(
            payment_request=bolt11,
            timeout_seconds=max(1, int(timeout_s)),
            fee_limit_msat=max(0, int(max_fee_msat)),
            no_inflight_updates=True,
            amt_msat=0 if amount_msat is None else int(amount_msat),
        )
        call = self._router.SendPaymentV2(request, metadata=self._metadata)
        try:
            return await self._final(call, payment_hash, timeout_s + self.pay_grace_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.ALREADY_EXISTS:
                # lnd answers this both for a payment already made and for one in flight;
                # its record says which. Without an answer the outcome is unknown: pending,
                # asked again later (never failed, so nothing is paid twice).
                known = await self._track(payment_hash, wait_s=min(5.0, timeout_s))
                if known is not None:
                    return known
                return PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)
            if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                # Refused before any HTLC left (bad or expired invoice, self-payment).
                return PaymentResult(
                    payment_hash=payment_hash,
                    state=PaymentState.FAILED,
                    failure_reason=exc.details() or exc.code().name,
                )
            if exc.code() is grpc.StatusCode.UNKNOWN:
                # lnd's own refusal, a plain error (an expired, amountless or own invoice,
                # an amount beside the invoice's): its handler answered, so whatever its
                # payment record says now is final; none at all means nothing was sent.
                return await self._refused(payment_hash, exc.details() or exc.code().name)
            _log.warning(
                "payment %s: %s; outcome unknown, asking the node", payment_hash, _describe(exc)
            )
            known = await self._track(payment_hash, wait_s=2.0)
            if known is not None and known.state is PaymentState.SUCCEEDED:
                return known
            return PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)
        finally:
            call.cancel()

    async def _refused(self, payment_hash: str, reason: str) -> PaymentResult:
        """After lnd's handler refused a SendPaymentV2: FAILED with lnd's reason when it
        has no payment for the hash or its record failed; else what the record says."""
        try:
            record = await self.lookup_payment(payment_hash)
        except BackendError as exc:
            _log.warning("payment %s: refused (%s), record unknown: %s", payment_hash, reason, exc)
            return PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)
        if record.state is PaymentState.FAILED:
            return PaymentResult(
                payment_hash=payment_hash, state=PaymentState.FAILED, failure_reason=reason
            )
        return record

    async def _final(self, call: Any, payment_hash: str, wait_s: float) -> PaymentResult:
        """The last state a payment stream reports within ``wait_s``; PENDING if none final."""
        last: PaymentResult = PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)
        try:
            async with asyncio.timeout(wait_s):
                async for payment in call:
                    last = _payment(payment, payment_hash)
                    if last.state is not PaymentState.PENDING:
                        return last
        except TimeoutError:
            _log.warning("payment %s still in flight after %.0fs: pending", payment_hash, wait_s)
        return last

    async def _track(self, payment_hash: str, wait_s: float) -> PaymentResult | None:
        """What TrackPaymentV2 says (final if it comes within ``wait_s``); None when lnd
        has no payment for this hash or cannot be asked."""
        if self._router is None:
            raise BackendError("the LND backend is not started")
        call = self._router.TrackPaymentV2(
            router_pb2.TrackPaymentRequest(payment_hash=bytes.fromhex(payment_hash)),
            metadata=self._metadata,
        )
        try:
            return await self._final(call, payment_hash, wait_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.NOT_FOUND:
                _log.warning("TrackPaymentV2 %s: %s", payment_hash, _describe(exc))
            return None
        finally:
            call.cancel()

    async def lookup_payment(self, payment_hash: str) -> PaymentResult:
        """lnd's record of an outgoing payment: no record at all is FAILED (never started)."""
        payment_hash = payment_hash.lower()
        if self._router is None:
            raise BackendError("the LND backend is not started")
        call = self._router.TrackPaymentV2(
            router_pb2.TrackPaymentRequest(
                payment_hash=bytes.fromhex(payment_hash), no_inflight_updates=False
            ),
            metadata=self._metadata,
        )
        try:
            async with asyncio.timeout(10):
                async for payment in call:
                    return _payment(payment, payment_hash)  # the current state comes first
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                return PaymentResult(
                    payment_hash=payment_hash,
                    state=PaymentState.FAILED,
                    failure_reason="no payment for this hash at the node",
                )
            raise _backend_error(exc, self.target) from None
        except TimeoutError:
            pass
        finally:
            call.cancel()
        return PaymentResult(payment_hash=payment_hash, state=PaymentState.PENDING)


# -- conversions ------------------------------------------------------------------------------


async def _stream(call: Any, closing: asyncio.Event | None) -> AsyncIterator[Any]:
    """The messages of a server stream, ending early when the backend closes."""
    iterator = call.__aiter__()
    while True:
        nxt = asyncio.ensure_future(iterator.__anext__())
        waits: set[asyncio.Future[Any]] = {nxt}
        stop = asyncio.ensure_future(closing.wait()) if closing is not None else None
        if stop is not None:
            waits.add(stop)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stop is not None:
                stop.cancel()
        if not nxt.done():
            nxt.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await nxt
            return
        try:
            yield nxt.result()
        except StopAsyncIteration:
            return


def _macaroon_refused(exc: grpc.aio.AioRpcError) -> bool:
    details = exc.details() or ""
    return (
        exc.code() is grpc.StatusCode.UNAUTHENTICATED
        or "verification failed" in details
        or "macaroon" in details.lower()
    )


def _missing_message(target: str, missing: dict[str, list[str]]) -> str:
    needed = sorted(set(REQUIRED_PERMISSIONS.values()))
    lacking = "; ".join(
        f"{permission} (for {', '.join(m.rsplit('/', 1)[1] for m in methods)})"
        for permission, methods in sorted(missing.items())
    )
    return (
        f"the macaroon given for LND at {target} lacks permissions satsgate needs: "
        f"{lacking}. Bake one with: lncli bakemacaroon {' '.join(needed)} "
        "--save_to <file>, and pass it with --lnd-macaroon"
    )


def _backend_error(exc: grpc.aio.AioRpcError, target: str) -> BackendError:
    details = exc.details() or ""
    if _macaroon_refused(exc):
        return BackendError(f"LND at {target} refused the macaroon: {details}")
    if _PERMISSION_DENIED in details:
        return BackendError(f"LND at {target}: the macaroon lacks a permission: {details}")
    if exc.code() is grpc.StatusCode.UNAVAILABLE:
        return BackendError(f"LND at {target} is unreachable: {details}")
    return BackendError(f"LND: {_describe(exc)}")


def _settlement(inv: Any) -> Settlement:
    return Settlement(
        payment_hash=bytes(inv.r_hash).hex(),
        amount_received_msat=int(inv.amt_paid_msat),
        preimage=bytes(inv.r_preimage).hex(),
        settled_at=int(inv.settle_date) or int(time.time()),
        cursor=int(inv.settle_index),
    )


def _status(inv: Any) -> InvoiceStatus:
    payment_hash = bytes(inv.r_hash).hex()
    amount_msat = int(inv.value_msat)
    if inv.state == _INV.SETTLED:
        preimage = bytes(inv.r_preimage)
        return InvoiceStatus(
            payment_hash=payment_hash,
            state=InvoiceState.SETTLED,
            amount_msat=amount_msat,
            amount_received_msat=int(inv.amt_paid_msat),
            preimage=preimage.hex() if preimage else None,
        )
    expired = int(inv.creation_date) + int(inv.expiry) <= time.time()
    if inv.state == _INV.CANCELED:
        # lnd cancels an invoice when it expires: say which it was.
        state = InvoiceState.EXPIRED if expired else InvoiceState.CANCELED
        return InvoiceStatus(payment_hash=payment_hash, state=state, amount_msat=amount_msat)
    # OPEN, or ACCEPTED (HTLCs held, not settled: not paid yet).
    state = InvoiceState.EXPIRED if expired and inv.state == _INV.OPEN else InvoiceState.OPEN
    return InvoiceStatus(
        payment_hash=payment_hash,
        state=state,
        amount_msat=amount_msat,
        amount_received_msat=int(inv.amt_paid_msat),
    )


def _payment(payment: Any, payment_hash: str) -> PaymentResult:
    status = payment.status
    if status == _PAY.SUCCEEDED:
        preimage = str(payment.payment_preimage).lower()
        return PaymentResult(
            payment_hash=payment_hash,
            state=PaymentState.SUCCEEDED,
            amount_msat=int(payment.value_msat),
            fee_msat=int(payment.fee_msat),
            preimage=preimage if preimage.strip("0") else None,
        )
    if status == _PAY.FAILED:
        reason = lightning_pb2.PaymentFailureReason.Name(payment.failure_reason)
        return PaymentResult(
            payment_hash=payment_hash,
            state=PaymentState.FAILED,
            amount_msat=int(payment.value_msat),
            failure_reason=reason,
        )
    return PaymentResult(
        payment_hash=payment_hash, state=PaymentState.PENDING, amount_msat=int(payment.value_msat)
    )
