"""The free-retry window (CONTENT_FILTERED_RETRY) for job-mode calls, end to end: a real
satsgate server whose video engine is the loopback fake of Replicate's predictions API
(tests/fakes/fake_platforms.py). The first prediction fails with an error that reads as a
content refusal ("NSFW content detected"); the retry's prediction succeeds. Paid over
L402 and MCP; the job reads, await_result and the signed callback carry the envelope;
every money outcome is checked in the ledger (a payment in its window is held)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from satsgate.server.app import REFUNDS
from satsgate.services.registry import BY_SLUG
from tests.conftest import ThreadedServer, dev_pay, http_client
from tests.engines.test_predictions import platform_settings
from tests.fakes.fake_platforms import FakeFal, FakeReplicate, Script, mp4
from tests.jobs.test_callbacks import Receiver, network, verified
from tests.jobs.test_callbacks import receiver as receiver  # the fixture
from tests.ledger_check import assert_ledger_balances
from tests.payments.test_rework import Paid, pay, payment_status, totals
from tests.store_access import StoreSettings, store_rows, store_value, store_write

SLUG = "generate-video"
BODY = {"prompt": "a riot in the street", "duration": 5}
CHANGED = {"prompt": "a calm street at dusk", "duration": 5}
PRICE_SATS = 1250  # generate-video, 5 s
FIELDS = (
    "attempt",
    "retries_left",
    "retries_max",
    "rework_until",
    "rework_seconds_left",
    "rework_token",
    "cause",
    "fix",
    "model_said",
    "refusal_scope",
)


def refusing() -> Script:
    return Script(outcome="failed", error="NSFW content detected in the output")


def succeeding() -> Script:
    return Script(outputs=lambda: [mp4(5.0)], starting_polls=0, processing_polls=1)


@pytest.fixture(scope="module")
def platforms() -> Iterator[tuple[FakeReplicate, FakeFal]]:
    rep, falq = FakeReplicate(), FakeFal()
    yield rep, falq
    rep.stop()
    falq.stop()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, platforms: tuple[FakeReplicate, FakeFal]
) -> Iterator[ThreadedServer]:
    settings = platform_settings(tmp_path_factory.mktemp("job-rework"), platforms)
    srv = ThreadedServer(settings, outbound=network())
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(server):
        yield c
    assert_ledger_balances(server)


def rep_of(platforms: tuple[FakeReplicate, FakeFal]) -> FakeReplicate:
    return platforms[0]


async def submit(
    client: httpx.AsyncClient, paid: Paid, body: dict[str, Any], **extra: Any
) -> httpx.Response:
    return await client.post(
        f"/api/l402/{SLUG}",
        json={**body, **extra},
        headers={"Authorization": paid.auth, "X-No-Cache": "1"},
    )


async def ended(client: httpx.AsyncClient, job_id: str, auth: str | None = None) -> dict[str, Any]:
    """Poll the job (with the paying credential, when given) until it is not running."""
    headers = {"Authorization": auth} if auth else {}
    for _ in range(500):
        resp = await client.get(
            "/api/l402/job-status", params={"requestId": job_id}, headers=headers
        )
        assert resp.status_code == 200, resp.text
        state = dict(resp.json())
        if state["status"] != "IN_PROGRESS":
            return state
        await asyncio.sleep(0.02)
    raise AssertionError("the job never ended")


async def refused_job(
    client: httpx.AsyncClient, rep: FakeReplicate, body: dict[str, Any] = BODY, **extra: Any
) -> tuple[Paid, str, dict[str, Any]]:
    """Pay a job whose prediction the upstream refuses; (payment, job id, its end as the
    payer reads it)."""
    rep.script = refusing()
    paid = await pay(client, SLUG, body)
    resp = await submit(client, paid, body, **extra)
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["requestId"])
    done = await ended(client, job_id, paid.auth)
    assert done["status"] == "FAILED", done
    assert done["error_code"] == "CONTENT_FILTERED_RETRY", done
    return paid, job_id, done


def payment_jobs(settings: StoreSettings, payment_id: str) -> dict[str, str]:
    """The payment's jobs: job id -> status."""
    return dict(
        store_rows(settings, "SELECT job_id, status FROM jobs WHERE payment_id = ?", payment_id)
    )


