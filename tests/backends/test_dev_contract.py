"""The backend contract against the built-in dev node."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import coincurve
import pytest

from satsgate.backends.dev import DevBackend
from satsgate.lightning.invoices import sign_invoice
from tests.backend_contract import BackendContract, ExternalInvoice, Settle


class TestDevContract(BackendContract):
    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[DevBackend]:
        node = DevBackend(tmp_path)
        await node.start()
        yield node
        await node.close()

    @pytest.fixture
    def settle(self, backend: DevBackend) -> Settle:
        return backend.simulate_payment

    @pytest.fixture
    def external_invoice(self) -> ExternalInvoice:
        key = coincurve.PrivateKey()

        async def make(amount_msat: int) -> str:
            return sign_invoice(
                network="regtest",
                amount_msat=amount_msat,
                payment_hash=hashlib.sha256(os.urandom(32)).hexdigest(),
                payment_secret=os.urandom(32).hex(),
                description="elsewhere",
                expiry_s=600,
                private_key_hex=key.secret.hex(),
            )

        return make


async def test_dev_node_keeps_its_key_and_invoices_across_restarts(tmp_path: Path) -> None:
    node = DevBackend(tmp_path)
    await node.start()
    pubkey = node.pubkey
    created = await node.create_invoice(1_000, "persist", 300)
    await node.close()
    again = DevBackend(tmp_path)
    await again.start()
    try:
        assert again.pubkey == pubkey
        preimage = await again.simulate_payment(created.bolt11)
        assert hashlib.sha256(bytes.fromhex(preimage)).hexdigest() == created.payment_hash
    finally:
        await again.close()
