"""Payment sessions (the Payment scheme's "session" intent, lightning method) end to end:
a real satsgate server on loopback, its AI engines on the fake OpenAI-compatible API,
credentials built by hand as draft-lightning-session-00 specifies (JCS JSON, base64url
without padding), the deposit paid through the dev node, and the balance read back from
the receipts, the store and the node's outgoing payments."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from satsgate.backends.cln import ClnBackend
from satsgate.lightning.invoices import decode_invoice, sign_invoice
from satsgate.payments.refund_request import NotRefundable, operator_refund
from satsgate.payments.session_wire import PROBLEMS
from satsgate.server.app import REFUNDS
from satsgate.services.catalog.pricing import text_tokens_msat
from tests.conftest import (
    STORES,
    ThreadedServer,
    dev_pay,
    http_client,
    make_settings,
    store_url_for,
)
from tests.engines.test_ai_openai import ENGINES, MODELS
from tests.engines_down import PROVIDER_KINDS as DOWN_KINDS
from tests.engines_down import down_engines
from tests.fakes.fake_ai_upstream import OPENAI_KEY, FakeAIUpstream
from tests.fakes.fake_lightningd import FakeNode, running_lightningd
from tests.ledger_check import assert_ledger_balances
from tests.mcp_client import tool_result

CHAT = "/v1/chat/completions"
WALLET_KEY = secrets.token_hex(32)  # the client's wallet: signs its return invoices
RARE = ("translate-rare-language", {"text": "Welcome", "targetLanguage": "tpi"})
ASK = ("multilingual-ask", {"question": "Wie spät ist es?", "language": "fr"})
TEXT = ("generate-text", {"prompt": "Say hello", "tier": "standard"})
# The fake upstream reports this usage for every chat completion.
FAKE_TOKENS = 19 + 10


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def jcs(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# What a client that wants a session sends with its first request: a 402 offers the
# session intent (and makes its deposit invoice) only when asked.
WANTS_SESSION = {"Accept-Payment": "lightning/charge, lightning/session"}


def session_challenge(resp: httpx.Response) -> dict[str, str]:
    """The auth-params of the 402's session challenge."""
    for value in resp.headers.get_list("www-authenticate"):
        if value.startswith("Payment ") and 'intent="session"' in value:
            return dict(re.findall(r'(\w+)="([^"]*)"', value))
    raise AssertionError(f"no session challenge in {resp.headers}")


def credential(challenge: dict[str, str], payload: dict[str, Any]) -> str:
    echoed = {k: challenge[k] for k in ("id", "realm", "method", "intent", "request", "expires")}
    return "Payment " + b64url(jcs({"challenge": echoed, "payload": payload}))


def receipt(resp: httpx.Response) -> dict[str, Any]:
    value = resp.headers["payment-receipt"]
    assert "=" not in value
    return dict(unb64url(value))


def return_invoice(expiry_s: int = 3600, network: str = "regtest") -> str:
    """An amountless invoice of the client's own wallet (not the server's node)."""
    return sign_invoice(
        network=network,
        amount_msat=0,
        payment_hash=secrets.token_hex(32),
        payment_secret=secrets.token_hex(32),
        description="session refund",
        expiry_s=expiry_s,
        private_key_hex=WALLET_KEY,
    )