# -- the window ------------------------------------------------------------------------------


async def test_a_refused_job_keeps_its_payment_and_a_retry_with_the_token_runs_a_new_job(
    client: httpx.AsyncClient,
    server: ThreadedServer,
    platforms: tuple[FakeReplicate, FakeFal],
    receiver: Receiver,
) -> None:
    rep = rep_of(platforms)
    before = totals(server)
    made = len(rep.records)
    hook = {"callback_url": receiver.url(), "callback_id": "clip-1"}
    rep.script = refusing()
    paid = await pay(client, SLUG, BODY)
    accepted = await submit(client, paid, BODY, **hook)
    assert accepted.status_code == 202, accepted.text
    first_id, secret = accepted.json()["requestId"], accepted.json()["callback_secret"]
    done = await ended(client, first_id, paid.auth)
    now = time.time()
    # The job ended with the spec's envelope, every field, and no refund.
    assert done["status"] == "FAILED" and done["error_code"] == "CONTENT_FILTERED_RETRY", done
    assert all(name in done for name in FIELDS), done
    assert (done["attempt"], done["retries_left"], done["retries_max"]) == (1, 3, 3)
    until = datetime.fromisoformat(done["rework_until"].replace("Z", "+00:00")).timestamp()
    assert now + 580 <= until <= now + 601
    assert 580 <= done["rework_seconds_left"] <= 600
    assert isinstance(done["rework_token"], str) and len(done["rework_token"]) >= 40
    assert done["refusal_scope"] == "input-or-output" and done["cause"] and done["fix"]
    assert done["model_said"] == "NSFW content detected in the output"
    assert done["paymentId"] == paid.payment_id
    assert "refund" not in done
    assert "replicate" not in str(done).lower() and rep.url not in str(done)
    # A poll by job id alone shows no token (it retries, or declines for a refund).
    public = await ended(client, first_id)
    assert public["error_code"] == "CONTENT_FILTERED_RETRY" and "rework_token" not in public
    assert public["rework_token_hint"] and public["retries_left"] == 3
    # The payment is neither spent nor refunded: held, its window open.
    assert payment_status(server, paid.payment_id) == "serving"
    held = totals(server)
    assert held["held_msat"] - before["held_msat"] == PRICE_SATS * 1000
    assert held["refunded_msat"] == before["refunded_msat"]
    status = (await client.get(f"/api/payments/{paid.payment_id}")).json()
    assert status["rework"]["state"] == "open" and status["rework"]["retries_left"] == 3
    # The signed callback carries it too.
    await receiver.wait(1)
    sent = verified(receiver.seen[-1], secret)
    assert sent["event"] == "job.failed" and sent["callback_id"] == "clip-1"
    assert sent["error_code"] == "CONTENT_FILTERED_RETRY" and sent["requestId"] == first_id
    assert all(name in sent for name in FIELDS) and "refund" not in sent
    assert sent["rework_token"] == done["rework_token"]
    assert len(rep.records) == made + 1

    # Without the token: nothing ran.
    bare = await submit(client, paid, CHANGED)
    assert bare.status_code == 403 and bare.json()["error_code"] == "REWORK_TOKEN_INVALID"
    assert len(rep.records) == made + 1

    # With it and a changed prompt: a new job on the same payment, no new payment.
    rep.script = succeeding()
    retry = await submit(client, paid, CHANGED, reworkToken=done["rework_token"])
    assert retry.status_code == 202, retry.text
    second_id = retry.json()["requestId"]
    assert second_id != first_id and retry.headers["X-Job-Id"] == second_id
    finished = await ended(client, second_id, paid.auth)
    assert finished["status"] == "COMPLETED", finished
    assert finished["result"]["videoUrl"].startswith(server.url)
    assert len(rep.records) == made + 2
    assert rep.last().input["prompt"] == CHANGED["prompt"]
    assert payment_jobs(server.settings, paid.payment_id) == {
        first_id: "FAILED",
        second_id: "COMPLETED",
    }
    assert payment_status(server, paid.payment_id) == "spent"
    end = totals(server)
    assert end["earned_msat"] - before["earned_msat"] == PRICE_SATS * 1000
    assert end["held_msat"] == before["held_msat"]
    assert end["refunded_msat"] == before["refunded_msat"]
    # The refused job's read now says its token is used up; the token buys nothing more.
    old = await ended(client, first_id, paid.auth)
    assert old["rework"]["state"] == "closed" and "rework_token" not in old
    again = await submit(client, paid, CHANGED, reworkToken=done["rework_token"])
    assert again.status_code == 402 and again.json()["error_code"] == "PAYMENT_ALREADY_USED"
    assert len(rep.records) == made + 2


