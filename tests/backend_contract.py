"""The LightningBackend contract: one suite, run against every backend implementation.

A test module subclasses :class:`BackendContract` and provides three fixtures:

- ``backend``: a started LightningBackend,
- ``settle``: async (bolt11) -> preimage hex, paying the invoice as an outside payer,
- ``external_invoice``: async (amount_msat) -> bolt11 of another node, payable by the backend.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable

import pytest

from satsgate.lightning.backend import (
    InvoiceState,
    LightningBackend,
    PaymentState,
    UnknownInvoice,
)
from satsgate.lightning.invoices import decode_invoice

Settle = Callable[[str], Awaitable[str]]
ExternalInvoice = Callable[[int], Awaitable[str]]


async def _next_settlement(backend: LightningBackend, after: int, wait_s: float = 10) -> object:
    stream = backend.settlements(after)
    try:
        return await asyncio.wait_for(stream.__anext__(), wait_s)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


class BackendContract:
    async def test_info_names_the_network(self, backend: LightningBackend) -> None:
        info = await backend.info()
        assert info.network == "regtest"
        assert len(info.pubkey) == 66

    async def test_invoice_is_exact_and_signed_by_the_node(self, backend: LightningBackend) -> None:
        created = await backend.create_invoice(12_345, "contract test", 300)
        decoded = decode_invoice(created.bolt11)
        assert decoded.amount_msat == created.amount_msat == 12_345
        assert decoded.payment_hash == created.payment_hash
        assert decoded.network == "regtest"
        assert decoded.payee == (await backend.info()).pubkey
        assert abs(created.expires_at - (time.time() + 300)) < 5
        status = await backend.lookup_invoice(created.payment_hash)
        assert status.state is InvoiceState.OPEN

    async def test_settlement_reaches_the_stream_with_preimage(
        self, backend: LightningBackend, settle: Settle
    ) -> None:
        start = 0
        created = await backend.create_invoice(2_000, "stream", 300)
        preimage = await settle(created.bolt11)
        assert hashlib.sha256(bytes.fromhex(preimage)).hexdigest() == created.payment_hash
        seen = None
        after = start
        for _ in range(50):  # skip settlements of other tests sharing the node
            s = await _next_settlement(backend, after)
            after = s.cursor  # type: ignore[attr-defined]
            if s.payment_hash == created.payment_hash:  # type: ignore[attr-defined]
                seen = s
                break
        assert seen is not None
        assert seen.preimage == preimage  # type: ignore[attr-defined]
        assert seen.amount_received_msat >= 2_000  # type: ignore[attr-defined]
        status = await backend.lookup_invoice(created.payment_hash)
        assert status.state is InvoiceState.SETTLED

    async def test_stream_resumes_after_cursor_without_replay(
        self, backend: LightningBackend, settle: Settle
    ) -> None:
        a = await backend.create_invoice(1_000, "a", 300)
        b = await backend.create_invoice(1_000, "b", 300)
        await settle(a.bolt11)
        start = 0
        first = None
        while True:
            s = await _next_settlement(backend, start)
            start = s.cursor  # type: ignore[attr-defined]
            if s.payment_hash == a.payment_hash:  # type: ignore[attr-defined]
                first = s
                break
        assert first is not None
        await settle(b.bolt11)  # paid "while we were away"
        after_a = await _next_settlement(backend, first.cursor)  # type: ignore[attr-defined]
        assert after_a.payment_hash == b.payment_hash  # type: ignore[attr-defined]

    async def test_pays_another_nodes_invoice(
        self, backend: LightningBackend, external_invoice: ExternalInvoice
    ) -> None:
        bolt11 = await external_invoice(3_000)
        result = await backend.pay_invoice(bolt11, max_fee_msat=1_000, timeout_s=30)
        assert result.state is PaymentState.SUCCEEDED
        assert result.payment_hash == decode_invoice(bolt11).payment_hash
        looked = await backend.lookup_payment(result.payment_hash)
        assert looked.state is PaymentState.SUCCEEDED
        # Paying the same invoice again never pays twice and never reads as failed.
        again = await backend.pay_invoice(bolt11, max_fee_msat=1_000, timeout_s=30)
        assert again.state is PaymentState.SUCCEEDED

    async def test_unknown_invoice_lookup_raises(self, backend: LightningBackend) -> None:
        # The type says "no such invoice" (the settlement reconcile drops it), not the text.
        with pytest.raises(UnknownInvoice):
            await backend.lookup_invoice("ab" * 32)
