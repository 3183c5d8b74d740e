"""The free-retry window (CONTENT_FILTERED_RETRY) end to end: a real satsgate server whose
text and image engines route to the fake OpenAI-compatible API (tests/fakes/fake_ai_upstream.py),
which refuses prompts containing a term the way OpenAI does (a chat answer's ``refusal``;
an image generation's 400 ``content_policy_violation``). Paid over L402 and MCP; every
money outcome checked in the ledger (a payment in its window is held)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from satsgate.config.settings import Settings
from satsgate.engines.refusals import said_by_model
from tests.conftest import (
    STORES,
    ThreadedServer,
    challenge,
    dev_pay,
    http_client,
    make_settings,
    store_url_for,
)
from tests.fakes.fake_ai_upstream import OPENAI_KEY, FakeAIUpstream
from tests.ledger_check import assert_ledger_balances
from tests.payments.test_gateway import mpp_credential

MODELS = {"6": "fake-best", "31": "fake-mini", "2": "fake-image-std-url", "16": "fake-image-best"}
CHAT = "/v1/chat/completions"
IMAGES = "/v1/images/generations"
TERM = "lockpick"
REFUSED = {"prompt": f"Explain how to {TERM} a door", "modelId": 31}
CHANGED = {"prompt": "Explain how a pin tumbler lock works", "modelId": 31}
PRICE_SATS = 5  # generate-text, modelId 31, a short prompt


def settings_for(data_dir: Path, fake: FakeAIUpstream, **overrides: Any) -> Settings:
    return make_settings(
        data_dir,
        providers={
            "cloud": {
                "kind": "openai",
                "base_url": f"{fake.url}/v1",
                "api_key": OPENAI_KEY,
                "timeout_s": 5,
                "models": MODELS,
            }
        },
        engines={"text": "cloud", "image": "cloud"},
        **overrides,
    )


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAIUpstream]:
    upstream = FakeAIUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module", params=STORES)
def rw_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream
) -> Iterator[ThreadedServer]:
    """The module's server, once on each engine of the store (the window claims' races
    run on both)."""
    srv = ThreadedServer(
        settings_for(tmp_path_factory.mktemp("rework"), fake, store_url=store_url_for(request))
    )
    yield srv
    srv.stop()


@pytest.fixture
async def rw(rw_server: ThreadedServer, fake: FakeAIUpstream) -> AsyncIterator[httpx.AsyncClient]:
    fake.clear()
    fake.refuse_terms = {TERM}
    async for c in http_client(rw_server):
        yield c
    assert_ledger_balances(rw_server)


class Paid:
    """One L402 payment: its Authorization and paymentId."""

    def __init__(self, auth: str, payment_id: str) -> None:
        self.auth = auth
        self.payment_id = payment_id


async def pay(client: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> Paid:
    ch = await challenge(client, slug, body)
    preimage = await dev_pay(client, ch["invoice"])
    return Paid(f"L402 {ch['macaroon']}:{preimage}", str(ch["paymentId"]))


async def call(
    client: httpx.AsyncClient, paid: Paid, body: dict[str, Any], slug: str = "generate-text"
) -> httpx.Response:
    return await client.post(
        f"/api/l402/{slug}", json=body, headers={"Authorization": paid.auth, "X-No-Cache": "1"}
    )


async def refused_call(
    client: httpx.AsyncClient, slug: str = "generate-text", body: dict[str, Any] = REFUSED
) -> tuple[Paid, dict[str, Any]]:
    paid = await pay(client, slug, body)
    resp = await call(client, paid, body, slug)
    assert resp.status_code == 422, resp.text
    doc = resp.json()
    assert doc["error_code"] == "CONTENT_FILTERED_RETRY", doc
    return paid, doc


def totals(server: ThreadedServer) -> dict[str, int]:
    return dict(server.call(server.store.ledger.totals))


def payment_status(server: ThreadedServer, payment_id: str) -> str:
    payment = server.call(lambda: server.store.payments.get(payment_id))
    return str(payment.status)


# -- the window ------------------------------------------------------------------------------


async def test_refusal_keeps_the_payment_and_a_retry_with_the_token_runs_the_changed_request(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    fake.refusal_text = "I'm sorry, but as an OpenAI model I can't help with that."
    before = totals(rw_server)
    paid, doc = await refused_call(rw)
    now = time.time()
    # Every field of the spec.
    assert doc["attempt"] == 1
    assert doc["retries_max"] == 3 and doc["retries_left"] == 3
    until = datetime.fromisoformat(doc["rework_until"].replace("Z", "+00:00")).timestamp()
    assert now + 590 <= until <= now + 601
    assert 590 <= doc["rework_seconds_left"] <= 600
    assert isinstance(doc["rework_token"], str) and len(doc["rework_token"]) >= 40
    assert doc["refusal_scope"] == "input-or-output"
    assert doc["cause"] and doc["fix"]
    # The model's own words, with the provider's name taken out.
    assert doc["model_said"] == "I'm sorry, but as the model I can't help with that."
    assert "openai" not in resp_text(doc).lower() and fake.url not in resp_text(doc)
    assert doc.get("refund") is None
    # Neither spent nor refunded: held while the window is open.
    assert payment_status(rw_server, paid.payment_id) == "serving"
    after = totals(rw_server)
    assert after["held_msat"] - before["held_msat"] == PRICE_SATS * 1000
    assert after["refunded_msat"] == before["refunded_msat"]
    status = (await rw.get(f"/api/payments/{paid.payment_id}")).json()
    assert status["rework"]["state"] == "open" and status["rework"]["retries_left"] == 3
    assert len(fake.requests(CHAT)) == 1

    # Without the token, or with another: 403, nothing ran.
    for body in (CHANGED, {**CHANGED, "reworkToken": "x" * 43}):
        resp = await call(rw, paid, body)
        assert resp.status_code == 403, resp.text
        assert resp.json()["error_code"] == "REWORK_TOKEN_INVALID"
    assert len(fake.requests(CHAT)) == 1

    # With the token and a changed prompt: served without a new payment.
    resp = await call(rw, paid, {**CHANGED, "reworkToken": doc["rework_token"]})
    assert resp.status_code == 200, resp.text
    assert "pin tumbler" in resp.text
    assert len(fake.requests(CHAT)) == 2
    assert TERM not in str(fake.requests(CHAT)[-1].json)
    assert "reworkToken" not in str(fake.requests(CHAT)[-1].json)
    # Spent once: the token does not buy a second call.
    resp = await call(rw, paid, {**CHANGED, "rework_token": doc["rework_token"]})
    assert resp.status_code == 402 and resp.json()["error_code"] == "PAYMENT_ALREADY_USED"
    await asyncio.sleep(0.05)  # the answer's serving -> spent joins the next group commit
    assert payment_status(rw_server, paid.payment_id) == "spent"
    end = totals(rw_server)
    assert end["earned_msat"] - before["earned_msat"] == PRICE_SATS * 1000
    assert end["held_msat"] == before["held_msat"]


def resp_text(doc: dict[str, Any]) -> str:
    return str(doc)


async def test_a_retry_refused_again_reopens_the_window_and_the_cap_refunds_in_full(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    before = totals(rw_server)
    paid, doc = await refused_call(rw)
    seen = [(doc["attempt"], doc["retries_left"])]
    for n in range(3):
        old = doc["rework_token"]
        resp = await call(rw, paid, {**REFUSED, "prompt": f"{TERM} {n}", "reworkToken": old})
        doc = resp.json()
        if n < 2:
            assert resp.status_code == 422 and doc["error_code"] == "CONTENT_FILTERED_RETRY", doc
            assert doc["rework_token"] != old  # a new token with each refusal
            seen.append((doc["attempt"], doc["retries_left"]))
            # The previous token stops working.
            stale = await call(rw, paid, {**CHANGED, "reworkToken": old})
            assert stale.status_code == 403 and stale.json()["error_code"] == "REWORK_TOKEN_INVALID"
    assert seen == [(1, 3), (2, 2), (3, 1)]
    # The fourth refusal (the third free retry) is at the cap: refunded in full.
    assert resp.status_code == 422 and doc["error_code"] == "CONTENT_FILTERED", doc
    assert doc["refund"]["amount_sats"] == PRICE_SATS
    assert (doc["attempt"], doc["retries_left"], doc["retries_max"]) == (4, 0, 3)
    assert len(fake.requests(CHAT)) == 4
    assert payment_status(rw_server, paid.payment_id) == "spent"
    end = totals(rw_server)
    assert end["refunded_msat"] - before["refunded_msat"] == PRICE_SATS * 1000
    assert end["earned_msat"] == before["earned_msat"]
    assert end["held_msat"] == before["held_msat"]


async def test_a_changed_request_may_cost_less_but_not_more_than_was_paid(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    paid, doc = await refused_call(rw)
    token = doc["rework_token"]
    dearer = await call(rw, paid, {**CHANGED, "modelId": 6, "reworkToken": token})
    assert dearer.status_code == 400, dearer.text
    body = dearer.json()
    assert (
        body["error_code"] == "INVALID_INPUT" and body["amountSats"] == 15 and body["paidSats"] == 5
    )
    assert len(fake.requests(CHAT)) == 1  # nothing ran; the window stays open
    assert payment_status(rw_server, paid.payment_id) == "serving"
    resp = await call(rw, paid, {**CHANGED, "reworkToken": token})
    assert resp.status_code == 200, resp.text


async def test_image_refusal_scope_is_the_prompt(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    body = {"prompt": f"a {TERM} kit on a table", "modelId": 2}
    paid, doc = await refused_call(rw, "generate-image", body)
    assert doc["refusal_scope"] == "prompt"
    # The upstream's 400 content_policy_violation message is the model's refusal: shown
    # as one cleaned line (any other upstream error text stays upstream).
    assert doc["model_said"] == (
        "Your request was rejected as a result of our safety system. Your prompt may "
        "contain text that is not allowed by our safety system."
    )
    resp = await call(
        rw,
        paid,
        {"prompt": "a brass key on a table", "modelId": 2, "rework_token": doc["rework_token"]},
        "generate-image",
    )
    assert resp.status_code == 200, resp.text
    assert len(fake.requests(IMAGES)) == 2


async def test_a_cheaper_retry_refunds_the_difference(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    before = totals(rw_server)
    body = {"prompt": f"a {TERM} kit, photographed", "modelId": 16}  # 1200 sat
    paid, doc = await refused_call(rw, "generate-image", body)
    cheaper = {
        "prompt": "a brass key, photographed",
        "modelId": 2,
        "reworkToken": doc["rework_token"],
    }
    resp = await call(rw, paid, cheaper, "generate-image")
    assert resp.status_code == 200, resp.text
    assert resp.json()["refund"]["amount_sats"] == 1100  # paid 1200, the retry costs 100
    await asyncio.sleep(0.05)
    end = totals(rw_server)
    assert end["earned_msat"] - before["earned_msat"] == 100_000
    assert end["refunded_msat"] - before["refunded_msat"] == 1_100_000


# -- decline, races --------------------------------------------------------------------------


async def test_decline_refunds_in_full_exactly_once(
    rw: httpx.AsyncClient, rw_server: ThreadedServer
) -> None:
    before = totals(rw_server)
    paid, doc = await refused_call(rw)
    wrong = await rw.post(
        "/api/decline-retry", json={"paymentId": paid.payment_id, "rework_token": "nope"}
    )
    assert wrong.status_code == 403 and wrong.json()["error_code"] == "REWORK_TOKEN_INVALID"
    args = {"paymentId": paid.payment_id, "rework_token": doc["rework_token"]}
    first, second = await asyncio.gather(
        rw.post("/api/decline-retry", json=args), rw.post("/api/decline-retry", json=args)
    )
    ok = [r for r in (first, second) if r.status_code == 200]
    assert len(ok) == 1, (first.text, second.text)
    other = second if ok[0] is first else first
    assert other.status_code == 409 and other.json()["error_code"] == "REFUND_NOT_AVAILABLE"
    refund = ok[0].json()["refund"]
    assert refund["amount_sats"] == PRICE_SATS and refund["lnurl_withdraw"]
    # The refund is claimable at /recover with its secret.
    page = await rw.post(
        "/recover", data={"payment_id": paid.payment_id, "refund_secret": refund["refund_secret"]}
    )
    assert page.status_code == 200 and 'id="payout"' in page.text, page.text
    # A retry now: used, its refund shown.
    resp = await call(rw, paid, {**CHANGED, "reworkToken": doc["rework_token"]})
    assert resp.status_code == 402 and resp.json()["refund"]["amount_sats"] == PRICE_SATS
    end = totals(rw_server)
    assert end["refunded_msat"] - before["refunded_msat"] == PRICE_SATS * 1000
    assert end["earned_msat"] == before["earned_msat"]


async def test_concurrent_retries_run_one(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    paid, doc = await refused_call(rw)
    token = doc["rework_token"]
    bodies = [
        {**CHANGED, "prompt": f"Explain lock number {i}", "reworkToken": token} for i in range(4)
    ]
    answers = await asyncio.gather(*(call(rw, paid, body) for body in bodies))
    codes = sorted(r.status_code for r in answers)
    assert codes == [200, 402, 402, 402], [r.text for r in answers]
    assert len(fake.requests(CHAT)) == 2  # the refusal and one retry


async def test_decline_and_retry_race_one_wins(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    before = totals(rw_server)
    paid, doc = await refused_call(rw)
    token = doc["rework_token"]
    retry, decline = await asyncio.gather(
        call(rw, paid, {**CHANGED, "reworkToken": token}),
        rw.post("/api/decline-retry", json={"paymentId": paid.payment_id, "reworkToken": token}),
    )
    assert [retry.status_code == 200, decline.status_code == 200].count(True) == 1, (
        retry.text,
        decline.text,
    )
    await asyncio.sleep(0.05)
    end = totals(rw_server)
    moved = (
        end["earned_msat"] - before["earned_msat"],
        end["refunded_msat"] - before["refunded_msat"],
    )
    assert moved in ((PRICE_SATS * 1000, 0), (0, PRICE_SATS * 1000)), moved


async def test_mpp_credential_retry_with_the_token(
    rw: httpx.AsyncClient, fake: FakeAIUpstream
) -> None:
    first = await rw.post("/api/l402/generate-text", json=REFUSED)
    auth = mpp_credential(first, await dev_pay(rw, first.json()["invoice"]))
    headers = {"Authorization": auth, "X-No-Cache": "1"}
    refused = await rw.post("/api/l402/generate-text", json=REFUSED, headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.headers["Content-Type"].startswith("application/problem+json")
    doc = refused.json()
    assert (
        doc["error_code"] == "CONTENT_FILTERED_RETRY" and "Payment-Receipt" not in refused.headers
    )
    bare = await rw.post("/api/l402/generate-text", json=CHANGED, headers=headers)
    assert bare.status_code == 403 and bare.json()["error_code"] == "REWORK_TOKEN_INVALID"
    body = {**CHANGED, "reworkToken": doc["rework_token"]}
    served = await rw.post("/api/l402/generate-text", json=body, headers=headers)
    assert served.status_code == 200, served.text
    assert "pin tumbler" in served.text and served.headers["Payment-Receipt"]
    assert len(fake.requests(CHAT)) == 2


# -- MCP -------------------------------------------------------------------------------------


async def test_mcp_payment_id_and_rework_token_retry_then_decline_tool(
    rw: httpx.AsyncClient, rw_server: ThreadedServer, fake: FakeAIUpstream
) -> None:
    async with Client(f"{rw_server.url}/api/mcp") as mcp:
        ids = []
        for _ in range(2):
            created = await mcp.call_tool(
                "create_payment", {"toolName": "generate_text", **REFUSED}
            )
            assert not created.is_error, created
            payment = dict(created.structured_content or {})
            await dev_pay(rw, payment["lightningInvoice"])
            ids.append(payment["paymentId"])
        docs = []
        for payment_id in ids:
            refused = await mcp.call_tool("generate_text", {"paymentId": payment_id, **REFUSED})
            assert refused.is_error
            doc = dict(refused.structured_content or {})
            assert doc["error_code"] == "CONTENT_FILTERED_RETRY" and doc["paymentId"] == payment_id
            docs.append(doc)
        # Without the token: nothing ran.
        bare = await mcp.call_tool("generate_text", {"paymentId": ids[0], **CHANGED})
        assert (bare.structured_content or {})["error_code"] == "REWORK_TOKEN_INVALID"
        done = await mcp.call_tool(
            "generate_text",
            {"paymentId": ids[0], **CHANGED, "reworkToken": docs[0]["rework_token"]},
        )
        assert not done.is_error, done
        assert "pin tumbler" in str(done.structured_content)
        declined = await mcp.call_tool(
            "decline_retry", {"paymentId": ids[1], "rework_token": docs[1]["rework_token"]}
        )
        assert not declined.is_error, declined
        assert (declined.structured_content or {})["refund"]["amount_sats"] == PRICE_SATS
    assert len(fake.requests(CHAT)) == 3


# -- expiry and restart ----------------------------------------------------------------------


async def test_expired_window_is_refused_and_refunded_and_a_restart_keeps_an_open_one(
    tmp_path: Path, fake: FakeAIUpstream
) -> None:
    fake.clear()
    fake.refuse_terms = {TERM}
    settings = settings_for(tmp_path / "data", fake, rework_window_s=1.0)
    srv = ThreadedServer(settings)
    try:
        async for client in http_client(srv):
            late, late_doc = await refused_call(client)
            swept, _ = await refused_call(client)
            await asyncio.sleep(1.2)  # the window is a setting: 1 s here, 600 s by default
            resp = await call(client, late, {**CHANGED, "reworkToken": late_doc["rework_token"]})
            assert resp.status_code == 410, resp.text
            body = resp.json()
            assert body["error_code"] == "REWORK_EXPIRED"
            assert body["refund"]["amount_sats"] == PRICE_SATS  # opened at once
            assert len(fake.requests(CHAT)) == 2  # nothing ran
            # The window nobody came back to: the scheduled sweep refunds it.
            assert srv.call(srv.gate.spender.rework.expire_due) == 1
            status = (await client.get(f"/api/payments/{swept.payment_id}")).json()
            assert status["refund_available"] is True
            resp = await call(client, swept, CHANGED)
            assert resp.status_code == 402 and resp.json()["refund"]["amount_sats"] == PRICE_SATS
            page = await client.post(
                "/recover",
                data={
                    "payment_id": swept.payment_id,
                    "refund_secret": resp.json()["refund"]["refund_secret"],
                },
            )
            assert page.status_code == 200 and 'id="payout"' in page.text, page.text
            assert_ledger_balances(srv)
    finally:
        srv.stop()

    # A restart in the window keeps it (and its token).
    srv = ThreadedServer(settings_for(tmp_path / "data2", fake))
    try:
        async for client in http_client(srv):
            kept, kept_doc = await refused_call(client)
    finally:
        srv.stop()
    srv = ThreadedServer(srv.settings)
    try:
        async for client in http_client(srv):
            resp = await call(client, kept, {**CHANGED, "reworkToken": kept_doc["rework_token"]})
            assert resp.status_code == 200, resp.text
            assert_ledger_balances(srv)
    finally:
        srv.stop()


def test_model_said_is_one_short_line_without_names_or_addresses() -> None:
    assert said_by_model("Claude cannot help with this.") == "the model cannot help with this."
    assert said_by_model("This violates OpenAI's usage policies.") == (
        "This violates the model's usage policies."
    )
    assert (
        said_by_model("Refused, see https://api.example.com/v1/x?key=1  now") == "Refused, see now"
    )
    assert said_by_model('{"error": "content_policy_violation"}') is None
    assert said_by_model("  ") is None and said_by_model(None) is None
    long = said_by_model("no " * 400)
    assert long is not None and len(long) == 300 and "\n" not in long
