"""generate-text streamed for a call paid one by one (L402, the Payment scheme's charge,
Cashu ecash): a real satsgate server on loopback whose text engine is a fake
OpenAI-compatible API (model 31) and a fake Anthropic Messages API (model 1), both speaking
their own SSE wire (tests/fakes/fake_ai_upstream.py), read by a real HTTP client as the events
arrive; the ecash is a real Nutshell mint's (tests/fakes/cashu_mint.py). The payment's row and
refunds are read back from the store, and the ledger checked."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from satsgate.payments import streaming
from satsgate.payments.cashu_wire import decode_token, y_of
from satsgate.services.registry import BY_SLUG
from tests.conftest import (
    ThreadedServer,
    challenge,
    dev_pay,
    free_port,
    http_client,
    make_settings,
)
from tests.fakes.cashu_mint import NutshellMint, PayerWallet, mint_venv
from tests.fakes.fake_ai_upstream import ANTHROPIC_KEY, HUGE_CHUNKS, OPENAI_KEY, FakeAIUpstream
from tests.ledger_check import assert_ledger_balances
from tests.payments.test_gateway import assert_envelope, mpp_credential
from tests.payments.test_sessions import sse_events

CHAT = "/v1/chat/completions"
MESSAGES = "/anthropic/v1/messages"
TIMEOUT_S = 2.0


class Upstream:
    """One provider kind behind the text engine: the tier routed to it, its path on the
    fake and the usage its fake reports."""

    def __init__(self, tier: str, model: int, path: str, tokens: tuple[int, int]) -> None:
        self.tier, self.model, self.path, self.tokens = tier, model, path, tokens

    def body(self, prompt: str, **extra: Any) -> dict[str, Any]:
        return {"prompt": prompt, "tier": self.tier, "stream": True, **extra}


UPSTREAMS = {
    "openai": Upstream("standard", 31, CHAT, (19, 10)),
    "anthropic": Upstream("better", 1, MESSAGES, (11, 6)),
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAIUpstream]:
    upstream = FakeAIUpstream()
    yield upstream
    upstream.stop()


def text_engines(fake: FakeAIUpstream) -> dict[str, Any]:
    """The settings that route generate-text to the fake: model 1 to its Anthropic API,
    model 31 to its OpenAI-compatible one."""
    return {
        "providers": {
            "claude": {
                "kind": "anthropic",
                "base_url": f"{fake.url}/anthropic/v1",
                "api_key": ANTHROPIC_KEY,
                "timeout_s": TIMEOUT_S,
                "models": {"1": "fake-claude-better"},
                "max_tokens": 1000,
            },
            "cloud": {
                "kind": "openai",
                "base_url": f"{fake.url}/v1",
                "api_key": OPENAI_KEY,
                "timeout_s": TIMEOUT_S,
                "models": {"31": "fake-mini"},
            },
        },
        "engines": {"text": ["claude", "cloud"]},
    }


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream) -> Iterator[ThreadedServer]:
    server = ThreadedServer(
        make_settings(tmp_path_factory.mktemp("text-streaming"), **text_engines(fake))
    )
    yield server
    server.stop()


@pytest.fixture
async def http(srv: ThreadedServer, fake: FakeAIUpstream) -> AsyncIterator[httpx.AsyncClient]:
    fake.clear()
    async for c in http_client(srv):
        yield c
    assert_ledger_balances(srv)


@pytest.fixture(params=sorted(UPSTREAMS))
def up(request: pytest.FixtureRequest) -> Upstream:
    return UPSTREAMS[str(request.param)]


async def paid_auth(http: httpx.AsyncClient, body: dict[str, Any]) -> tuple[str, str, int]:
    """(Authorization, payment hash, price in msat) of a paid L402 challenge."""
    ch = await challenge(http, "generate-text", body)
    preimage = await dev_pay(http, ch["invoice"])
    return f"L402 {ch['macaroon']}:{preimage}", ch["paymentHash"], ch["amountSats"] * 1000


def payment_row(srv: ThreadedServer, payment_hash: str) -> Any:
    return srv.call(lambda: srv.store.payments.get_by_hash(payment_hash))


def refunds_of(srv: ThreadedServer, payment_hash: str) -> list[Any]:
    payment = payment_row(srv, payment_hash)
    return list(srv.call(lambda: srv.store.refunds.for_payment(payment.payment_id)))


def assert_ended_refunded(
    events: list[tuple[str, str]], srv: ThreadedServer, payment_hash: str, price: int, code: str
) -> dict[str, Any]:
    """The stream's last event is ``error`` with ``code`` and the whole price's refund,
    and that refund is recorded once; the event's body."""
    name, data = events[-1]
    got: dict[str, Any] = json.loads(data)
    assert name == "error" and got["error_code"] == code, events[-1]
    assert got["refund"]["amount_sats"] * 1000 == price and got["refund"]["lnurl_withdraw"]
    assert [r.amount_msat for r in refunds_of(srv, payment_hash)] == [price]  # recorded once
    return got