class Client:
    """A session client: open, bearer, topUp, close, with hand-built credentials."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.session_id = ""
        self.preimage = ""
        self.token = ""  # the session token the open answered
        self.challenge: dict[str, str] = {}
        self.return_invoice = return_invoice()

    async def offer(self, slug: str, body: dict[str, Any]) -> tuple[dict[str, str], str]:
        """A 402's session challenge and the deposit's preimage, paid through the dev node."""
        resp = await self.http.post(f"/api/l402/{slug}", json=body, headers=WANTS_SESSION)
        assert resp.status_code == 402, resp.text
        challenge = session_challenge(resp)
        request = unb64url(challenge["request"])
        preimage = await dev_pay(self.http, request["depositInvoice"])
        return challenge, preimage

    async def open(self, slug: str, body: dict[str, Any]) -> httpx.Response:
        challenge, preimage = await self.offer(slug, body)
        return await self.open_with(challenge, preimage, slug, body)

    async def open_with(
        self, challenge: dict[str, str], preimage: str, slug: str, body: dict[str, Any]
    ) -> httpx.Response:
        """Open with this paid deposit; keep the session token the answer hands over."""
        self.challenge, self.preimage = challenge, preimage
        self.session_id = unb64url(challenge["request"])["paymentHash"]
        payload = {"action": "open", "preimage": preimage, "returnInvoice": self.return_invoice}
        opened = await self.post(slug, body, credential(challenge, payload))
        self.token = opened.headers.get("payment-session-token", "")
        return opened

    def bearer_auth(self) -> str:
        payload = {
            "action": "bearer",
            "sessionId": self.session_id,
            "preimage": self.preimage,
            "token": self.token,
        }
        return credential(self.challenge, payload)

    async def bearer(self, slug: str, body: dict[str, Any]) -> httpx.Response:
        return await self.post(slug, body, self.bearer_auth())

    async def top_up(
        self, slug: str, body: dict[str, Any], action: str = "topUp"
    ) -> httpx.Response:
        challenge, preimage = await self.offer(slug, body)
        payload = {
            "action": action,
            "sessionId": self.session_id,
            "topUpPreimage": preimage,
            "token": self.token,
        }
        return await self.post(slug, body, credential(challenge, payload))

    async def close(
        self, slug: str = RARE[0], body: dict[str, Any] | None = None
    ) -> httpx.Response:
        payload = {
            "action": "close",
            "sessionId": self.session_id,
            "preimage": self.preimage,
            "token": self.token,
        }
        return await self.post(slug, body or RARE[1], credential(self.challenge, payload))

    async def post(self, slug: str, body: dict[str, Any], auth: str) -> httpx.Response:
        return await self.http.post(f"/api/l402/{slug}", json=body, headers={"Authorization": auth})


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAIUpstream]:
    upstream = FakeAIUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module", params=STORES)
def srv(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake: FakeAIUpstream,
) -> Iterator[ThreadedServer]:
    """The module's server, once on each engine of the store (its tests run on both)."""
    settings = make_settings(
        tmp_path_factory.mktemp("sessions"),
        store_url=store_url_for(request),
        providers={
            "cloud": {
                "kind": "openai",
                "base_url": f"{fake.url}/v1",
                "api_key": OPENAI_KEY,
                "timeout_s": 5.0,
                "models": MODELS,
            }
        },
        engines={name: "cloud" for name in ENGINES},
        # A deposit covers eleven calls of the service whose 402 offered it.
        session_deposit_multiplier=11,
    )
    server = ThreadedServer(settings)
    yield server
    server.stop()


@pytest.fixture
async def http(srv: ThreadedServer, fake: FakeAIUpstream) -> AsyncIterator[httpx.AsyncClient]:
    fake.clear()
    async for c in http_client(srv):
        yield c
    assert_ledger_balances(srv)


async def price_msat(http: httpx.AsyncClient, slug: str, body: dict[str, Any]) -> int:
    resp = await http.post(f"/api/l402/{slug}", json=body)
    return int(resp.json()["amountSats"]) * 1000


def session_row(srv: ThreadedServer, session_id: str) -> Any:
    return srv.call(lambda: srv.store.sessions.get(session_id))


def deposit_rows(srv: ThreadedServer) -> int:
    """The payment rows of session deposits (each one an invoice of the node)."""
    return int(
        srv.call(
            lambda: srv.store.db.run_sync(
                lambda c: c.execute(
                    "SELECT COUNT(*) FROM payments WHERE mode = 'deposit'"
                ).fetchone()[0]
            )
        )
    )


# -- the challenge -------------------------------------------------------------------------


