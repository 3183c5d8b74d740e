"""The store's connection cut at a spend's commit: PostgreSQL committed the spend, and
satsgate never heard so. A TCP relay between satsgate and PostgreSQL (real wire, both
ways) drops the connection instead of passing on the server's answer to the spend. The
caller is answered 503 with nothing served; the spend, found committed, is refunded in
full once, and a retry of the credential is shown that refund."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from satsgate.store import PaymentStatus
from tests.conftest import ThreadedServer, dev_pay, free_port, make_settings
from tests.ledger_check import assert_ledger_balances
from tests.pg_cluster import PgCluster

CARD = {"template": "headline", "title": "Cut", "subtitle": "at the commit"}


class CuttingRelay:
    """A TCP relay to PostgreSQL on its own thread and loop. Armed, it drops the first
    connection whose server answers ``UPDATE 1`` (the answer is never passed on)."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self._target = target_port
        self.armed = threading.Event()
        self.cut = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(10)

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self._target)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, answers: bool) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await r.read(65536):
                    if answers and self.armed.is_set() and b"UPDATE 1\x00" in data:
                        self.armed.clear()
                        self.cut.set()
                        break  # the answer is lost with the connection
                    w.write(data)
                    await w.drain()
            for writer in (client_w, server_w):
                writer.transport.abort()

        await asyncio.gather(pipe(client_r, server_w, False), pipe(server_r, client_w, True))

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def relay_url(pg_cluster: PgCluster) -> Iterator[tuple[CuttingRelay, str]]:
    url = pg_cluster.new_database()
    parts = urlsplit(url)
    relay = CuttingRelay(pg_cluster.port)
    try:
        relayed = parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}")
        yield relay, urlunsplit(relayed)
    finally:
        relay.close()


async def test_a_spend_committed_but_never_acknowledged_is_refunded_once(
    relay_url: tuple[CuttingRelay, str], tmp_path: Path
) -> None:
    relay, url = relay_url
    server = ThreadedServer(make_settings(tmp_path / "data", store_url=url))
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            first = await client.post("/api/l402/render-card", json=CARD)
            assert first.status_code == 402
            payment_id = first.json()["paymentId"]
            preimage = await dev_pay(client, first.json()["invoice"])
            auth = f"L402 {first.json()['macaroon']}:{preimage}"
            for _ in range(100):  # settled in the store before the cut is armed
                row = server.call(lambda: server.store.payments.get(payment_id))
                if row is not None and row.status is PaymentStatus.PAID:
                    break
                await asyncio.sleep(0.05)
            relay.armed.set()
            cut = await client.post(
                "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
            )
            assert relay.cut.is_set()
            assert cut.status_code == 503, cut.text
            assert cut.json()["error_code"] == "STORE_UNAVAILABLE"
            # PostgreSQL did commit it: spent on this instance, and nothing served.
            row = server.call(lambda: server.store.payments.get(payment_id))
            assert row is not None and row.status is PaymentStatus.SERVING
            gate = server.gate
            assert server.call(gate.spender.refund_unserved_in_doubt) == 1
            assert server.call(gate.spender.refund_unserved_in_doubt) == 0  # once
            refunds = server.call(lambda: server.store.refunds.for_payment(payment_id))
            assert [r.amount_msat for r in refunds] == [first.json()["amountSats"] * 1000]
            again = await client.post(
                "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
            )
            assert again.status_code != 200
            assert again.json()["refund"]["amount_sats"] == first.json()["amountSats"]
        assert_ledger_balances(server)
    finally:
        server.stop()
