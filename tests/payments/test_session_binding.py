"""A payment session is bound at open to a token the Lightning route never sees (issue 28,
hole 2), and a session call that fails says what happened to its price (issue 35, item 4).

The attacker here is a routing node of the session's deposit: it knows the deposit's
payment hash (the session id), its amount and its preimage, and it can get any challenge
from 402s of its own. A real satsgate server on loopback, its AI engines on the fake
OpenAI-compatible API, the deposits paid through the dev node, credentials built by hand
as docs/payments.md shows them on the wire."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ThreadedServer, dev_pay, http_client, make_settings, until
from tests.engines.test_ai_openai import ENGINES, MODELS
from tests.fakes.fake_ai_upstream import OPENAI_KEY, FakeAIUpstream
from tests.ledger_check import assert_ledger_balances
from tests.mcp_client import tool_result
from tests.payments.test_sessions import (
    CHAT,
    RARE,
    STREAM,
    WANTS_SESSION,
    Client,
    credential,
    price_msat,
    receipt,
    session_challenge,
    session_row,
    sse_events,
    unb64url,
)

BINDING = "SESSION_BINDING_REQUIRED"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAIUpstream]:
    upstream = FakeAIUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, fake: FakeAIUpstream) -> Iterator[ThreadedServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("session-binding"),
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
        session_deposit_multiplier=11,  # a deposit covers eleven calls of its 402's service
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


class Hop:
    """What a routing node of the deposit knows (hash = session id, amount, preimage),
    and the challenges its own 402s hand it."""

    def __init__(self, http: httpx.AsyncClient, victim: Client) -> None:
        self.http = http
        self.session_id = victim.session_id
        self.preimage = victim.preimage

    async def own_challenge(self) -> dict[str, str]:
        resp = await self.http.post(f"/api/l402/{RARE[0]}", json=RARE[1], headers=WANTS_SESSION)
        assert resp.status_code == 402
        return session_challenge(resp)

    async def send(self, payload: dict[str, Any], body: tuple[str, Any] = RARE) -> httpx.Response:
        auth = credential(await self.own_challenge(), payload)
        return await self.http.post(
            f"/api/l402/{body[0]}", json=body[1], headers={"Authorization": auth}
        )


def assert_binding_refused(resp: httpx.Response, says: str) -> dict[str, Any]:
    """The problem a credential without the session's token gets: 402, problem+json typed
    by the catalog entry, the code, a detail naming the token, a fresh challenge."""
    assert resp.status_code == 402, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.headers["x-error-code"] == BINDING
    problem = dict(resp.json())
    assert problem["type"].endswith("/api/error-codes#" + BINDING), problem
    assert problem["error_code"] == BINDING and problem["status"] == 402
    assert says in problem["detail"] and problem["error"] == problem["detail"]
    assert "payload.token" in problem["suggestion"] and "sessionToken" in problem["suggestion"]
    assert session_challenge(resp)  # a fresh one: the call can still be paid per call
    assert "payment-session-token" not in resp.headers
    return problem


# -- issue 28, hole 2: the route's knowledge spends, tops up and closes nothing --------------


async def test_a_hop_with_the_preimage_cannot_spend_top_up_or_close_the_session(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    victim = Client(http)
    price = await price_msat(http, *RARE)
    assert (await victim.open(*RARE)).status_code == 200
    balance = session_row(srv, victim.session_id).balance_msat
    assert balance == 10 * price
    upstream_calls = len(fake.requests(CHAT))
    hop = Hop(http, victim)
    proof = {"sessionId": hop.session_id, "preimage": hop.preimage}

    # Bearer calls, plain and streamed, with the preimage alone or a guessed token.
    assert_binding_refused(await hop.send({"action": "bearer", **proof}), "payload.token")
    assert_binding_refused(
        await hop.send({"action": "bearer", **proof}, STREAM), "payload.token is required"
    )
    assert_binding_refused(
        await hop.send({"action": "bearer", **proof, "token": "0" * 64}), "not this session's"
    )
    # The victim's token with the hop's own session id is no key to anything either.
    other = Client(http)
    assert (await other.open(*RARE)).status_code == 200
    assert_binding_refused(
        await hop.send(
            {
                "action": "bearer",
                "sessionId": other.session_id,
                "preimage": other.preimage,
                "token": victim.token,
            }
        ),
        "not this session's",
    )
    # Close (it would end the session and pay out now).
    assert_binding_refused(await hop.send({"action": "close", **proof}), "payload.token")
    # topUp of the session with a deposit the hop paid itself: refused, its deposit unused.
    challenge = await hop.own_challenge()
    request = unb64url(challenge["request"])
    hop_preimage = await dev_pay(http, request["depositInvoice"])
    topped = await http.post(
        f"/api/l402/{RARE[0]}",
        json=RARE[1],
        headers={
            "Authorization": credential(
                challenge,
                {"action": "topUp", "sessionId": hop.session_id, "topUpPreimage": hop_preimage},
            )
        },
    )
    assert_binding_refused(topped, "payload.token")

    # Still its to refund: paid (once the settlement watcher has applied the node's
    # settlement, which on PostgreSQL may come after the refusal) and never consumed.
    def deposit_status() -> str | None:
        deposit = srv.call(lambda: srv.store.payments.get_by_hash(request["paymentHash"]))
        return None if deposit is None else str(deposit.status.value)

    await until(lambda: deposit_status() != "unpaid")
    assert deposit_status() == "paid"

    # Nothing moved: no call ran, the balance is whole, the session open, nothing paid out.
    assert len(fake.requests(CHAT)) == upstream_calls + 1  # the other session's open only
    row = session_row(srv, victim.session_id)
    assert (row.status, row.balance_msat, row.refund_msat) == ("open", balance, None)
    # The payer, with the token, is served and closes.
    served = await victim.bearer(*RARE)
    assert served.status_code == 200, served.text
    assert receipt(served)["balanceMsat"] == balance - price
    closed = await victim.close()
    assert closed.status_code == 200, closed.text
    assert closed.json()["refundSats"] == (balance - price) // 1000
    await other.close()


async def test_the_token_goes_only_to_the_open_credential_and_is_the_same_on_a_replay(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    """An open whose call failed still hands over the token (the session is open); the same
    open credential replayed later gets the same token back (it proves the payer: the
    challenge echo naming the deposit); the hop's open with the preimage gets none."""
    victim = Client(http)
    challenge, preimage = await victim.offer(*RARE)
    fake.fail_next(CHAT, "500", times=2)
    opened = await victim.open_with(challenge, preimage, *RARE)
    assert opened.status_code == 502, opened.text
    token = opened.headers["payment-session-token"]
    assert opened.json()["sessionToken"] == token
    assert (
        opened.json()["session"]["balanceMsat"] == session_row(srv, victim.session_id).deposit_msat
    )

    again = await victim.open_with(challenge, preimage, *RARE)
    assert again.status_code == 402  # the deposit is used: no second session, no second call
    assert again.json()["error_code"] == "PAYMENT_ALREADY_USED"
    assert again.headers["payment-session-token"] == again.json()["sessionToken"] == token

    hop = Hop(http, victim)
    payload = {"action": "open", "preimage": preimage, "returnInvoice": victim.return_invoice}
    stolen = await hop.send(payload)
    assert stolen.status_code == 402
    assert "payment-session-token" not in stolen.headers
    assert "sessionToken" not in stolen.json()
    assert (await victim.close()).json()["refundStatus"] == "succeeded"


