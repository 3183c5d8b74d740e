"""Two `satsgate serve` instances on one PostgreSQL store behind one node (the fake LND,
speaking its gRPC): any instance serves any request, a credential raced across both
serves once, an instance killed with SIGKILL loses no paid call, its duties fail over,
and a job started on one is followed to its end on the other. The ledger balances after
each."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lnurl.helpers import url_decode

from satsgate.operator import ensure_operator_token
from satsgate.store import PaymentStatus, Store
from tests.conftest import free_port, until
from tests.engines.test_ai_openai import CHAT, ENGINES, MODELS, TIMEOUT_S
from tests.epub_maker import chapter, make_epub, nav_doc, prose
from tests.fakes.fake_ai_upstream import OPENAI_KEY, FakeAIUpstream
from tests.fakes.fake_lnd import FakeLnd, FakeLndNode, running_lnd
from tests.ledger_check import _balances, _rows_of
from tests.mcp_client import call, rpc, sse_messages, tool_result
from tests.payments.test_sessions import (
    WANTS_SESSION,
    Client,
    credential,
    receipt,
    session_challenge,
    unb64url,
)
from tests.pg_cluster import PgCluster

ROOT = Path(__file__).resolve().parents[2]
CARD = {"template": "headline", "title": "Two instances", "subtitle": "one store"}
LEASE_S = 3  # an instance silent this long is gone (the default is 30 s)


class Instance:
    """One `satsgate serve` process of the group."""

    def __init__(
        self, name: str, lnd: FakeLnd, store_url: str, data_dir: Path, config: Path
    ) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir.parent / f"{name}.log"
        self._args = [
            sys.executable, "-m", "satsgate.cli", "serve", "--port", str(self.port),
            "--config", str(config), "--data-dir", str(data_dir), "--store-url", store_url,
            "--backend", "lnd", "--network", "regtest", "--lnd-grpc", lnd.target,
            "--lnd-tls-cert", str(lnd.tls_cert), "--lnd-macaroon", str(lnd.macaroon_path),
        ]  # fmt: skip
        self._env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SATSGATE_INSTANCE_LEASE_S": str(LEASE_S),
            "SATSGATE_CHALLENGE_RATE_PER_MIN": "0",
            "SATSGATE_REFUND_RATE_PER_MIN": "0",
            "SATSGATE_ESTIMATE_RATE_PER_MIN": "0",
            "SATSGATE_SESSION_IDLE_TIMEOUT_S": "8",  # the sessions sweep every 2 s
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self._args, stderr=log, env=self._env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            if "satsgate listening on" in self.log.read_text()[offset:]:
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not start:\n{self.log.read_text()}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def provider_config(upstream: FakeAIUpstream) -> str:
    """generate-text (and the other AI engines) through an OpenAI-compatible upstream."""
    models = "".join(f'"{number}" = "{name}"\n' for number, name in MODELS.items())
    return (
        f'[providers.cloud]\nkind = "openai"\nbase_url = "{upstream.url}/v1"\n'
        f'api_key = "{OPENAI_KEY}"\ntimeout_s = {TIMEOUT_S}\n\n'
        f"[providers.cloud.models]\n{models}\n[engines]\n"
        + "".join(f'{name} = "cloud"\n' for name in ENGINES)
    )


class Group:
    def __init__(self, lnd: FakeLnd, store_url: str, tmp: Path, upstream: FakeAIUpstream) -> None:
        self.lnd = lnd
        self.store_url = store_url
        self.upstream = upstream
        self.data_dir = data = tmp / "data"  # one data dir (secret, files) for both: shared
        config = tmp / "satsgate.toml"
        config.write_text(provider_config(upstream))
        self.a = Instance("a", lnd, store_url, data, config)
        self.b = Instance("b", lnd, store_url, data, config)

    async def pay(self, bolt11: str) -> str:
        return await asyncio.to_thread(self.lnd.node.pay_from_outside, bolt11)

    async def store(self) -> Store:
        store = Store(Path("unused"), self.store_url)
        await store.open()
        return store


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeAIUpstream]:
    fake = FakeAIUpstream()
    yield fake
    fake.stop()


@pytest.fixture
def group(pg_cluster: PgCluster, tmp_path: Path, upstream: FakeAIUpstream) -> Iterator[Group]:
    upstream.clear()
    (tmp_path / "lnd").mkdir()
    with running_lnd(tmp_path / "lnd") as lnd:
        group = Group(lnd, pg_cluster.new_database(), tmp_path, upstream)
        group.a.start()
        group.b.start()
        try:
            yield group
        finally:
            group.a.stop()
            group.b.stop()


@pytest.fixture
async def clients(group: Group) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with (
        httpx.AsyncClient(base_url=group.a.url, timeout=60) as a,
        httpx.AsyncClient(base_url=group.b.url, timeout=60) as b,
    ):
        yield a, b


async def paid_card(group: Group, issuer: httpx.AsyncClient) -> tuple[str, str]:
    """A render-card credential from ``issuer``'s 402, paid at the node: (auth, id)."""
    resp = await issuer.post("/api/l402/render-card", json=CARD)
    assert resp.status_code == 402, resp.text
    body = resp.json()
    preimage = await group.pay(body["invoice"])
    return f"L402 {body['macaroon']}:{preimage}", str(body["paymentId"])