def texts_of(events: list[tuple[str, str]]) -> list[str]:
    return [json.loads(d)["text"] for name, d in events if name == "" and d != "[DONE]"]


async def wait_for(check: Any, what: str) -> None:
    for _ in range(100):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


async def test_a_paid_call_streams_its_answer_then_usage_and_model(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream, up: Upstream
) -> None:
    body = up.body("Say hello to the stream")
    auth, payment_hash, price = await paid_auth(http, body)
    resp = await http.post("/api/l402/generate-text", json=body, headers={"Authorization": auth})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["x-route-model"] == str(up.model)
    events = sse_events(resp.text)
    texts = texts_of(events)
    assert len(texts) > 1  # a piece per upstream delta, not the answer in one piece
    assert "".join(texts) == "You said: Say hello to the stream"
    assert events[-1] == ("", "[DONE]")
    name, data = events[-2]
    assert name == "payment-receipt"
    got = json.loads(data)
    assert got["status"] == "success" and got["method"] == "lightning"
    assert (got["reference"], got["spentMsat"], got["units"]) == (payment_hash, price, len(texts))
    assert got["model"] == up.model and got["untrusted_output"] is True
    assert got["usage"] == {"inputTokens": up.tokens[0], "outputTokens": up.tokens[1]}
    sent = fake.requests(up.path)[-1].json
    assert sent is not None and sent["stream"] is True
    # Spent once, answered, nothing refunded; the credential serves no second time.
    await wait_for(lambda: str(payment_row(srv, payment_hash).status) == "spent", "not spent")
    assert refunds_of(srv, payment_hash) == []
    again = await http.post("/api/l402/generate-text", json=body, headers={"Authorization": auth})
    assert_envelope(again, "PAYMENT_ALREADY_USED", 402)  # with a fresh challenge
    assert len(fake.requests(up.path)) == 1


