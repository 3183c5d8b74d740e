"""The store's connection cut at a spend's commit: PostgreSQL committed the spend, and
satsgate never heard so. A TCP relay between satsgate and PostgreSQL (real wire, both
ways) drops the connection instead of passing on the server's answer to the spend. The
caller is answered 503 with nothing served; the spend, found committed, is refunded in
full once, and a retry of the credential is shown that refund. The same for a job's
spend, and for the spends of one loop iteration cut together in their one exchange."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from satsgate.store import Payment, PaymentStatus
from satsgate.store.sql import StoreUnavailable
from tests.conftest import ThreadedServer, dev_pay, free_port, make_settings
from tests.epub_maker import chapter, make_epub, nav_doc, prose
from tests.ledger_check import assert_ledger_balances
from tests.pg_cluster import PgCluster

CARD = {"template": "headline", "title": "Cut", "subtitle": "at the commit"}
SPEND = b"SET status = 'serving'"  # the spend's statement, as the client sends it


class CuttingRelay:
    """A TCP relay to PostgreSQL on its own thread and loop. Armed with a statement's text
    and an answer, it drops the connection that sent that statement at the server's
    answer (``UPDATE 1`` of an autocommitted spend, ``COMMIT`` of a transaction), which
    is never passed on; armed with no answer, as the statement is sent."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self._target = target_port
        self.armed: tuple[bytes, bytes] | None = None
        self.cut = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(10)

    def arm(self, statement: bytes, answer: bytes) -> None:
        self.armed = (statement, answer)

    def arm_unsent(self, statement: bytes) -> None:
        """Drop the connection that sends ``statement`` before it reaches the server."""
        self.armed = (statement, b"")

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self._target)
        marked = False  # this connection sent the armed statement

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, answers: bool) -> None:
            nonlocal marked
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await r.read(65536):
                    armed = self.armed
                    if armed is not None and not answers and armed[0] in data:
                        marked = True
                        if not armed[1]:  # never sent: nothing of it reaches the server
                            self.armed = None
                            self.cut.set()
                            break
                    if answers and marked and armed is not None and armed[1] in data:
                        self.armed = None
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
            relay.arm(SPEND, b"UPDATE 1\x00")
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


async def test_a_jobs_spend_committed_but_never_acknowledged_fails_the_job_with_its_refund(
    relay_url: tuple[CuttingRelay, str], tmp_path: Path
) -> None:
    """The same for a job-mode call, whose spend and job row are one transaction cut at
    its COMMIT's answer: the job is never started, and is failed with the refund."""
    relay, url = relay_url
    server = ThreadedServer(make_settings(tmp_path / "data", store_url=url))
    titles = ["One"]
    book = make_epub("A book", [nav_doc(titles), chapter(1, "One", prose(60, seed=1))])
    body = {"epubBase64": base64.b64encode(book).decode(), "targetLanguage": "es"}
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            first = await client.post("/api/l402/translate-epub", json=body)
            assert first.status_code == 402, first.text
            payment_id = first.json()["paymentId"]
            preimage = await dev_pay(client, first.json()["invoice"])
            auth = f"L402 {first.json()['macaroon']}:{preimage}"
            relay.arm(SPEND, b"COMMIT\x00")
            cut = await client.post(
                "/api/l402/translate-epub", json=body, headers={"Authorization": auth}
            )
            assert relay.cut.is_set()
            assert cut.status_code == 503, cut.text
            row = server.call(lambda: server.store.payments.get(payment_id))
            assert row is not None and row.status is PaymentStatus.SERVING  # committed
            gate = server.gate
            assert server.call(gate.spender.refund_unserved_in_doubt) == 1
            jobs = server.call(lambda: server.store.jobs.in_progress(server.store.instance_id))
            assert [j for j in jobs if j.payment_id == payment_id] == []
            job = server.call(
                lambda: server.store.db.run_sync(
                    lambda c: c.execute(
                        "SELECT job_id, status FROM jobs WHERE payment_id = ?", (payment_id,)
                    ).fetchone()
                )
            )
            assert job is not None and job[1] == "FAILED"
            polled = await client.get("/api/l402/job-status", params={"requestId": job[0]})
            assert polled.json()["status"] == "FAILED"
            assert polled.json()["refund"]["amount_sats"] == first.json()["amountSats"]
        assert_ledger_balances(server)
    finally:
        server.stop()