async def assert_ledger_balances(group: Group) -> dict[str, Any]:
    """received = earned + refunded + held + open, in total and per day, as the shared
    store's rows say (tests/ledger_check.py); the totals."""

    def check() -> dict[str, Any]:
        loop = asyncio.new_event_loop()
        store = Store(Path("unused"), group.store_url)
        loop.run_until_complete(store.open())
        try:
            return _balances(
                lambda: loop.run_until_complete(store.db.run_sync(_rows_of)),
                lambda: loop.run_until_complete(store.ledger.report()),
            )
        finally:
            loop.run_until_complete(store.close())
            loop.close()

    report = await asyncio.to_thread(check)
    return dict(report["totals"])


async def statuses(group: Group, payment_ids: list[str]) -> dict[str, PaymentStatus]:
    store = await group.store()
    try:
        found = {}
        for pid in payment_ids:
            row = await store.payments.get(pid)
            assert row is not None
            found[pid] = row.status
        return found
    finally:
        await store.close()


async def test_a_credential_raced_across_two_instances_is_served_once(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, b = clients
    auth, payment_id = await paid_card(group, a)  # issued by A, paid at the node

    async def call(client: httpx.AsyncClient) -> tuple[str, int, bytes]:
        resp = await client.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": auth}
        )
        return str(client.base_url), resp.status_code, resp.content

    answers = await asyncio.gather(*(call(a if i % 2 else b) for i in range(50)))
    served = [(where, body) for where, code, body in answers if code == 200]
    # One instance ran the call; a repeat that reached it within the dedup window got
    # the same answer again (its cache is its own: docs/scale.md), one that reached the
    # other instance found the credential spent.
    assert served and len({where for where, _ in served}) == 1, answers
    assert len({body for _, body in served}) == 1
    refused = [body for _, code, body in answers if code != 200]
    assert len(served) + len(refused) == 50
    for body in refused:
        assert b"already" in body or b"spent" in body or b"used" in body, body
    assert (await statuses(group, [payment_id]))[payment_id] is PaymentStatus.SPENT
    total = await assert_ledger_balances(group)
    assert total["earned_msat"] == total["received_msat"] > 0  # one call, paid once
    assert total["refunded_msat"] == 0

    # The operator sees both instances and which one holds each duty.
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "satsgate.cli", "status", "--json", "--store-url", group.store_url],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    live = [i for i in report["instances"] if i["state"] == "live"]
    assert len(live) == 2 and {i["pid"] for i in live} == {group.a.pid, group.b.pid}
    held = [duty for i in live for duty in i["duties"]]
    assert "callbacks-deliver" in held and len(held) == len(set(held))  # each on one
    token = ensure_operator_token(group.data_dir)
    page = await b.get("/operator", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and 'id="instances-table"' in page.text
    assert all(i["instance"] in page.text for i in live)


async def test_a_sigkill_mid_burst_loses_no_paid_call_and_the_duties_fail_over(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, b = clients
    credentials = [await paid_card(group, b) for _ in range(12)]  # issued by B, spent at A

    async def call(auth: str) -> int:
        try:
            resp = await a.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
        except httpx.HTTPError:
            return 0  # cut by the kill
        return resp.status_code

    burst = [asyncio.create_task(call(auth)) for auth, _ in credentials]
    await asyncio.sleep(0.15)
    group.a.kill()
    codes = await asyncio.gather(*burst)
    ids = [pid for _, pid in credentials]

    # Within a lease and a beat, B declares A gone and settles what it left serving.
    deadline = time.monotonic() + LEASE_S * 4 + 5
    while time.monotonic() < deadline:
        found = await statuses(group, ids)
        if PaymentStatus.SERVING not in found.values():
            break
        await asyncio.sleep(0.5)
    found = await statuses(group, ids)
    for (auth, pid), code in zip(credentials, codes, strict=True):
        # served (answered before the kill), refunded by B, or never spent (a credential
        # the kill kept from A is still good: B serves it now)
        assert found[pid] in (PaymentStatus.SPENT, PaymentStatus.PAID), (pid, code, found)
        if found[pid] is PaymentStatus.PAID:
            resp = await b.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
            assert resp.status_code == 200, resp.text
    store = await group.store()
    try:
        refunded = {pid for pid in ids if await store.refunds.for_payment(pid)}
        cut = [pid for pid, code in zip(ids, codes, strict=True) if code != 200]
        # a call cut mid-answer was refunded, never both answered and refunded
        answered = {pid for pid, code in zip(ids, codes, strict=True) if code == 200}
        assert not (answered & refunded), (answered, refunded)
        assert set(cut) >= refunded
        # The duties A held are B's now (the sessions sweep runs every 2 s), and A's work
        # is taken up (B's heartbeat declares A gone, then recovers it: the duties can
        # move between those two steps).
        deadline = time.monotonic() + LEASE_S + 10
        while True:
            instances = {row.instance_id: row for row in await store.instances.all()}
            live = [i for i, row in instances.items() if row.gone_at is None]
            holders = await store.duty_leases.holders()
            recovering = [i for i, row in instances.items() if row.gone_at and not row.recovered_at]
            if live and {h for h, _ in holders.values()} == set(live[:1]) and not recovering:
                break
            assert time.monotonic() < deadline, (live, holders, recovering)
            await asyncio.sleep(0.5)
        assert len(live) == 1 and "sessions-sweep" in holders, (live, holders)
        gone = [row for row in instances.values() if row.gone_at is not None]
        assert gone and all(row.recovered_at is not None for row in gone)
    finally:
        await store.close()
    await assert_ledger_balances(group)

    # A comes back as a new instance; the settlement watcher of each applies payments.
    group.a.start()
    auth, pid = await paid_card(group, a)
    resp = await b.post("/api/l402/render-card", json=CARD, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    await assert_ledger_balances(group)


async def test_a_job_started_on_one_instance_is_followed_to_its_end_on_the_other(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    """A job runs at A; B answers its polls from the store and streams its progress to
    an ``await_result`` caller from A's events (NOTIFY): B has no other source of a
    remote job's progress."""
    a, b = clients
    titles = [f"Chapter {i}" for i in range(1, 9)]
    docs = [nav_doc(titles)] + [
        chapter(i, t, prose(300, seed=i)) for i, t in enumerate(titles, start=1)
    ]
    body = {
        "epubBase64": base64.b64encode(make_epub("A book", docs)).decode(),
        "sourceLanguage": "en",
        "targetLanguage": "es",
    }
    group.upstream.latency_s = 0.25  # a job long enough for its progress to be heard
    resp = await a.post("/api/l402/translate-epub", json=body)
    assert resp.status_code == 402, resp.text
    preimage = await group.pay(resp.json()["invoice"])
    auth = f"L402 {resp.json()['macaroon']}:{preimage}"
    started = await a.post("/api/l402/translate-epub", json=body, headers={"Authorization": auth})
    assert started.status_code == 202, started.text
    job_id = started.json()["job_id"]
    # The 202 lost, the client repeats the paid call, at B: refused as used, and shown the
    # job its payment bought (A's replay window is A's alone).
    repeat = await b.post("/api/l402/translate-epub", json=body, headers={"Authorization": auth})
    assert repeat.json()["error_code"] == "PAYMENT_ALREADY_USED", repeat.text
    assert repeat.json()["requestId"] == job_id, repeat.text
    path = httpx.URL(started.json()["poll_url"]).raw_path  # each instance's own base here
    assert httpx.URL(repeat.json()["poll_url"]).raw_path == path
    args = {"requestId": job_id, "jobType": "translate-epub"}
    followed = {"name": "await_result", "arguments": args, "_meta": {"progressToken": "p"}}
    streamed = asyncio.create_task(rpc(b, call("tools/call", followed)))
    seen = []
    heard = []  # the progress B's polls showed, heard from A
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        polled = await b.get("/api/l402/job-status", params={"requestId": job_id})
        assert polled.status_code == 200, polled.text
        seen.append(polled.json()["status"])
        if seen[-1] != "IN_PROGRESS":
            break
        assert polled.json()["poll_interval_ms"] > 0, polled.json()
        if "progress" in polled.json():
            heard.append(polled.json()["progress"]["progress"])
        await asyncio.sleep(0.1)
    assert seen[0] == "IN_PROGRESS" and seen[-1] == "COMPLETED", seen
    assert heard and 0 < heard[-1] < 100, heard
    ended_at = time.monotonic()

    stream = await streamed
    # The end reached B's waiter by its event, not by its fallback read every 5 s.
    assert time.monotonic() - ended_at < 2.5
    assert stream.headers["Content-Type"].startswith("text/event-stream"), stream.text
    *progress, final = sse_messages(stream.text)
    values = [note["params"]["progress"] for note in progress]
    assert all(note["method"] == "notifications/progress" for note in progress)
    assert any(0 < v < 100 for v in values), values  # A's progress, heard at B
    assert values == sorted(values) and values[-1] == 100.0, values
    assert final["result"]["structuredContent"]["status"] == "COMPLETED", final

    result = polled.json()["result"]
    file_url = next(v for k, v in result.items() if isinstance(v, str) and "/files/" in v)
    got = await b.get(file_url)  # a file A wrote, downloaded from B: one shared directory
    assert got.status_code == 200 and got.content[:2] == b"PK"
    await assert_ledger_balances(group)


class LndSessionClient(Client):
    """A session client whose deposits are paid at the fake LND, and whose requests go
    to whichever instance ``http`` names at the time."""

    def __init__(self, group: Group, http: httpx.AsyncClient) -> None:
        super().__init__(http)
        self.group = group

    async def offer(self, slug: str, body: dict[str, Any]) -> tuple[dict[str, str], str]:
        resp = await self.http.post(f"/api/l402/{slug}", json=body, headers=WANTS_SESSION)
        assert resp.status_code == 402, resp.text
        challenge = session_challenge(resp)
        preimage = await self.group.pay(unb64url(challenge["request"])["depositInvoice"])
        return challenge, preimage


async def test_a_sessions_bearer_calls_alternate_instances_and_its_balance_is_exact(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, b = clients
    price = (await a.post("/api/l402/render-card", json=CARD)).json()["amountSats"] * 1000
    client = LndSessionClient(group, a)
    opened = await client.open("render-card", CARD)  # opened on A
    assert opened.status_code == 200, opened.text
    balance = receipt(opened)["balanceMsat"]
    for i in range(10):
        client.http = b if i % 2 == 0 else a
        answered = await client.bearer("render-card", CARD)
        assert answered.status_code == 200, answered.text
        assert receipt(answered)["chargedMsat"] == price
        assert receipt(answered)["balanceMsat"] == balance - price
        balance -= price
    store = await group.store()
    try:
        row = await store.sessions.get(client.session_id)
        assert row is not None and row.balance_msat == balance
        assert row.deposit_msat - row.spent_msat == balance
    finally:
        await store.close()
    client.http = b
    closed = await client.close("render-card", CARD)  # closed on B
    assert closed.status_code == 200, closed.text
    await assert_ledger_balances(group)


async def test_a_session_closed_at_both_instances_at_once_pays_its_balance_back_once(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    """The payer's close reaches A and B together: one payout of the balance to the
    session's return invoice, and both answers say the same."""
    a, b = clients
    wallet = FakeLndNode(alias="payer")  # the payer's node, with a channel to ours
    group.lnd.node.connect(wallet)
    client = LndSessionClient(group, a)
    client.return_invoice = wallet.add_invoice("session refund", 0, 3600).payment_request
    assert (await client.open("render-card", CARD)).status_code == 200  # opened on A
    client.http = b
    answered = await client.bearer("render-card", CARD)  # a call on B
    assert answered.status_code == 200, answered.text
    balance = receipt(answered)["balanceMsat"]
    assert balance > 0

    close = credential(
        client.challenge,
        {
            "action": "close",
            "sessionId": client.session_id,
            "preimage": client.preimage,
            "token": client.token,
        },
    )
    closes = await asyncio.gather(
        *(
            where.post("/api/l402/render-card", json=CARD, headers={"Authorization": close})
            for where in (a, b)
        )
    )
    assert [c.status_code for c in closes] == [200, 200], [c.text for c in closes]
    assert closes[0].json()["refundSats"] == balance // 1000, closes[0].json()
    assert closes[0].json()["refundStatus"] == "succeeded", closes[0].json()
    assert closes[0].json() == closes[1].json()
    refund_hash = next(iter(wallet.invoices)).hex()
    paid = group.lnd.node.payment(refund_hash)
    assert (paid.status, paid.value_msat, paid.attempts) == ("SUCCEEDED", balance, 1)
    returned = wallet.lookup(bytes.fromhex(refund_hash))
    assert (returned.state, returned.amt_paid_msat) == ("SETTLED", balance)
    store = await group.store()
    try:
        row = await store.sessions.get(client.session_id)
        assert row is not None
        assert (row.refund_msat, row.payout_status, row.payout_attempts) == (
            balance,
            "succeeded",
            1,
        )
    finally:
        await store.close()
    total = await assert_ledger_balances(group)
    assert total["refunded_msat"] >= balance


async def test_a_close_waits_for_a_call_under_way_at_the_other_instance_and_refunds_its_failure(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    """A session call is under way at A (its debit taken, the upstream slow) when the
    payer's close reaches B. The call then fails and its price goes back to the session:
    the refund B pays counts it, to the msat."""
    a, b = clients
    wallet = FakeLndNode(alias="payer")
    group.lnd.node.connect(wallet)
    client = LndSessionClient(group, a)
    client.return_invoice = wallet.add_invoice("session refund", 0, 3600).payment_request
    opened = await client.open("render-card", CARD)
    assert opened.status_code == 200, opened.text
    balance = receipt(opened)["balanceMsat"]  # the deposit less the open's own call
    text = {"prompt": "Say hello", "tier": "standard"}
    group.upstream.fail_next(CHAT, "slow")  # answers after the provider's timeout
    under_way = asyncio.create_task(client.bearer("generate-text", text))  # at A
    deadline = time.monotonic() + 10
    while not group.upstream.requests(CHAT):  # A has taken the debit and called upstream
        assert time.monotonic() < deadline and not under_way.done()
        await asyncio.sleep(0.02)

    client.http = b
    closed = await client.close("render-card", CARD)
    failed = await under_way
    assert failed.status_code >= 500, failed.text
    credited = failed.json()["session"]
    assert credited["creditedMsat"] > 0 and credited["balanceMsat"] == balance, credited
    assert closed.status_code == 200, closed.text
    assert closed.json()["refundStatus"] == "succeeded", closed.json()
    assert closed.json()["refundSats"] == balance // 1000
    returned = wallet.lookup(next(iter(wallet.invoices)))
    assert (returned.state, returned.amt_paid_msat) == ("SETTLED", balance)
    total = await assert_ledger_balances(group)
    assert total["earned_msat"] == total["received_msat"] - balance  # the open's call only


async def test_a_refund_link_claimed_at_both_instances_at_once_pays_once(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    """A call paid and failed at A carries its refund link; twenty claims of it, each
    with its own invoice, split across A and B at once: one is paid, once."""
    a, b = clients
    text = {"prompt": "Say hello", "tier": "standard"}
    resp = await a.post("/api/l402/generate-text", json=text)
    assert resp.status_code == 402, resp.text
    preimage = await group.pay(resp.json()["invoice"])
    auth = f"L402 {resp.json()['macaroon']}:{preimage}"
    group.upstream.fail_next(CHAT, "500", times=5)  # retries included
    failed = await a.post("/api/l402/generate-text", json=text, headers={"Authorization": auth})
    assert failed.status_code >= 500, failed.text
    refund = failed.json()["refund"]
    link = httpx.URL(url_decode(refund["lnurl_withdraw"]))
    info = (await b.get(link.raw_path.decode())).json()  # the link A issued, read at B
    assert info["tag"] == "withdrawRequest", info
    amount = info["maxWithdrawable"]
    assert amount == refund["amount_sats"] * 1000 > 0
    callback = httpx.URL(info["callback"]).raw_path.decode()

    wallet = FakeLndNode(alias="payer")
    group.lnd.node.connect(wallet)
    invoices = [wallet.add_invoice("refund", amount, 600).payment_request for _ in range(20)]
    answers = await asyncio.gather(
        *(
            (a if i % 2 else b).get(callback, params={"k1": info["k1"], "pr": invoice})
            for i, invoice in enumerate(invoices)
        )
    )
    assert all(r.status_code == 200 for r in answers)  # LUD-03: a status in both outcomes
    assert sorted(r.json()["status"] for r in answers) == ["ERROR"] * 19 + ["OK"]
    # LUD-03: the OK answers the claim; the payout follows it.
    await until(lambda: any(inv.state == "SETTLED" for inv in wallet.invoices.values()))
    paid = [inv for inv in wallet.invoices.values() if inv.state == "SETTLED"]
    assert len(paid) == 1 and paid[0].amt_paid_msat == amount
    total = await assert_ledger_balances(group)
    assert total["refunded_msat"] == amount


async def test_an_mcp_payment_made_on_one_instance_is_waited_for_and_spent_on_the_other(
    group: Group, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    a, b = clients
    created = await tool_result(a, "create_payment", {"toolName": "render_card"})
    pay = created["structuredContent"]
    # A's checkout page, opened at B; its poll (by the page's token) and the payer's (by
    # paymentId) wait at B, whose own watch of the node wakes them when it settles.
    checkout = httpx.URL(pay["hostedCheckoutUrl"]).path
    page = await b.get(checkout)
    assert page.status_code == 200 and "Waiting for payment" in page.text, page.text
    token = checkout.rsplit("/", 1)[1]
    waiting = [
        asyncio.create_task(b.get(f"/api/payments/{ref}", params={"wait": "20"}))
        for ref in (pay["paymentId"], token)
    ]
    await asyncio.sleep(0.5)
    assert not any(w.done() for w in waiting)
    started = time.monotonic()
    await group.pay(pay["lightningInvoice"])
    for polled in await asyncio.gather(*waiting):
        assert polled.status_code == 200, polled.text
        assert polled.json()["status"] == "paid"
    assert time.monotonic() - started < 5  # woken by the settlement, not the timeout
    assert "paymentId" not in polled.json()  # the page's poll never shows it
    assert "Paid" in (await b.get(checkout)).text
    served = await tool_result(b, "render_card", {"paymentId": pay["paymentId"], **CARD})
    assert served["isError"] is False, served
    again = await tool_result(a, "render_card", {"paymentId": pay["paymentId"], **CARD,
                                                 "title": "another"})  # fmt: skip
    assert again["isError"] is True
    assert again["structuredContent"]["error_code"] == "PAYMENT_ALREADY_USED"
    await assert_ledger_balances(group)
