"""The backend contract against ClnBackend, over a fake lightningd on a real unix socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from satsgate.backends.cln import ClnBackend
from tests.backend_contract import BackendContract, ExternalInvoice, Settle
from tests.fakes.fake_lightningd import FakeLightningd, FakeNode, running_lightningd


class TestClnContract(BackendContract):
    @pytest.fixture
    def lightningd(self) -> Iterator[FakeLightningd]:
        with running_lightningd() as ln:
            yield ln

    @pytest.fixture
    async def backend(self, lightningd: FakeLightningd) -> AsyncIterator[ClnBackend]:
        node = ClnBackend(lightningd.rpc_path, "regtest", wait_timeout_s=1)
        await node.start()
        yield node
        await node.close()

    @pytest.fixture
    def settle(self, lightningd: FakeLightningd) -> Settle:
        async def pay(bolt11: str) -> str:
            return await asyncio.to_thread(lightningd.pay_from_outside, bolt11)

        return pay

    @pytest.fixture
    def external_invoice(self, lightningd: FakeLightningd) -> ExternalInvoice:
        other = FakeNode(alias="elsewhere")
        lightningd.node.connect(other)
        labels = iter(range(1_000_000))

        async def make(amount_msat: int) -> str:
            return str(other.invoice(amount_msat, f"ext-{next(labels)}", "elsewhere")["bolt11"])

        return make