async def test_the_charge_intent_streams_with_a_receipt_header(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    body = UPSTREAMS["openai"].body("Stream for the charge")
    first = await http.post("/api/l402/generate-text", json=body)
    preimage = await dev_pay(http, first.json()["invoice"])
    auth = mpp_credential(first, preimage)
    async with http.stream(
        "POST", "/api/l402/generate-text", json=body, headers={"Authorization": auth}
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["payment-receipt"]
        raw = "".join([chunk async for chunk in resp.aiter_text()])
    events = sse_events(raw)
    assert "".join(texts_of(events)) == "You said: Stream for the charge"
    receipt = json.loads(events[-2][1])
    assert receipt["reference"] == hashlib.sha256(bytes.fromhex(preimage)).hexdigest()


# -- paid in ecash (NUT-24) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def mint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NutshellMint]:
    """A real Nutshell mint (its FakeWallet mints at once); only the ecash tests start it."""
    started = NutshellMint(mint_venv(), tmp_path_factory.mktemp("mint"), free_port())
    yield started
    started.stop()


@pytest.fixture(scope="module")
def wallet(mint: NutshellMint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PayerWallet]:
    payer = PayerWallet(mint_venv(), mint.url, tmp_path_factory.mktemp("payer"))
    yield payer
    payer.close()


@pytest.fixture(scope="module")
def ecash_srv(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream, mint: NutshellMint
) -> Iterator[ThreadedServer]:
    """satsgate taking the mint's ecash, its text engine the same fake upstream."""
    settings = make_settings(
        tmp_path_factory.mktemp("text-streaming-ecash"),
        cashu={"mints": [mint.url + "/"], "melt": False},
        **text_engines(fake),
    )
    server = ThreadedServer(settings)
    yield server
    server.stop()


@pytest.fixture
async def ecash_http(
    ecash_srv: ThreadedServer, fake: FakeAIUpstream
) -> AsyncIterator[httpx.AsyncClient]:
    fake.clear()
    async for c in http_client(ecash_srv):
        yield c
    assert_ledger_balances(ecash_srv)


def proofs_state(mint: NutshellMint, token: str) -> set[str]:
    """What the mint says of the token's proofs (NUT-07)."""
    ys = [y_of(p.secret) for p in decode_token(token).proofs]
    resp = httpx.post(mint.url + "/v1/checkstate", json={"Ys": ys}, timeout=10)
    return {s["state"] for s in resp.json()["states"]}


async def test_a_call_paid_in_ecash_streams_its_answer_and_the_token_serves_once(
    ecash_http: httpx.AsyncClient,
    ecash_srv: ThreadedServer,
    fake: FakeAIUpstream,
    mint: NutshellMint,
    wallet: PayerWallet,
    up: Upstream,
) -> None:
    body = up.body("Stream this for ecash")
    quoted = await ecash_http.post("/api/l402/generate-text", json=body)
    assert quoted.status_code == 402, quoted.text
    price = int(quoted.json()["amountSats"])
    token = wallet.token(price + 3)  # 3 sat over: the change comes back on the stream
    async with ecash_http.stream(
        "POST", "/api/l402/generate-text", json=body, headers={"X-Cashu": token}
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-route-model"] == str(up.model)
        change = resp.headers["X-Cashu-Change"]
        raw = "".join([chunk async for chunk in resp.aiter_text()])
    events = sse_events(raw)
    texts = texts_of(events)
    assert len(texts) > 1  # a piece per upstream delta
    assert "".join(texts) == "You said: Stream this for ecash"
    assert events[-1] == ("", "[DONE]")
    name, data = events[-2]
    assert name == "payment-receipt"
    receipt = json.loads(data)
    assert receipt["status"] == "success" and receipt["method"] == "cashu"
    assert (receipt["spentMsat"], receipt["units"]) == (price * 1000, len(texts))
    assert receipt["model"] == up.model
    assert receipt["usage"] == {"inputTokens": up.tokens[0], "outputTokens": up.tokens[1]}
    assert wallet.receive(change) == 3
    # The payer's proofs were swapped for satsgate's; the payment is spent once, nothing
    # refunded.
    assert proofs_state(mint, token) == {"SPENT"}
    payment_hash = receipt["reference"]
    await wait_for(lambda: str(payment_row(ecash_srv, payment_hash).status) == "spent", "not spent")
    payment = payment_row(ecash_srv, payment_hash)
    assert payment.mode == "cashu" and payment.amount_msat == price * 1000
    assert refunds_of(ecash_srv, payment_hash) == []
    # The same token again: refused before any upstream call, nothing charged again.
    again = await ecash_http.post("/api/l402/generate-text", json=body, headers={"X-Cashu": token})
    assert_envelope(again, "CASHU_TOKEN_SPENT", 400)
    assert "X-Cashu-Change" not in again.headers
    assert len(fake.requests(up.path)) == 1
    assert refunds_of(ecash_srv, payment_hash) == []


async def test_a_failure_before_the_first_token_is_the_usual_envelope_with_its_refund(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream, up: Upstream
) -> None:
    body = up.body("This one fails early")
    auth, payment_hash, price = await paid_auth(http, body)
    fake.fail_next(up.path, "429")
    resp = await http.post("/api/l402/generate-text", json=body, headers={"Authorization": auth})
    got = assert_envelope(resp, "RATE_LIMITED", 429)
    assert resp.headers["content-type"].startswith("application/json")
    assert got["refund"]["amount_sats"] * 1000 == price
    refunds = refunds_of(srv, payment_hash)
    assert [r.amount_msat for r in refunds] == [price]


async def test_a_failure_mid_stream_ends_it_with_an_error_event_and_one_refund(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream, up: Upstream
) -> None:
    body = up.body("This stream breaks after two words")
    auth, payment_hash, price = await paid_auth(http, body)
    fake.fail_next(up.path, "error_stream")
    resp = await http.post("/api/l402/generate-text", json=body, headers={"Authorization": auth})
    assert resp.status_code == 200
    events = sse_events(resp.text)
    assert "".join(texts_of(events)) == "You said: "  # the two words before the break
    assert_ended_refunded(events, srv, payment_hash, price, "L402_UPSTREAM_FAILED")
    assert "upstream-internal-detail" not in resp.text
    assert str(payment_row(srv, payment_hash).status) == "spent"


async def test_a_streamed_refusal_before_any_text_keeps_the_payment_and_says_why(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream, up: Upstream
) -> None:
    """A refusal before any text went out is the free-retry answer, its model_said the
    model's words: OpenAI streams them in ``delta.refusal`` pieces, Anthropic gives
    ``stop_details.explanation`` in its message_delta."""
    fake.refuse_terms = {"lockpick"}  # the OpenAI fake refuses the prompt
    if up is UPSTREAMS["anthropic"]:
        fake.fail_next(up.path, "refusal_first")
    body = up.body("Explain how to lockpick a door")
    auth, payment_hash, _ = await paid_auth(http, body)
    resp = await http.post("/api/l402/generate-text", json=body, headers={"Authorization": auth})
    got = assert_envelope(resp, "CONTENT_FILTERED_RETRY", 422)
    assert got["model_said"] == fake.refusal_text and "refund" not in got
    assert refunds_of(srv, payment_hash) == []
    declined = await http.post(
        "/api/decline-retry",
        json={"paymentId": got["paymentId"], "rework_token": got["rework_token"]},
    )
    assert declined.status_code == 200, declined.text


async def test_a_refusal_after_text_went_out_ends_the_stream_refunded(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    """Anthropic's refusal comes in message_delta, after the text it wrote: too late for a
    free retry, so the stream ends with CONTENT_FILTERED and the price refunded."""
    up = UPSTREAMS["anthropic"]
    body = up.body("Something it will refuse halfway")
    auth, payment_hash, price = await paid_auth(http, body)
    fake.fail_next(up.path, "refusal")
    resp = await http.post("/api/l402/generate-text", json=body, headers={"Authorization": auth})
    events = sse_events(resp.text)
    assert len(texts_of(events)) == 2
    assert_ended_refunded(events, srv, payment_hash, price, "CONTENT_FILTERED")


async def test_a_stalled_upstream_times_out_mid_stream_and_is_refunded(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream, up: Upstream
) -> None:
    body = up.body("This stream stalls after two words")
    auth, payment_hash, price = await paid_auth(http, body)
    fake.fail_next(up.path, "stall_stream")
    resp = await http.post("/api/l402/generate-text", json=body, headers={"Authorization": auth})
    events = sse_events(resp.text)
    assert len(texts_of(events)) == 2
    assert_ended_refunded(events, srv, payment_hash, price, "TIMEOUT")


async def test_a_caller_who_leaves_mid_stream_closes_the_upstream_and_is_served(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream, up: Upstream
) -> None:
    body = up.body("A long slow answer that the caller will not wait for at all")
    auth, payment_hash, _price = await paid_auth(http, body)
    fake.fail_next(up.path, "slow_stream")
    cut_before, done_before = fake.cuts["slow_stream"], fake.streams_done
    async with (
        httpx.AsyncClient(base_url=str(http.base_url), timeout=30) as own,
        own.stream(
            "POST", "/api/l402/generate-text", json=body, headers={"Authorization": auth}
        ) as resp,
    ):
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                break  # the first piece, then the reader goes away
    await wait_for(
        lambda: fake.cuts["slow_stream"] > cut_before, "the upstream stream was not closed"
    )
    assert fake.streams_done == done_before
    await wait_for(lambda: str(payment_row(srv, payment_hash).status) == "spent", "not spent")
    assert refunds_of(srv, payment_hash) == []  # served: what was generated is paid


async def test_a_slow_reader_holds_the_upstream_back_and_a_stalled_one_is_cut_off(
    http: httpx.AsyncClient,
    srv: ThreadedServer,
    fake: FakeAIUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streaming, "WRITE_STALL_S", 3.0)
    up = UPSTREAMS["openai"]
    body = up.body("A huge answer")
    auth, payment_hash, _price = await paid_auth(http, body)
    fake.fail_next(up.path, "huge_stream")
    sent_before, cut_before = fake.stream_chunks_sent, fake.cuts["huge_stream"]
    async with (
        httpx.AsyncClient(base_url=str(http.base_url), timeout=30) as own,
        own.stream(
            "POST", "/api/l402/generate-text", json=body, headers={"Authorization": auth}
        ) as resp,
    ):
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                break
        # The reader stops: the socket buffers fill, then satsgate stops reading upstream.
        settled = -1
        for _ in range(40):
            await asyncio.sleep(0.25)
            sent = fake.stream_chunks_sent - sent_before
            if sent == settled:
                break
            settled = sent
        assert 0 < settled < HUGE_CHUNKS // 4, settled  # far from the 64 MiB answer
        # Reading nothing for WRITE_STALL_S, the caller is cut off, and the upstream with it
        # (while this client still holds its connection open).
        for _ in range(200):
            if fake.cuts["huge_stream"] > cut_before:
                break
            await asyncio.sleep(0.05)
        assert fake.cuts["huge_stream"] == cut_before + 1
    await wait_for(lambda: str(payment_row(srv, payment_hash).status) == "spent", "not spent")
    assert refunds_of(srv, payment_hash) == []


async def test_mcp_answers_a_streamed_request_with_the_whole_text(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    from mcp import Client

    from tests.mcp.test_mcp import create_payment, first_text, mcp_url

    async with Client(mcp_url(srv)) as mcp:
        args = {"prompt": "Whole over MCP", "tier": "standard", "stream": True}
        payment = await create_payment(mcp, toolName="generate_text", **args)
        await dev_pay(http, payment["lightningInvoice"])
        result = await mcp.call_tool("generate_text", {"paymentId": payment["paymentId"], **args})
        assert not result.is_error, result
        assert "You said: Whole over MCP" in first_text(result)


def test_only_generate_text_streams() -> None:
    """multilingual-ask answers JSON (answer, language, translated) in the spec: no stream."""
    streaming = sorted(slug for slug, spec in BY_SLUG.items() if spec.stream_handler)
    assert streaming == ["generate-text"]