async def test_an_exchange_of_several_spends_cut_at_its_answer_refunds_each_once(
    relay_url: tuple[CuttingRelay, str], tmp_path: Path
) -> None:
    """Six paid calls' spends made in one loop iteration go to PostgreSQL in one
    exchange, and the connection is cut at its answer: PostgreSQL committed all six, and
    each spender hears "store unavailable" (the call answered 503, nothing served). Each
    spend is refunded in full once, and a retry of a credential is shown its refund."""
    relay, url = relay_url
    server = ThreadedServer(make_settings(tmp_path / "data", store_url=url))
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            paid: list[tuple[str, str, int]] = []  # payment id, credential, amount (sats)
            for _ in range(6):
                first = await client.post("/api/l402/render-card", json=CARD)
                assert first.status_code == 402
                preimage = await dev_pay(client, first.json()["invoice"])
                credential = f"L402 {first.json()['macaroon']}:{preimage}"
                paid.append((first.json()["paymentId"], credential, first.json()["amountSats"]))

            def payment(payment_id: str) -> Payment | None:
                row: Payment | None = server.call(lambda: server.store.payments.get(payment_id))
                return row

            def refunded_msat(payment_id: str) -> list[int]:
                refunds = server.call(lambda: server.store.refunds.for_payment(payment_id))
                return [r.amount_msat for r in refunds]

            for payment_id, _, _ in paid:  # settled in the store before the cut is armed
                for _ in range(100):
                    row = payment(payment_id)
                    if row is not None and row.status is PaymentStatus.PAID:
                        break
                    await asyncio.sleep(0.05)
            relay.arm(SPEND, b"UPDATE 1\x00")

            async def spend_at_once() -> list[bool | BaseException]:
                now = int(time.time())
                spends = (server.store.payments.spend(p, now) for p, _, _ in paid)
                outcomes: list[bool | BaseException] = await asyncio.gather(
                    *spends, return_exceptions=True
                )
                return outcomes

            outcomes = server.call(spend_at_once)
            assert relay.cut.is_set()
            assert all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
            for payment_id, _, _ in paid:  # committed, never served
                row = payment(payment_id)
                assert row is not None and row.status is PaymentStatus.SERVING
            gate = server.gate
            assert server.call(gate.spender.refund_unserved_in_doubt) == len(paid)
            assert server.call(gate.spender.refund_unserved_in_doubt) == 0  # once
            for payment_id, _, sats in paid:
                assert refunded_msat(payment_id) == [sats * 1000]
            _, credential, sats = paid[0]
            again = await client.post(
                "/api/l402/render-card", json=CARD, headers={"Authorization": credential}
            )
            assert again.status_code != 200
            assert again.json()["refund"]["amount_sats"] == sats
        assert_ledger_balances(server)
    finally:
        server.stop()


async def test_a_spend_in_doubt_retried_while_its_call_runs_is_left_to_that_call(
    relay_url: tuple[CuttingRelay, str], tmp_path: Path
) -> None:
    """A spend cut before PostgreSQL had it (nothing committed) is in doubt; the caller's
    retry then spends the payment and its call runs. The sweep of spends in doubt leaves
    that call alone: refunding it would pay the payer back for a call it is served. And
    a spend that did commit stays in doubt through a retry refused as already spent."""
    relay, url = relay_url
    server = ThreadedServer(make_settings(tmp_path / "data", store_url=url))
    payments = server.store.payments
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            paid = []
            for _ in range(2):
                first = await client.post("/api/l402/render-card", json=CARD)
                assert first.status_code == 402
                await dev_pay(client, first.json()["invoice"])
                paid.append(first.json()["paymentId"])

        def status(payment_id: str) -> PaymentStatus:
            row: Payment | None = server.call(lambda: payments.get(payment_id))
            assert row is not None
            return row.status

        async def spend(payment_id: str) -> bool | StoreUnavailable:
            try:
                spent: bool = await payments.spend(payment_id, int(time.time()))
            except StoreUnavailable as exc:
                return exc
            return spent

        for payment_id in paid:
            for _ in range(100):
                if status(payment_id) is PaymentStatus.PAID:
                    break
                await asyncio.sleep(0.05)
        gate = server.gate
        retried, committed = paid

        relay.arm_unsent(SPEND)
        assert isinstance(server.call(lambda: spend(retried)), StoreUnavailable)
        assert relay.cut.is_set() and status(retried) is PaymentStatus.PAID  # never had it
        assert server.call(lambda: spend(retried)) is True  # the retry: its call runs
        assert server.call(gate.spender.refund_unserved_in_doubt) == 0
        assert status(retried) is PaymentStatus.SERVING
        assert server.call(lambda: server.store.refunds.for_payment(retried)) == []

        relay.cut.clear()
        relay.arm(SPEND, b"UPDATE 1\x00")
        assert isinstance(server.call(lambda: spend(committed)), StoreUnavailable)
        assert relay.cut.is_set() and status(committed) is PaymentStatus.SERVING
        assert server.call(lambda: spend(committed)) is False  # the retry: already spent
        assert server.call(gate.spender.refund_unserved_in_doubt) == 1
        refunds = server.call(lambda: server.store.refunds.for_payment(committed))
        assert len(refunds) == 1 and refunds[0].amount_msat > 0
    finally:
        server.stop()
