"""The per-address challenge limit holds on every path that makes an invoice for a
request not paid yet, not only on a POST without Authorization: a refused credential of
any scheme (L402, the Payment charge intent, a payment session's, forged or real) past
the limit gets its 402 problem with no invoice and a Retry-After, so one address cannot
fill the node's unpaid-invoice cap and lock everyone else out. A valid credential past
the limit is still served: the limit is on making invoices, not on spending paid ones."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ThreadedServer, dev_pay, http_client, make_settings
from tests.faults.test_faults_challenge_cap import invoices, offers_session
from tests.payments.test_gateway import CARD, assert_envelope, mpp_credential
from tests.payments.test_sessions import WANTS_SESSION, credential, session_challenge, unb64url
from tests.payments.test_sessions import Client as SessionClient

LIMIT = 3
CAP = 40  # the node's unpaid invoices: what one address filled before
ATTACKER = "203.0.113.66"
VICTIM = "198.51.100.7"


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(
        make_settings(
            tmp_path / "data",
            challenge_rate_per_min=LIMIT,
            max_unpaid_challenges=CAP,
            trusted_proxies=("127.0.0.0/8",),  # the test names its clients' addresses
        )
    )
    yield srv
    srv.stop()


@pytest.fixture
async def attacker(limited: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for client in http_client(limited):
        client.headers["X-Forwarded-For"] = ATTACKER
        client.headers.update(WANTS_SESSION)  # each 402 makes a session deposit too
        yield client


def forged_session_credential(action: str = "bearer") -> str:
    """A session credential whose challenge this server never issued: all an attacker
    needs, no 402 and no payment."""
    challenge = {
        "id": base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode(),
        "realm": "127.0.0.1",
        "method": "lightning",
        "intent": "session",
        "request": "e30",
        "expires": "2099-01-01T00:00:00Z",
    }
    preimage = secrets.token_hex(32)
    payload = {"action": action, "sessionId": secrets.token_hex(32), "preimage": preimage}
    doc = {"challenge": challenge, "payload": payload}
    return "Payment " + base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


def assert_refused_without_invoice(resp: httpx.Response, code: str) -> dict[str, Any]:
    """The credential's own 402 problem, nothing to pay in it, and when to retry."""
    body = assert_envelope(resp, code, 402)
    assert resp.headers.get_list("WWW-Authenticate") == [], resp.headers
    assert "invoice" not in body and "session" not in body
    seconds = int(resp.headers["Retry-After"])
    assert 1 <= seconds <= 60 and body["retry_after_seconds"] == seconds
    assert "too many unpaid payment requests from this address" in body["error"].lower()
    return body


async def test_refused_credentials_past_the_limit_make_no_invoice(
    limited: ThreadedServer, attacker: httpx.AsyncClient
) -> None:
    # The attacker uses its allowance as anyone may: three 402s (a call's invoice and a
    # session deposit each), then is limited.
    first = [await attacker.post("/api/l402/render-card", json=CARD) for _ in range(LIMIT)]
    assert [r.status_code for r in first] == [402] * LIMIT
    assert all(offers_session(r) for r in first)
    assert (await attacker.post("/api/l402/render-card", json=CARD)).status_code == 429
    made = invoices(limited)
    assert made == 2 * LIMIT

    # The attack: refused credentials, each of which was answered with fresh invoices.
    flood = await asyncio.gather(
        *(
            attacker.post(
                "/api/l402/render-card",
                json=CARD,
                headers={"Authorization": forged_session_credential()},
            )
            for _ in range(CAP)
        )
    )
    for resp in flood:
        body = assert_refused_without_invoice(resp, "PAYMENT_INVALID")
        assert body["type"] == "https://paymentauth.org/problems/lightning/unknown-challenge"
    assert invoices(limited) == made

    # Every other refused credential, of every scheme, is held to the same limit.
    issued = first[0].json()
    session = session_challenge(first[1])
    deposit_hash = unb64url(session["request"])["paymentHash"]
    wrong = "00" * 32
    for value in (
        f"L402 {issued['macaroon']}:{wrong}",  # a wrong preimage
        mpp_credential(first[0], wrong),  # the charge intent, a wrong preimage
        # The session intent with a real challenge: a close and a top-up not proven.
        credential(session, {"action": "close", "sessionId": deposit_hash, "preimage": wrong}),
        credential(session, {"action": "topUp", "sessionId": deposit_hash, "topUpPreimage": wrong}),
    ):
        resp = await attacker.post(
            "/api/l402/render-card", json=CARD, headers={"Authorization": value}
        )
        assert_refused_without_invoice(resp, "PAYMENT_INVALID")
    assert invoices(limited) == made

    # Anyone else is still offered a challenge and a session: the cap was not filled.
    async for other in http_client(limited):
        victim = await other.post(
            "/api/l402/render-card", json=CARD, headers={"X-Forwarded-For": VICTIM, **WANTS_SESSION}
        )
        assert victim.status_code == 402, victim.text
        assert "invoice" in victim.json() and offers_session(victim)
    assert invoices(limited) == made + 2

    # A paid credential of the limited address is served: spending is never limited.
    preimage = await dev_pay(attacker, issued["invoice"])
    paid = await attacker.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {issued['macaroon']}:{preimage}"},
    )
    assert paid.status_code == 200, paid.text


async def test_a_session_past_the_limit_is_served_and_its_top_up_offer_is_limited(
    limited: ThreadedServer, attacker: httpx.AsyncClient
) -> None:
    """A session opened within the limit serves its balance past it; when the balance
    runs out, the 402 says so with no top-up invoice and when to retry."""
    client = SessionClient(attacker)
    opened = await client.open("render-card", CARD)  # the first of the three 402s
    assert opened.status_code == 200, opened.text
    for _ in range(LIMIT - 1):
        assert (await attacker.post("/api/l402/render-card", json=CARD)).status_code == 402
    assert (await attacker.post("/api/l402/render-card", json=CARD)).status_code == 429
    made = invoices(limited)

    served = 0
    while True:
        resp = await client.bearer("render-card", CARD)
        if resp.status_code != 200:
            break
        served += 1
    assert served >= 1  # the deposit's calls, all past the limit
    body = assert_refused_without_invoice(resp, "PAYMENT_INSUFFICIENT")
    assert body["type"] == "https://paymentauth.org/problems/lightning/insufficient-balance"
    assert invoices(limited) == made


async def test_mcp_batch_messages_each_draw_on_the_limit(
    limited: ThreadedServer, attacker: httpx.AsyncClient
) -> None:
    """A batch of create_payment calls in one HTTP request is as many requests of the
    limit: the ones past it are refused before any invoice."""
    call = {
        "jsonrpc": "2.0",
        "method": "tools/call",
        "params": {"name": "create_payment", "arguments": {"toolName": "render_card"}},
    }
    batch = [{**call, "id": i} for i in range(LIMIT + 4)]
    resp = await attacker.post(
        "/api/mcp", json=batch, headers={"Accept": "application/json, text/event-stream"}
    )
    results = [answer["result"] for answer in resp.json()]
    refused = [r for r in results if r.get("isError")]
    assert len(results) - len(refused) == LIMIT
    assert len(refused) == 4
    for result in refused:
        assert result["structuredContent"]["error_code"] == "RATE_LIMITED"
    assert invoices(limited) == LIMIT
