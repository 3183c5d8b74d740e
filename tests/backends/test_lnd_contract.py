"""The backend contract against LndBackend, over a fake lnd gRPC server with TLS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from satsgate.backends.lnd.backend import LndBackend
from tests.backend_contract import BackendContract, ExternalInvoice, Settle
from tests.fakes.fake_lnd import FakeLnd, FakeLndNode, running_lnd


class TestLndContract(BackendContract):
    @pytest.fixture
    def lnd(self, tmp_path: Path) -> Iterator[FakeLnd]:
        with running_lnd(tmp_path) as lnd:
            yield lnd

    @pytest.fixture
    async def backend(self, lnd: FakeLnd) -> AsyncIterator[LndBackend]:
        node = LndBackend(lnd.target, lnd.tls_cert, lnd.macaroon_path, "regtest")
        await node.start()
        yield node
        await node.close()

    @pytest.fixture
    def settle(self, lnd: FakeLnd) -> Settle:
        async def pay(bolt11: str) -> str:
            return await asyncio.to_thread(lnd.node.pay_from_outside, bolt11)

        return pay

    @pytest.fixture
    def external_invoice(self, lnd: FakeLnd) -> ExternalInvoice:
        other = FakeLndNode(alias="elsewhere")
        lnd.node.connect(other)

        async def make(amount_msat: int) -> str:
            return other.add_invoice("elsewhere", amount_msat, 600).payment_request

        return make