async def test_a_session_opened_before_the_binding_is_spent_by_no_credential(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """A session from before migration 0022 has no token: nothing spends or closes it by
    credential (its preimage is known to its route); the idle sweep pays it back."""
    client = Client(http)
    assert (await client.open(*RARE)).status_code == 200
    srv.call(
        lambda: srv.store.db.run_sync(
            lambda c: c.execute(
                "UPDATE sessions SET token_sha256 = NULL WHERE session_id = ?",
                (client.session_id,),
            )
        )
    )
    before = session_row(srv, client.session_id).balance_msat
    assert_binding_refused(await client.bearer(*RARE), "opened before sessions were bound")
    assert_binding_refused(await client.close(), "paid to its return invoice")
    assert session_row(srv, client.session_id).balance_msat == before
    srv.call(lambda: srv.gate.sessions.close(client.session_id, "idle"))
    assert session_row(srv, client.session_id).payout_status == "succeeded"


async def test_concurrent_use_of_one_token_with_balance_for_one_call_serves_once(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    """Twenty calls at once on a balance of one call: ten repeat one Authorization value
    (verified once, then known), ten are distinct credentials with the same token."""
    client = Client(http)
    price = await price_msat(http, *RARE)
    assert (await client.open(*RARE)).status_code == 200
    for _ in range(9):
        assert (await client.bearer(*RARE)).status_code == 200
    assert session_row(srv, client.session_id).balance_msat == price
    fake.clear()
    same = client.bearer_auth()
    distinct = [
        credential(
            client.challenge,
            {
                "action": "bearer",
                "sessionId": client.session_id,
                "preimage": client.preimage,
                "token": client.token,
                "n": n,
            },
        )
        for n in range(10)
    ]
    answers = await asyncio.gather(*(client.post(*RARE, auth) for auth in [same] * 10 + distinct))
    served = [a for a in answers if a.status_code == 200]
    assert len(served) == 1, [a.status_code for a in answers]
    assert all(
        a.json()["type"].endswith("insufficient-balance") for a in answers if a not in served
    )
    assert len(fake.requests(CHAT)) == 1
    row = session_row(srv, client.session_id)
    assert row.balance_msat == 0 and row.spent_msat == row.deposit_msat
    await client.close()


# -- MCP --------------------------------------------------------------------------------------


async def mcp_call(http: httpx.AsyncClient, payment_id: str) -> dict[str, Any]:
    arguments = {**RARE[1], "paymentId": payment_id}
    return await tool_result(http, "translate_rare_language", arguments)


async def test_an_mcp_session_payment_id_needs_the_token_not_the_preimage(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    client = Client(http)
    price = await price_msat(http, *RARE)
    assert (await client.open(*RARE)).status_code == 200
    balance = session_row(srv, client.session_id).balance_msat
    calls = len(fake.requests(CHAT))

    for payment_id in (
        f"sess_{client.preimage}",  # what the draft's bearer proof would be
        f"sess_{client.session_id}.{client.preimage}",
        f"sess_{client.session_id}.{'0' * 64}",
    ):
        refused = await mcp_call(http, payment_id)
        assert refused["isError"] is True
        error = refused["structuredContent"]
        assert error["error_code"] == BINDING, error
        assert "sessionToken" in error["error"] and "sessionToken" in error["suggestion"]
    assert "sess_<sessionId>.<sessionToken>" in error["suggestion"]
    assert len(fake.requests(CHAT)) == calls
    assert session_row(srv, client.session_id).balance_msat == balance

    served = await mcp_call(http, f"sess_{client.session_id}.{client.token}")
    assert served["isError"] is False
    assert served["structuredContent"]["session"]["balanceMsat"] == balance - price
    await client.close()


# -- issue 35, item 4: a failed session call names no refund it does not carry ----------------


def assert_says_credited(body: dict[str, Any], client: Client, price: int, balance: int) -> None:
    assert body.get("refund") is None
    assert body["session"] == {
        "sessionId": client.session_id,
        "creditedMsat": price,
        "creditedSats": price // 1000,
        "balanceMsat": balance,
        "balanceSats": balance // 1000,
    }
    said = body["error"] + " " + body["suggestion"]
    assert f"{price} msat, was credited back to the session" in body["error"], body["error"]
    assert f"balance is {balance} msat" in body["error"]
    assert "Nothing to claim" in body["suggestion"]
    for false in ("refunded", "LNURL", "`refund`", "refund link", "claim the refund", "/recover"):
        assert false.lower() not in said.lower(), said


async def test_a_failed_session_call_says_it_was_credited_to_the_session_on_every_rail(
    http: httpx.AsyncClient, srv: ThreadedServer, fake: FakeAIUpstream
) -> None:
    client = Client(http)
    price = await price_msat(http, *RARE)
    stream_price = await price_msat(http, *STREAM)
    assert (await client.open(*RARE)).status_code == 200
    balance = session_row(srv, client.session_id).balance_msat

    # HTTP bearer.
    fake.fail_next(CHAT, "500", times=2)  # the one retry fails too
    failed = await client.bearer(*RARE)
    assert failed.status_code == 502, failed.text
    assert_says_credited(failed.json(), client, price, balance)

    # A stream that fails before its first piece: an error answer, no stream.
    fake.fail_next(CHAT, "500", times=2)
    failed = await client.bearer(*STREAM)
    assert failed.status_code == 502, failed.text
    assert_says_credited(failed.json(), client, stream_price, balance)

    # A stream that fails after its first piece: the stream's error event.
    fake.fail_next(CHAT, "error_stream")
    cut = await client.bearer(*STREAM)
    assert cut.status_code == 200
    data = next(d for name, d in sse_events(cut.text) if name == "error")
    assert_says_credited(json.loads(data), client, stream_price, balance)

    # MCP.
    fake.fail_next(CHAT, "500", times=2)
    result = await mcp_call(http, f"sess_{client.session_id}.{client.token}")
    assert result["isError"] is True
    assert_says_credited(result["structuredContent"], client, price, balance)

    assert session_row(srv, client.session_id).balance_msat == balance
    await client.close()


async def test_an_open_refused_its_call_after_the_session_was_made_hands_over_the_token(
    http: httpx.AsyncClient, srv: ThreadedServer
) -> None:
    """The open's call costs more than the deposit: the session is open (the deposit is in
    it), the call is refused with insufficient-balance, and that 402 carries the token."""
    client = Client(http)
    challenge, preimage = await client.offer(*RARE)
    deposit = int(unb64url(challenge["request"])["depositAmount"]) * 1000
    dear = ("generate-text", {"prompt": "word " * 4000, "tier": "best"})
    assert await price_msat(http, *dear) > deposit
    refused = await client.open_with(challenge, preimage, *dear)
    assert refused.status_code == 402, refused.text
    assert refused.json()["type"].endswith("insufficient-balance")
    assert refused.headers["payment-session-token"] == refused.json()["sessionToken"]
    assert session_row(srv, client.session_id).balance_msat == deposit
    served = await client.bearer(*RARE)  # the token the refusal handed over spends it
    assert served.status_code == 200, served.text
    assert (await client.close()).json()["refundStatus"] == "succeeded"