async def test_a_402_offers_a_session_challenge_to_a_client_that_asks_for_one(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """Accept-Payment naming the session intent (or a wildcard over it) gets the session
    challenge beside L402 and charge; without it (or with one that leaves sessions out)
    the 402 has no session challenge and no deposit invoice is made."""
    before = deposit_rows(srv)
    for accept in (None, "lightning/charge", "cashu/session", "lightning/session;q=0"):
        headers = {} if accept is None else {"Accept-Payment": accept}
        plain = await http.post(f"/api/l402/{TEXT[0]}", json=TEXT[1], headers=headers)
        assert plain.status_code == 402
        lines = plain.headers.get_list("www-authenticate")
        assert not any('intent="session"' in v for v in lines), accept
        assert "session" not in plain.json()
    assert deposit_rows(srv) == before  # none made
    for accept in ("lightning/session", "lightning/*", "*/*"):
        asked = await http.post(
            f"/api/l402/{TEXT[0]}", json=TEXT[1], headers={"Accept-Payment": accept}
        )
        assert session_challenge(asked)["intent"] == "session", accept
    assert deposit_rows(srv) == before + 3
    resp = await http.post(f"/api/l402/{TEXT[0]}", json=TEXT[1], headers=WANTS_SESSION)
    assert resp.status_code == 402
    schemes = [v.split(" ", 1)[0] for v in resp.headers.get_list("www-authenticate")]
    assert schemes == ["Payment", "Payment", "L402", "LSAT"]
    ch = session_challenge(resp)
    assert (ch["method"], ch["intent"]) == ("lightning", "session")
    assert "=" not in ch["request"]
    raw = base64.urlsafe_b64decode(ch["request"] + "=" * (-len(ch["request"]) % 4))
    request = json.loads(raw)
    assert raw == jcs(request)  # canonical: sorted keys, no whitespace
    price = resp.json()["amountSats"]
    assert request["amount"] == str(price) and request["currency"] == "sat"
    assert request["unitType"] == "request" and request["idleTimeout"] == "300"
    assert request["depositAmount"] == str(11 * price)
    invoice = decode_invoice(request["depositInvoice"])
    assert invoice.amount_msat == 11 * price * 1000
    assert invoice.payment_hash == request["paymentHash"]
    assert resp.headers["cache-control"] == "no-store"


# -- open, bearer across services, metered text --------------------------------------------


async def test_open_then_bearer_calls_across_services_draw_on_one_balance(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    client = Client(http)
    rare_price = await price_msat(http, *RARE)
    ask_price = await price_msat(http, *ASK)
    deposit = 11 * rare_price

    opened = await client.open(*RARE)
    assert opened.status_code == 200, opened.text
    assert opened.json()["translatedText"] == "[Tok] Welcome"
    first = receipt(opened)
    assert first["reference"] == client.session_id and first["status"] == "success"
    assert first["method"] == "lightning" and first["balanceMsat"] == deposit - rare_price
    assert first["chargedMsat"] == rare_price
    # The open's answer alone hands over the session token (header and receipt), and no
    # cache keeps it.
    assert opened.headers["cache-control"] == "private, no-store"
    assert re.fullmatch("[0-9a-f]{64}", client.token)
    assert first["sessionToken"] == client.token

    # Metered text: the quote is reserved, the tokens the provider reported are debited.
    asked = await client.bearer(*ASK)
    assert asked.status_code == 200, asked.text
    assert asked.json()["answer"] == "Answer in French."
    metered = text_tokens_msat(31, FAKE_TOKENS, 15)
    assert 0 < metered < ask_price
    assert receipt(asked)["chargedMsat"] == metered
    assert receipt(asked)["balanceMsat"] == deposit - rare_price - metered

    text = await client.bearer(*TEXT)
    assert text.status_code == 200, text.text
    assert text.text == "You said: Say hello"
    charged = text_tokens_msat(31, FAKE_TOKENS)
    balance = deposit - rare_price - metered - charged
    assert receipt(text) == {
        "balanceMsat": balance,
        "balanceSats": balance // 1000,
        "challengeId": client.challenge["id"],
        "chargedMsat": charged,
        "method": "lightning",
        "reference": client.session_id,
        "status": "success",
        "timestamp": receipt(text)["timestamp"],
    }
    row = session_row(srv, client.session_id)
    assert (row.deposit_msat, row.balance_msat, row.status) == (deposit, balance, "open")
    assert len(fake.requests(CHAT)) == 3
    # The deposit's payment is consumed: the same open again replays, never re-opens.
    again = await client.post(
        RARE[0],
        RARE[1],
        credential(
            client.challenge,
            {"action": "open", "preimage": client.preimage, "returnInvoice": client.return_invoice},
        ),
    )
    assert again.status_code == 200 and again.json()["translatedText"] == "[Tok] Welcome"
    # The same open again is answered the same token, never a second one.
    assert again.headers["payment-session-token"] == client.token
    assert len(fake.requests(CHAT)) == 3
    assert session_row(srv, client.session_id).balance_msat == balance
    assert (await client.close()).json()["refundStatus"] == "succeeded"


# -- the race, top-up ----------------------------------------------------------------------


async def test_fifty_concurrent_bearer_calls_on_ten_calls_of_balance_serve_ten(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    client = Client(http)
    price = await price_msat(http, *RARE)
    assert (await client.open(*RARE)).status_code == 200  # 11 calls deposited, 10 left
    fake.clear()

    answers = await asyncio.gather(*(client.bearer(*RARE) for _ in range(50)))
    served = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert len(served) == 10 and len(refused) == 40
    assert all(a.json()["translatedText"] == "[Tok] Welcome" for a in served)
    assert sorted(receipt(a)["balanceMsat"] for a in served) == [i * price for i in range(10)]
    for resp in refused:
        assert resp.status_code == 402
        assert resp.headers["content-type"].startswith("application/problem+json")
        problem = resp.json()
        assert problem["type"] == PROBLEMS + "insufficient-balance"
        assert problem["status"] == 402 and problem["error_code"] == "PAYMENT_INSUFFICIENT"
        assert problem["balanceMsat"] == 0
        assert unb64url(session_challenge(resp)["request"])["depositInvoice"]
    assert len(fake.requests(CHAT)) == 10  # the upstream ran exactly the ten paid calls
    row = session_row(srv, client.session_id)
    assert row.balance_msat == 0 and row.spent_msat == row.deposit_msat

    # topUp (spelled "topup" as some clients do): the deposit of a fresh 402 is added.
    topped = await client.top_up(*RARE, action="topup")
    assert topped.status_code == 200, topped.text
    assert topped.json() == {
        "status": "ok",
        "sessionId": client.session_id,
        "balanceSats": 11 * price // 1000,
        "balanceMsat": 11 * price,
    }
    assert receipt(topped)["balanceSats"] == 11 * price // 1000
    assert len(fake.requests(CHAT)) == 10  # a top-up serves nothing
    assert (await client.bearer(*RARE)).status_code == 200
    assert session_row(srv, client.session_id).balance_msat == 10 * price
    closed = await client.close()
    assert closed.json()["refundSats"] == 10 * price // 1000


async def test_top_up_credential_replayed_credits_once(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    client = Client(http)
    price = await price_msat(http, *RARE)
    assert (await client.open(*RARE)).status_code == 200
    challenge, preimage = await client.offer(*RARE)
    payload = {
        "action": "topUp",
        "sessionId": client.session_id,
        "topUpPreimage": preimage,
        "token": client.token,
    }
    auth = credential(challenge, payload)
    first = await client.post(*RARE, auth)
    second = await client.post(*RARE, auth)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert session_row(srv, client.session_id).balance_msat == 21 * price
    # That deposit cannot top up (or open) anything else.
    other = Client(http)
    assert (await other.open(*RARE)).status_code == 200
    stolen = await other.post(
        *RARE,
        credential(
            challenge,
            {
                "action": "topUp",
                "sessionId": other.session_id,
                "topUpPreimage": preimage,
                "token": other.token,
            },
        ),
    )
    assert stolen.status_code == 402
    assert stolen.json()["type"] == PROBLEMS + "unknown-challenge"
    await client.close()
    await other.close()


# -- failure after the debit ---------------------------------------------------------------


async def test_a_call_failing_after_the_debit_is_credited_back_at_once(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    client = Client(http)
    price = await price_msat(http, *RARE)
    assert (await client.open(*RARE)).status_code == 200
    before = session_row(srv, client.session_id).balance_msat
    fake.fail_next(CHAT, "500", times=2)  # the one retry fails too
    failed = await client.bearer(*RARE)
    assert failed.status_code >= 500, failed.text
    body = failed.json()
    assert body.get("refund") is None  # no LNURL link
    assert body["session"] == {
        "sessionId": client.session_id,
        "creditedMsat": price,
        "creditedSats": price // 1000,
        "balanceMsat": before,
        "balanceSats": before // 1000,
    }
    assert "payment-receipt" not in failed.headers
    assert session_row(srv, client.session_id).balance_msat == before
    await client.close()


# -- streamed text ---------------------------------------------------------------------------


def sse_events(raw: str) -> list[tuple[str, str]]:
    """(event name or "", data) of each server-sent event."""
    events = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        name, data = "", ""
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
        events.append((name, data))
    return events


STREAM = (
    "generate-text",
    {"prompt": "Say hello to the stream", "tier": "standard", "stream": True},
)


async def test_a_stream_is_billed_by_the_usage_of_its_last_chunk(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    client = Client(http)
    assert (await client.open(*RARE)).status_code == 200
    before = session_row(srv, client.session_id).balance_msat
    price = await price_msat(http, *STREAM)
    resp = await client.bearer(*STREAM)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert receipt(resp)["reservedMsat"] == price
    assert receipt(resp)["balanceMsat"] == before - price
    events = sse_events(resp.text)
    texts = [json.loads(d)["text"] for name, d in events if name == "" and d != "[DONE]"]
    assert "".join(texts) == "You said: Say hello to the stream"
    assert events[-1] == ("", "[DONE]")
    name, data = events[-2]
    assert name == "payment-receipt"
    charged = text_tokens_msat(31, FAKE_TOKENS)
    got = json.loads(data)
    assert (got["spentMsat"], got["units"], got["reference"]) == (
        charged,
        len(texts),
        client.session_id,
    )
    assert got["balanceMsat"] == before - charged
    assert (got["model"], got["usage"]) == (31, {"inputTokens": 19, "outputTokens": 10})
    assert resp.headers["x-route-model"] == "31"
    assert session_row(srv, client.session_id).balance_msat == before - charged
    sent = fake.requests(CHAT)[-1].json
    assert sent is not None and sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    await client.close()


async def test_an_abandoned_stream_pays_its_reservation(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    client = Client(http)
    rare = await price_msat(http, *RARE)
    price = await price_msat(http, *STREAM)
    assert (await client.open(*RARE)).status_code == 200
    fake.fail_next(CHAT, "slow_stream")
    cut_before = fake.streams_cut
    async with httpx.AsyncClient(base_url=str(http.base_url), timeout=30) as own, own.stream(
        "POST", "/api/l402/generate-text", json=STREAM[1],
        headers={"Authorization": client.bearer_auth()},
    ) as resp:  # fmt: skip
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                break  # the first piece, then the reader goes away
    for _ in range(100):  # the server stops the upstream stream too
        if fake.streams_cut > cut_before:
            break
        await asyncio.sleep(0.1)
    assert fake.streams_cut == cut_before + 1
    closed = await client.close()  # waits for the stream's call to end
    row = session_row(srv, client.session_id)
    assert row.refund_msat == 11 * rare - rare - price  # the reservation was kept
    assert closed.json()["refundSats"] == row.refund_msat // 1000


# -- refusals: the draft's problem types ---------------------------------------------------


async def test_refused_credentials_get_402_a_fresh_challenge_and_the_problem_type(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    client = Client(http)
    challenge, preimage = await client.offer(*RARE)

    async def problem(payload: dict[str, Any], ch: dict[str, str] = challenge) -> dict[str, Any]:
        resp = await client.post(*RARE, credential(ch, payload))
        assert resp.status_code == 402, resp.text
        assert session_challenge(resp)  # a fresh one
        return dict(resp.json())

    wrong = secrets.token_hex(32)
    assert (
        await problem({"action": "open", "preimage": wrong, "returnInvoice": return_invoice()})
    )["type"] == PROBLEMS + "invalid-preimage"
    with_amount = sign_invoice(
        network="regtest",
        amount_msat=1000,
        payment_hash=secrets.token_hex(32),
        payment_secret=secrets.token_hex(32),
        description="x",
        expiry_s=3600,
        private_key_hex=WALLET_KEY,
    )
    for bad in (with_amount, return_invoice(network="bitcoin"), "lnbcrt1garbage"):
        found = await problem({"action": "open", "preimage": preimage, "returnInvoice": bad})
        assert found["type"] == PROBLEMS + "invalid-return-invoice"
    forged = {**challenge, "id": b64url(secrets.token_bytes(32))}
    found = await problem({"action": "bearer", "sessionId": wrong, "preimage": wrong}, forged)
    assert found["type"] == PROBLEMS + "unknown-challenge"
    pre = secrets.token_hex(32)
    unknown = hashlib.sha256(bytes.fromhex(pre)).hexdigest()
    found = await problem(
        {"action": "bearer", "sessionId": unknown, "preimage": pre, "token": "0" * 64}
    )
    assert found["type"] == PROBLEMS + "session-not-found"
    found = await problem({"action": "dance"})
    assert found["type"] == PROBLEMS + "malformed-credential"
    # Nothing was opened by any of these, and the deposit still opens a session.
    assert session_row(srv, unb64url(challenge["request"])["paymentHash"]) is None
    assert (await client.open_with(challenge, preimage, *RARE)).status_code == 200
    await client.close()


async def test_a_deposit_paid_and_never_opened_is_refunded_like_any_unused_payment(
    http: httpx.AsyncClient,
) -> None:
    client = Client(http)
    challenge, preimage = await client.offer(*RARE)
    request = unb64url(challenge["request"])
    refunded = await http.post(
        "/api/l402/refund",
        json={
            "paymentId": f"dep_{request['paymentHash']}",
            "invoice": request["depositInvoice"],
        },
        # The proof: the session challenge it was issued, echoed, with the preimage.
        headers={"Authorization": credential(challenge, {"action": "open", "preimage": preimage})},
    )
    assert refunded.status_code == 200, refunded.text
    assert refunded.json()["refund"]["amount_sats"] == int(request["depositAmount"])
    # Refunded, it opens nothing (the refund and the open both start from paid).
    payload = {"action": "open", "preimage": preimage, "returnInvoice": client.return_invoice}
    opened = await client.post(*RARE, credential(challenge, payload))
    assert opened.status_code == 402
    assert opened.json()["type"] == PROBLEMS + "unknown-challenge"


async def test_the_operators_refund_of_a_session_deposit_is_refused(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """The deposit is the session's balance, paid back to its return invoice at close: a
    refund link for it too would give it back twice."""
    client = Client(http)
    assert (await client.open(*RARE)).status_code == 200
    deposit = srv.call(lambda: srv.store.payments.get_by_hash(client.session_id))
    refunds, sessions = srv.app[REFUNDS], srv.store.sessions
    with pytest.raises(NotRefundable, match=f"deposit of session {client.session_id}"):
        srv.call(lambda: operator_refund(srv.gate, refunds, sessions, deposit))
    assert srv.call(lambda: srv.store.refunds.for_payment(deposit.payment_id)) == []
    assert (await client.close()).status_code == 200
    srv.call(lambda: srv.gate.sessions.wait_closing())
    assert_ledger_balances(srv)


# -- close ---------------------------------------------------------------------------------


async def test_close_pays_the_balance_to_the_return_invoice_once_and_twice_answers_the_same(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    client = Client(http)
    price = await price_msat(http, *RARE)
    assert (await client.open(*RARE)).status_code == 200
    assert (await client.bearer(*ASK)).status_code == 200
    balance = session_row(srv, client.session_id).balance_msat
    assert balance % 1000 != 0  # the metered call left a fraction of a sat

    closed = await client.close()
    assert closed.status_code == 200, closed.text
    assert closed.json() == {
        "status": "closed",
        "sessionId": client.session_id,
        "refundSats": balance // 1000,
        "refundStatus": "succeeded",
        "closeReason": "client",
    }
    got = receipt(closed)
    assert (got["refundSats"], got["refundStatus"]) == (balance // 1000, "succeeded")
    paid = [
        p
        for p in await srv.backend.outgoing_payments()
        if p["payment_hash"] == decode_invoice(client.return_invoice).payment_hash
    ]
    assert len(paid) == 1
    assert (paid[0]["amount_msat"], paid[0]["state"], paid[0]["attempts"]) == (
        balance,
        "succeeded",
        1,
    )

    again = await client.close()
    assert again.status_code == 200 and again.json() == closed.json()
    after = await client.bearer(*RARE)
    assert after.status_code == 402 and after.json()["type"] == PROBLEMS + "session-closed"
    outgoing = await srv.backend.outgoing_payments()
    assert [p["attempts"] for p in outgoing if p["payment_hash"] == paid[0]["payment_hash"]] == [1]
    row = session_row(srv, client.session_id)
    assert (row.refund_msat, row.payout_status, row.payout_attempts) == (balance, "succeeded", 1)
    assert row.spent_msat == price + (11 * price - price - balance)


async def test_a_failed_payout_is_retried_and_shown_to_the_operator(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    client = Client(http)
    assert (await client.open(*RARE)).status_code == 200
    srv.backend.outgoing_mode = "fail"
    try:
        closed = await client.close()
        assert closed.json()["refundStatus"] == "failed"
        report = srv.call(lambda: _operator_report(srv))
        assert [p["session_id"] for p in report["session_payouts"]] == [client.session_id]
        assert report["session_payouts"][0]["payout_error"]
        # The sweep does not retry before the backoff; then it pays.
        srv.call(srv.gate.sessions.sweep)
        assert session_row(srv, client.session_id).payout_attempts == 1
    finally:
        srv.backend.outgoing_mode = "succeed"
    srv.call(lambda: _due_now(srv, client.session_id))
    srv.call(srv.gate.sessions.sweep)
    row = session_row(srv, client.session_id)
    assert (row.payout_status, row.payout_attempts) == ("succeeded", 2)
    again = await client.close()
    assert again.json()["refundStatus"] == "succeeded"


async def test_a_return_invoice_serves_one_session_only(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """A node pays an invoice once: a second session naming the same return invoice
    would have its payout answered "already paid" and read as paid with nothing moved
    (seen on Core Lightning v26.06). Its open is refused; its deposit stays usable."""
    first = Client(http)
    assert (await first.open(*RARE)).status_code == 200
    second = Client(http)
    second.return_invoice = first.return_invoice
    refused = await second.open(*RARE)
    assert refused.status_code == 402
    assert refused.json()["type"] == PROBLEMS + "invalid-return-invoice"
    assert "another session" in refused.json()["detail"]
    assert session_row(srv, second.session_id) is None
    second.return_invoice = return_invoice()
    opened = await second.open_with(second.challenge, second.preimage, *RARE)
    assert opened.status_code == 200, opened.text  # the same deposit, a fresh invoice
    for client in (first, second):
        assert (await client.close()).json()["refundStatus"] == "succeeded"
    hashes = {decode_invoice(c.return_invoice).payment_hash for c in (first, second)}
    paid = [p for p in await srv.backend.outgoing_payments() if p["payment_hash"] in hashes]
    assert len(paid) == 2


async def test_two_concurrent_opens_with_one_return_invoice_open_one_session(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """Two opens naming one return invoice at the same moment: exactly one session; the
    other gets the open check's own answer and keeps its deposit unused."""
    first, second = Client(http), Client(http)
    second.return_invoice = first.return_invoice
    opens = []
    for client in (first, second):
        challenge, preimage = await client.offer(*RARE)
        opens.append(client.open_with(challenge, preimage, *RARE))
    answers = await asyncio.gather(*opens)
    assert sorted(a.status_code for a in answers) == [200, 402], [a.text for a in answers]
    refused = next(a for a in answers if a.status_code == 402)
    assert refused.json()["type"] == PROBLEMS + "invalid-return-invoice"
    assert "another session" in refused.json()["detail"]
    rows = [session_row(srv, c.session_id) for c in (first, second)]
    assert sum(row is not None for row in rows) == 1
    winner = first if rows[0] is not None else second
    assert (await winner.close()).json()["refundStatus"] == "succeeded"


async def test_a_return_invoice_the_node_paid_already_is_not_reported_paid(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """The node paid the return invoice before the close (another way than this session):
    the payout is failed for the operator, never "succeeded" with nothing moved."""
    client = Client(http)
    assert (await client.open(*RARE)).status_code == 200
    balance = session_row(srv, client.session_id).balance_msat
    earlier = await srv.backend.pay_invoice(client.return_invoice, 10_000, 5, amount_msat=1_000)
    assert earlier.state.value == "succeeded"
    closed = await client.close()
    assert closed.json()["refundStatus"] == "failed"
    row = session_row(srv, client.session_id)
    assert (row.refund_msat, row.payout_status, row.payout_attempts) == (balance, "failed", 1)
    assert "paid already" in row.payout_error
    srv.call(srv.gate.sessions.sweep)  # never retried: it would be "already paid" again
    assert session_row(srv, client.session_id).payout_attempts == 1
    report = srv.call(lambda: _operator_report(srv))
    assert client.session_id in [p["session_id"] for p in report["session_payouts"]]
    ret_hash = decode_invoice(client.return_invoice).payment_hash
    paid = [p for p in await srv.backend.outgoing_payments() if p["payment_hash"] == ret_hash]
    assert [(p["amount_msat"], p["attempts"]) for p in paid] == [(1_000, 1)]


async def _operator_report(srv: ThreadedServer) -> dict[str, Any]:
    from satsgate.operator import operator_report

    return await operator_report(srv.store, None)


async def _due_now(srv: ThreadedServer, session_id: str) -> None:
    """The backoff has passed (the clock the sweep reads is the row's retry time)."""
    await srv.store.db.run_sync(
        lambda conn: conn.execute(
            "UPDATE sessions SET payout_next_at = 0 WHERE session_id = ?", (session_id,)
        )
    )


# -- MCP -----------------------------------------------------------------------------------


async def test_an_mcp_tool_call_is_paid_from_the_session(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    client = Client(http)
    price = await price_msat(http, *RARE)
    assert (await client.open(*RARE)).status_code == 200

    async def call(payment_id: str) -> dict[str, Any]:
        arguments = {**RARE[1], "paymentId": payment_id}
        return await tool_result(http, "translate_rare_language", arguments)

    result = await call(f"sess_{client.session_id}.{client.token}")
    assert result["isError"] is False
    assert result["structuredContent"]["translatedText"] == "[Tok] Welcome"
    assert result["structuredContent"]["session"] == {
        "sessionId": client.session_id,
        "chargedMsat": price,
        "balanceMsat": 9 * price,
        "balanceSats": 9 * price // 1000,
    }
    refused = await call(f"sess_{secrets.token_hex(32)}.{client.token}")
    assert refused["isError"] is True
    assert refused["structuredContent"]["error_code"] == "PAYMENT_INVALID"  # no such session
    assert session_row(srv, client.session_id).balance_msat == 9 * price
    await client.close()


# -- the idle sweep ------------------------------------------------------------------------


@pytest.fixture
def idle_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("sessions-idle"),
        session_idle_timeout_s=1,
        **down_engines(["text", "translation", "rare_translation"]),
    )
    from satsgate.engines.providers import PROVIDER_KINDS

    server = ThreadedServer(settings, {**PROVIDER_KINDS, **DOWN_KINDS})
    yield server
    server.stop()


async def test_an_idle_session_is_closed_and_paid_back_by_the_sweep(
    idle_srv: ThreadedServer,
) -> None:
    async for http in http_client(idle_srv):
        client = Client(http)
        price = await price_msat(http, *RARE)
        opened = await client.open(*RARE)
        assert opened.status_code >= 500  # the engine is down: the open's call is credited
        assert opened.json()["session"]["balanceMsat"] == 20 * price
        for _ in range(100):
            row = session_row(idle_srv, client.session_id)
            if row.payout_status == "succeeded":
                break
            await asyncio.sleep(0.1)
        assert (row.status, row.close_reason, row.refund_msat) == ("closed", "idle", 20 * price)
        paid = [
            p
            for p in await idle_srv.backend.outgoing_payments()
            if p["payment_hash"] == decode_invoice(client.return_invoice).payment_hash
        ]
        assert [(p["amount_msat"], p["attempts"]) for p in paid] == [(20 * price, 1)]
        closed = await client.close()
        assert closed.json()["refundStatus"] == "succeeded"
        assert closed.json()["closeReason"] == "idle"
        assert_ledger_balances(idle_srv)


# -- Core Lightning ------------------------------------------------------------------------


async def test_close_pays_an_amountless_return_invoice_through_core_lightning(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with running_lightningd() as ln:
        wallet = FakeNode(alias="wallet")
        ln.node.connect(wallet)
        settings = make_settings(
            tmp_path_factory.mktemp("sessions-cln"), **down_engines(["rare_translation"])
        )
        from satsgate.engines.providers import PROVIDER_KINDS

        backend = ClnBackend(ln.rpc_path, "regtest", wait_timeout_s=1)
        server = ThreadedServer(settings, {**PROVIDER_KINDS, **DOWN_KINDS}, backend=backend)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                resp = await http.post(f"/api/l402/{RARE[0]}", json=RARE[1], headers=WANTS_SESSION)
                challenge = session_challenge(resp)
                request = unb64url(challenge["request"])
                preimage = await asyncio.to_thread(ln.pay_from_outside, request["depositInvoice"])
                refund_to = wallet.invoice("any", "session-refund", "refund", 3600)["bolt11"]
                assert decode_invoice(refund_to).amount_msat is None
                deposit = int(request["depositAmount"]) * 1000
                session_id = request["paymentHash"]
                opened = await http.post(
                    f"/api/l402/{RARE[0]}",
                    json=RARE[1],
                    headers={
                        "Authorization": credential(
                            challenge,
                            {"action": "open", "preimage": preimage, "returnInvoice": refund_to},
                        )
                    },
                )
                assert opened.json()["session"]["balanceMsat"] == deposit  # credited back
                # The open's call failed: its answer hands over the session token all the same.
                token = opened.headers["payment-session-token"]
                assert opened.json()["sessionToken"] == token
                close = credential(
                    challenge,
                    {
                        "action": "close",
                        "sessionId": session_id,
                        "preimage": preimage,
                        "token": token,
                    },
                )
                first = await http.post(
                    f"/api/l402/{RARE[0]}", json=RARE[1], headers={"Authorization": close}
                )
                second = await http.post(
                    f"/api/l402/{RARE[0]}", json=RARE[1], headers={"Authorization": close}
                )
                assert first.json()["refundStatus"] == "succeeded"
                assert first.json() == second.json()
                got = wallet.listinvoices(label="session-refund")["invoices"][0]
                assert (got["status"], got["amount_received_msat"]) == ("paid", deposit)
                pays = ln.node.listpays(payment_hash=decode_invoice(refund_to).payment_hash)
                assert len(pays["pays"]) == 1
                assert_ledger_balances(server)
        finally:
            server.stop()


def test_backends_pay_an_amountless_invoice_with_the_amount_given() -> None:
    """The dev node's rule matches the real nodes': amountless needs an amount, an invoice
    with an amount refuses another one."""
    from satsgate.backends.dev import DevBackend
    from satsgate.lightning.backend import PaymentState

    async def go(tmp: str) -> None:
        from pathlib import Path

        node = DevBackend(Path(tmp))
        await node.start()
        try:
            none = await node.pay_invoice(return_invoice(), 10_000, 5)
            assert none.state is PaymentState.FAILED
            paid = await node.pay_invoice(return_invoice(), 10_000, 5, amount_msat=12_345)
            assert (paid.state, paid.amount_msat) == (PaymentState.SUCCEEDED, 12_345)
        finally:
            await node.close()

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(go(tmp))
    assert time.time() > 0


# -- the official MPP SDK as the client -----------------------------------------------------


async def test_pympp_reads_the_session_challenge_and_drives_a_session(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """pympp (0.16.0, no lightning method: the deposit is paid through the dev node here)
    parses the session challenge, its own verifier agrees with its id under the server
    secret, its Credential serialises the open, bearer and close actions, and it parses
    the receipts."""
    import mpp

    from satsgate.payments.challenger import realm_of
    from satsgate.server.app import SETTINGS

    settings = srv.app[SETTINGS]
    resp = await http.post(f"/api/l402/{RARE[0]}", json=RARE[1], headers=WANTS_SESSION)
    line = next(v for v in resp.headers.get_list("www-authenticate") if 'intent="session"' in v)
    challenge = mpp.Challenge.from_www_authenticate(line)
    assert (challenge.method, challenge.intent) == ("lightning", "session")
    assert challenge.verify(settings.server_secret, realm_of(settings.public_base_url))
    preimage = await dev_pay(http, challenge.request["depositInvoice"])
    refund_to = return_invoice()

    async def send(payload: dict[str, Any]) -> httpx.Response:
        auth = mpp.Credential(challenge.to_echo(), payload).to_authorization()
        return await http.post(
            f"/api/l402/{RARE[0]}", json=RARE[1], headers={"Authorization": auth}
        )

    opened = await send({"action": "open", "preimage": preimage, "returnInvoice": refund_to})
    assert opened.status_code == 200, opened.text
    session_id = challenge.request["paymentHash"]
    token = opened.headers["payment-session-token"]
    proof = {"sessionId": session_id, "preimage": preimage, "token": token}
    bearer = await send({"action": "bearer", **proof})
    assert bearer.status_code == 200 and bearer.json()["translatedText"] == "[Tok] Welcome"
    got = mpp.Receipt.from_payment_receipt(bearer.headers["payment-receipt"])
    assert (got.status, got.method, got.reference) == ("success", "lightning", session_id)
    closed = await send({"action": "close", **proof})
    assert closed.json()["refundStatus"] == "succeeded"
    assert mpp.Receipt.from_payment_receipt(closed.headers["payment-receipt"]).status == "success"


async def test_a_call_a_restart_interrupted_is_credited_back_at_start(tmp_path: Any) -> None:
    """A debit whose call never ended (the process died mid-call: simulated by a debit
    with no call behind it) is given back when satsgate starts again."""
    from satsgate.engines.providers import PROVIDER_KINDS

    settings = make_settings(tmp_path / "data", **down_engines(["rare_translation"]))
    kinds = {**PROVIDER_KINDS, **DOWN_KINDS}
    first = ThreadedServer(settings, kinds)
    try:
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as http:
            client = Client(http)
            price = await price_msat(http, *RARE)
            opened = await client.open(*RARE)  # its call fails: credited
            deposit = opened.json()["session"]["balanceMsat"]
            assert deposit == 20 * price
            left = first.call(lambda: first.store.sessions.debit(client.session_id, price, 0))
            assert left == deposit - price
            assert session_row(first, client.session_id).balance_msat == deposit - price
    finally:
        first.stop()
    again = ThreadedServer(settings, kinds)
    try:
        assert session_row(again, client.session_id).balance_msat == deposit
        assert_ledger_balances(again)
    finally:
        again.stop()