async def test_refused_retries_reopen_the_window_until_the_cap_refunds_in_full(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep = rep_of(platforms)
    before = totals(server)
    paid, job_id, done = await refused_job(client, rep)
    seen = [(done["attempt"], done["retries_left"])]
    jobs = {job_id}
    for n in range(3):
        resp = await submit(
            client, paid, {**BODY, "prompt": f"riot {n}"}, reworkToken=done["rework_token"]
        )
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["requestId"]
        jobs.add(job_id)
        done = await ended(client, job_id, paid.auth)
        assert done["status"] == "FAILED", done
        if n < 2:
            assert done["error_code"] == "CONTENT_FILTERED_RETRY", done
            seen.append((done["attempt"], done["retries_left"]))
    assert seen == [(1, 3), (2, 2), (3, 1)]
    assert len(jobs) == 4  # each run its own job
    # The fourth refusal (the third free retry) is at the cap: refunded in full.
    assert done["error_code"] == "CONTENT_FILTERED", done
    assert (done["attempt"], done["retries_left"], done["retries_max"]) == (4, 0, 3)
    assert done["refund"]["amount_sats"] == PRICE_SATS and done["refund"]["lnurl_withdraw"]
    assert payment_status(server, paid.payment_id) == "spent"
    end = totals(server)
    assert end["refunded_msat"] - before["refunded_msat"] == PRICE_SATS * 1000
    assert end["earned_msat"] == before["earned_msat"]
    assert end["held_msat"] == before["held_msat"]


async def test_two_retries_at_once_start_one_job(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep = rep_of(platforms)
    paid, _, done = await refused_job(client, rep)
    made = len(rep.records)
    rep.script = Script(outputs=lambda: [mp4(5.0)], starting_polls=0, processing_polls=10)
    token = done["rework_token"]
    answers = await asyncio.gather(
        submit(client, paid, {**CHANGED, "prompt": "a quiet square"}, reworkToken=token),
        submit(client, paid, {**CHANGED, "prompt": "an empty road"}, reworkToken=token),
    )
    codes = sorted(r.status_code for r in answers)
    assert codes == [202, 402], [r.text for r in answers]  # the loser: a fresh challenge
    lost = next(r for r in answers if r.status_code == 402)
    assert lost.json()["error_code"] == "PAYMENT_ALREADY_USED"
    won = next(r for r in answers if r.status_code == 202).json()["requestId"]
    # While the retry's job runs, the token starts nothing more.
    running = await submit(client, paid, CHANGED, reworkToken=token)
    assert running.status_code == 402, running.text
    assert running.json()["error_code"] == "PAYMENT_ALREADY_USED"
    finished = await ended(client, won, paid.auth)
    assert finished["status"] == "COMPLETED", finished
    assert len(rep.records) == made + 1
    assert sorted(payment_jobs(server.settings, paid.payment_id).values()) == [
        "COMPLETED",
        "FAILED",
    ]


async def test_decline_refunds_once_and_the_refused_job_shows_the_refund(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep = rep_of(platforms)
    before = totals(server)
    paid, job_id, done = await refused_job(client, rep)
    args = {"paymentId": paid.payment_id, "rework_token": done["rework_token"]}
    first, second = await asyncio.gather(
        client.post("/api/decline-retry", json=args), client.post("/api/decline-retry", json=args)
    )
    ok = [r for r in (first, second) if r.status_code == 200]
    assert len(ok) == 1, (first.text, second.text)
    other = second if ok[0] is first else first
    assert other.status_code == 409 and other.json()["error_code"] == "REFUND_NOT_AVAILABLE"
    refund = ok[0].json()["refund"]
    assert refund["amount_sats"] == PRICE_SATS and refund["lnurl_withdraw"]
    # The refused job's read: the window declined, the refund attached (its link for the
    # payer only), the token gone.
    read = await ended(client, job_id, paid.auth)
    assert read["rework"]["state"] == "declined" and "rework_token" not in read
    assert read["refund"]["refund_secret"] == refund["refund_secret"]
    public = await ended(client, job_id)
    assert (
        public["refund"]["amount_sats"] == PRICE_SATS and "lnurl_withdraw" not in public["refund"]
    )
    # A retry now: used, its refund shown; nothing ran.
    made = len(rep.records)
    resp = await submit(client, paid, CHANGED, reworkToken=done["rework_token"])
    assert resp.status_code == 402 and resp.json()["refund"]["amount_sats"] == PRICE_SATS
    assert len(rep.records) == made
    end = totals(server)
    assert end["refunded_msat"] - before["refunded_msat"] == PRICE_SATS * 1000
    assert end["earned_msat"] == before["earned_msat"]
    assert end["held_msat"] == before["held_msat"]


# -- MCP -------------------------------------------------------------------------------------


async def test_mcp_refused_job_then_retry_with_payment_id_and_rework_token(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep = rep_of(platforms)
    rep.script = refusing()
    async with Client(f"{server.url}/api/mcp") as mcp:
        created = await mcp.call_tool("create_payment", {"toolName": "generate_video", **BODY})
        assert not created.is_error, created
        payment = dict(created.structured_content or {})
        await dev_pay(client, payment["lightningInvoice"])
        payment_id = payment["paymentId"]
        submitted = await mcp.call_tool("generate_video", {"paymentId": payment_id, **BODY})
        assert not submitted.is_error, submitted
        first = dict(submitted.structured_content or {})["requestId"]
        args = {"requestId": first, "jobType": "video", "paymentId": payment_id}
        outcome: Any = None
        for _ in range(300):
            outcome = await mcp.call_tool("await_result", args)
            if dict(outcome.structured_content or {})["status"] != "IN_PROGRESS":
                break
            await asyncio.sleep(0.02)
        assert outcome.is_error
        doc = dict(outcome.structured_content or {})
        assert doc["error_code"] == "CONTENT_FILTERED_RETRY", doc
        assert all(name in doc for name in FIELDS), doc
        # Without the token: nothing ran.
        bare = await mcp.call_tool("generate_video", {"paymentId": payment_id, **CHANGED})
        assert (bare.structured_content or {})["error_code"] == "REWORK_TOKEN_INVALID"
        rep.script = succeeding()
        retried = await mcp.call_tool(
            "generate_video",
            {"paymentId": payment_id, **CHANGED, "reworkToken": doc["rework_token"]},
        )
        assert not retried.is_error, retried
        second = dict(retried.structured_content or {})["requestId"]
        assert second != first
        for _ in range(300):
            outcome = await mcp.call_tool("await_result", {**args, "requestId": second})
            if dict(outcome.structured_content or {})["status"] != "IN_PROGRESS":
                break
            await asyncio.sleep(0.02)
        assert not outcome.is_error, outcome
        assert dict(outcome.structured_content or {})["status"] == "COMPLETED"
    assert payment_status(server, payment_id) == "spent"


# -- expiry and restart ----------------------------------------------------------------------


async def test_an_expired_window_refunds_and_an_open_one_survives_a_restart(
    tmp_path: Path, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep = rep_of(platforms)
    settings = dataclasses.replace(
        platform_settings(tmp_path / "short", platforms), rework_window_s=1.0
    )
    srv = ThreadedServer(settings)
    try:
        async for client in http_client(srv):
            late, _, late_doc = await refused_job(client, rep)
            swept, swept_job, _ = await refused_job(client, rep)
            await asyncio.sleep(1.2)  # the window is a setting: 1 s here, 600 s by default
            made = len(rep.records)
            resp = await submit(client, late, CHANGED, reworkToken=late_doc["rework_token"])
            assert resp.status_code == 410, resp.text
            assert resp.json()["error_code"] == "REWORK_EXPIRED"
            assert resp.json()["refund"]["amount_sats"] == PRICE_SATS  # opened at once
            assert len(rep.records) == made  # nothing ran
            # The window nobody came back to: the scheduled sweep refunds it.
            assert srv.call(srv.gate.spender.rework.expire_due) == 1
            read = await ended(client, swept_job, swept.auth)
            assert read["rework"]["state"] == "expired" and "rework_token" not in read
            assert read["refund"]["amount_sats"] == PRICE_SATS and read["refund"]["lnurl_withdraw"]
            assert payment_status(srv, swept.payment_id) == "spent"
            assert_ledger_balances(srv)
    finally:
        srv.stop()

    # A restart in the window keeps the payment (not refunded at start-up) and its token.
    settings = platform_settings(tmp_path / "restart", platforms)
    srv = ThreadedServer(settings)
    try:
        async for client in http_client(srv):
            kept, kept_job, kept_doc = await refused_job(client, rep)
    finally:
        srv.stop()
    srv = ThreadedServer(settings)
    try:
        async for client in http_client(srv):
            assert payment_status(srv, kept.payment_id) == "serving"
            read = await ended(client, kept_job, kept.auth)
            assert read["error_code"] == "CONTENT_FILTERED_RETRY"
            assert read["rework_token"] == kept_doc["rework_token"]
            rep.script = succeeding()
            resp = await submit(client, kept, CHANGED, reworkToken=kept_doc["rework_token"])
            assert resp.status_code == 202, resp.text
            finished = await ended(client, resp.json()["requestId"], kept.auth)
            assert finished["status"] == "COMPLETED", finished
            assert payment_status(srv, kept.payment_id) == "spent"
            assert_ledger_balances(srv)
    finally:
        srv.stop()


async def test_a_retried_job_running_upstream_is_taken_up_after_a_restart(
    tmp_path: Path, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    rep = rep_of(platforms)
    settings = platform_settings(tmp_path / "data", platforms)
    first = ThreadedServer(settings)
    try:
        async for client in http_client(first):
            paid, _, doc = await refused_job(client, rep)
            rep.script = Script(outcome="never")
            before = set(rep.records)
            resp = await submit(client, paid, CHANGED, reworkToken=doc["rework_token"])
            assert resp.status_code == 202, resp.text
            retried = resp.json()["requestId"]
            for _ in range(500):
                if set(rep.records) - before and rep.last().polls >= 2:
                    break
                await asyncio.sleep(0.02)
            rec = rep.last()
            assert rec.polls >= 2
    finally:
        first.stop()
    made = len(rep.records)
    # Shutdown left the retry's job running, its window claimed, nothing refunded.
    state = store_value(
        settings, "SELECT state FROM rework_windows WHERE payment_id = ?", paid.payment_id
    )
    assert state == "running" and store_value(settings, "SELECT COUNT(*) FROM refunds") == 0
    assert payment_jobs(settings, paid.payment_id)[retried] == "IN_PROGRESS"
    rec.script = succeeding()

    second = ThreadedServer(settings)
    try:
        async for client in http_client(second):
            finished = await ended(client, retried, paid.auth)
            assert finished["status"] == "COMPLETED", finished
            assert payment_status(second, paid.payment_id) == "spent"
            assert_ledger_balances(second)
    finally:
        second.stop()
    assert len(rep.records) == made  # waited for, never made a second time
    state = store_value(
        settings, "SELECT state FROM rework_windows WHERE payment_id = ?", paid.payment_id
    )
    assert state == "closed"
    assert store_value(settings, "SELECT COUNT(*) FROM refunds") == 0


async def test_a_poll_by_job_id_alone_leaks_no_payment_id_of_an_mcp_payment(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    """An MCP payment's paymentId proves it (it shows the rework_token, and the decline
    that token allows hands out the refund link): a reader with the job id alone must not
    learn it from the refused job's envelope."""
    rep = rep_of(platforms)
    rep.script = refusing()
    async with Client(f"{server.url}/api/mcp") as mcp:
        created = await mcp.call_tool("create_payment", {"toolName": "generate_video", **BODY})
        payment = dict(created.structured_content or {})
        await dev_pay(client, payment["lightningInvoice"])
        payment_id = payment["paymentId"]
        submitted = await mcp.call_tool("generate_video", {"paymentId": payment_id, **BODY})
        job_id = dict(submitted.structured_content or {})["requestId"]
        public = await ended(client, job_id)  # a stranger with the job id (a shared poll_url)
        assert public["error_code"] == "CONTENT_FILTERED_RETRY", public
        assert "rework_token" not in public
        assert payment_id not in str(public), public
        by_tool = await mcp.call_tool("check_job_status", {"requestId": job_id, "jobType": "video"})
        assert payment_id not in str(by_tool.structured_content), by_tool
        # The payer (its paymentId) still reads the whole envelope.
        own = await client.get(
            "/api/l402/job-status", params={"requestId": job_id, "paymentId": payment_id}
        )
        assert own.json()["paymentId"] == payment_id and own.json()["rework_token"]
        declined = await client.post(
            "/api/decline-retry",
            json={"paymentId": payment_id, "rework_token": own.json()["rework_token"]},
        )
        assert declined.status_code == 200, declined.text
    assert payment_status(server, payment_id) == "spent"


async def test_a_crash_between_the_window_and_the_jobs_end_refunds_once(
    tmp_path: Path, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    """The process died after the refusal opened the window but before the refused job
    recorded its end (simulated: the job's row put back IN_PROGRESS, its resume state
    kept). The restart takes the job up, meets the refusal again and refunds once; the
    window left open then yields no second refund, by decline (even with the token) or
    by the expiry sweep."""
    rep = rep_of(platforms)
    settings = dataclasses.replace(
        platform_settings(tmp_path / "data", platforms), rework_window_s=1.0
    )
    srv = ThreadedServer(settings)
    try:
        async for client in http_client(srv):
            paid, job_id, doc = await refused_job(client, rep)
    finally:
        srv.stop()
    store_write(
        settings,
        "UPDATE jobs SET status = 'IN_PROGRESS', error_json = NULL WHERE job_id = ?",
        job_id,
    )
    srv = ThreadedServer(settings)
    try:
        async for client in http_client(srv):
            read = await ended(client, job_id, paid.auth)
            assert read["error_code"] == "CONTENT_FILTERED", read
            assert read["refund"]["amount_sats"] == PRICE_SATS
            await asyncio.sleep(1.2)  # past rework_until: the sweep would take it too
            args = {"paymentId": paid.payment_id, "rework_token": doc["rework_token"]}
            declined = await client.post("/api/decline-retry", json=args)
            srv.call(srv.gate.spender.rework.expire_due)
            if declined.status_code == 200:
                assert declined.json()["refund"]["refund_secret"] == read["refund"]["refund_secret"]
            retried = await submit(client, paid, CHANGED, reworkToken=doc["rework_token"])
            assert retried.status_code in (402, 410), retried.text
            (refunds,) = store_rows(
                settings,
                "SELECT COUNT(*), SUM(amount_msat) FROM refunds WHERE payment_id = ?",
                paid.payment_id,
            )
            assert refunds == (1, PRICE_SATS * 1000)
            assert payment_status(srv, paid.payment_id) == "spent"
            assert_ledger_balances(srv)
    finally:
        srv.stop()


async def test_a_repeat_of_a_retry_whose_answer_was_lost_gets_the_same_job(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    """The retry's 202 is the only place its new job id is shown: a repeat of the same
    retry (same credential, body and reworkToken, its answer lost on the way) gets that
    202 again from the dedup cache, as a first call's repeat does, not a refusal that leaves
    the paid job unfindable. Nothing runs twice."""
    rep = rep_of(platforms)
    paid, _, done = await refused_job(client, rep)
    made = len(rep.records)
    rep.script = succeeding()
    body = {**CHANGED, "reworkToken": done["rework_token"]}
    headers = {"Authorization": paid.auth}  # the cache on, as for any client
    first = await client.post(f"/api/l402/{SLUG}", json=body, headers=headers)
    assert first.status_code == 202, first.text
    again = await client.post(f"/api/l402/{SLUG}", json=body, headers=headers)
    assert again.status_code == 202, again.text
    assert again.json()["requestId"] == first.json()["requestId"]
    finished = await ended(client, first.json()["requestId"], paid.auth)
    assert finished["status"] == "COMPLETED", finished
    assert len(rep.records) == made + 1
    # The first call's cached 202 is not a retry's: a changed body with the token is its
    # own key, and without the token the window still decides (nothing runs).
    other = await client.post(
        f"/api/l402/{SLUG}", json={**BODY, "reworkToken": done["rework_token"]}, headers=headers
    )
    assert other.status_code == 402 and other.json()["error_code"] == "PAYMENT_ALREADY_USED"
    assert len(rep.records) == made + 1
    assert payment_status(server, paid.payment_id) == "spent"


async def test_a_window_whose_payment_the_operator_refunded_cannot_be_claimed(
    client: httpx.AsyncClient, server: ThreadedServer, platforms: tuple[FakeReplicate, FakeFal]
) -> None:
    """The operator's refund of a payment in its window (``satsgate refund``) leaves the
    window open. A retry that read the payment as serving just before must not claim it
    and run a job on a refunded payment: the claim (and the job's row with it) requires
    the payment still serving, in its own transaction."""
    rep = rep_of(platforms)
    paid, _, done = await refused_job(client, rep)
    payment = server.call(lambda: server.store.payments.get(paid.payment_id))
    refund = server.call(
        lambda: server.app[REFUNDS].refund_remaining(payment, "refunded by the node operator")
    )
    assert refund is not None and refund["amount_sats"] == PRICE_SATS
    assert payment_status(server, paid.payment_id) == "spent"
    token_hash = hashlib.sha256(done["rework_token"].encode()).hexdigest()
    # The retry's claim, as it runs after its read of the (then serving) payment.
    job = server.gate.spender._prepare_job(payment, BY_SLUG[SLUG], BY_SLUG[SLUG].params(**BODY))
    claimed = server.call(
        lambda: server.store.rework.claim(paid.payment_id, token_hash, time.time(), job)
    )
    assert claimed is False
    assert len(payment_jobs(server.settings, paid.payment_id)) == 1
    # Through the gate: used, its refund shown; nothing ran.
    made = len(rep.records)
    resp = await submit(client, paid, CHANGED, reworkToken=done["rework_token"])
    assert resp.status_code == 402 and resp.json()["refund"]["amount_sats"] == PRICE_SATS
    assert len(rep.records) == made
