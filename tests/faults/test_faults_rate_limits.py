"""Per-client rate limits: challenges, refunds and estimates, on a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satsgate.config.settings import load_settings
from satsgate.edge.ratelimit import RateLimiter, client_key, parse_networks
from tests.conftest import ThreadedServer, dev_pay, http_client, make_settings
from tests.mcp_client import tool_result
from tests.payments.test_gateway import CARD, assert_envelope, payment_count

LIMIT = 5


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[ThreadedServer]:
    srv = ThreadedServer(
        make_settings(
            tmp_path / "data",
            challenge_rate_per_min=LIMIT,
            refund_rate_per_min=2,
            estimate_rate_per_min=3,
        )
    )
    yield srv
    srv.stop()


@pytest.fixture
async def lclient(limited: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(limited):
        yield c


def assert_limited(resp: httpx.Response) -> int:
    body = assert_envelope(resp, "RATE_LIMITED", 429)
    retry_after = int(resp.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    assert body["retry_after_seconds"] == retry_after
    return retry_after


async def test_a_challenge_burst_past_the_limit_gets_429_and_no_payment_rows(
    limited: ThreadedServer, lclient: httpx.AsyncClient
) -> None:
    before = payment_count(limited)
    answers = await asyncio.gather(
        *(lclient.post("/api/l402/render-card", json=CARD) for _ in range(LIMIT + 7))
    )
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [402] * LIMIT + [429] * 7
    for resp in answers:
        if resp.status_code == 429:
            # A minute's worth is 5, so one more is allowed 12 s after the bucket empties.
            assert 10 <= assert_limited(resp) <= 12
    assert payment_count(limited) - before == LIMIT  # the refused ones made no invoice

    # A paid call still passes: its credential is never limited.
    first = next(r for r in answers if r.status_code == 402).json()
    preimage = await dev_pay(lclient, first["invoice"])
    paid = await lclient.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {first['macaroon']}:{preimage}"},
    )
    assert paid.status_code == 200, paid.text
    assert (await lclient.get(paid.json()["image_url"])).content.startswith(b"\x89PNG")

    # A credential that fails would be answered with a fresh invoice: that is limited. The
    # 402 still says why the credential was refused, with no invoice and when to retry.
    wrong = await lclient.post(
        "/api/l402/render-card",
        json=CARD,
        headers={"Authorization": f"L402 {first['macaroon']}:{'00' * 32}"},
    )
    body = assert_envelope(wrong, "PAYMENT_INVALID", 402)
    assert "WWW-Authenticate" not in wrong.headers
    assert "invoice" not in body and "macaroon" not in body
    assert 1 <= int(wrong.headers["Retry-After"]) <= 60
    assert body["retry_after_seconds"] == int(wrong.headers["Retry-After"])
    assert "nothing to pay here" in body["error"]
    assert payment_count(limited) - before == LIMIT

    # A spent L402 credential and a malformed one are refused the same way (a 402, not
    # the spec's 403 or a 400): past the limit, with no invoice and when to retry.
    for auth, code in (
        (f"L402 {first['macaroon']}:{preimage}", "PAYMENT_ALREADY_USED"),
        ("L402 !!!:" + "00" * 32, "MALFORMED_CREDENTIAL"),
    ):
        refused = await lclient.post(
            "/api/l402/render-card",
            json={**CARD, "title": "another"},
            headers={"Authorization": auth},
        )
        body = assert_envelope(refused, code, 402)
        assert "WWW-Authenticate" not in refused.headers
        assert "invoice" not in body and "macaroon" not in body
        assert body["retry_after_seconds"] == int(refused.headers["Retry-After"])
    assert payment_count(limited) - before == LIMIT


async def test_mcp_create_payment_shares_the_challenge_limit(
    limited: ThreadedServer, lclient: httpx.AsyncClient
) -> None:
    for _ in range(LIMIT):
        assert (await lclient.post("/api/l402/render-card", json=CARD)).status_code == 402
    before = payment_count(limited)
    result = await tool_result(lclient, "create_payment", {"toolName": "render_card"})
    assert result["isError"] is True
    assert result["structuredContent"]["error_code"] == "RATE_LIMITED"
    assert payment_count(limited) == before


async def test_refunds_and_estimates_have_their_own_limits(lclient: httpx.AsyncClient) -> None:
    refund = {"paymentId": "pay_nothing", "invoice": "lnbcrt1nothing"}
    first = [(await lclient.post("/api/l402/refund", json=refund)).status_code for _ in range(2)]
    assert 429 not in first
    assert_limited(await lclient.post("/api/l402/refund", json=refund))

    # MCP request_refund draws on the same bucket.
    tool = await tool_result(lclient, "request_refund", refund, id=2)
    assert tool["structuredContent"]["error_code"] == "RATE_LIMITED"

    query = {"service": "text", "prompt": "hello"}
    for _ in range(3):
        assert (await lclient.get("/api/estimate-cost", params=query)).status_code != 429
    assert_limited(await lclient.get("/api/estimate-cost", params=query))
    # Each rule is its own bucket: challenges are still allowed.
    assert (await lclient.post("/api/l402/render-card", json=CARD)).status_code == 402


async def _burst(client: httpx.AsyncClient, count: int, xff: str) -> list[int]:
    headers = {"X-Forwarded-For": xff}
    return [
        (await client.post("/api/l402/render-card", json=CARD, headers=headers)).status_code
        for _ in range(count)
    ]


async def test_x_forwarded_for_is_ignored_unless_the_proxy_is_trusted(tmp_path: Path) -> None:
    untrusted = ThreadedServer(make_settings(tmp_path / "a", challenge_rate_per_min=2))
    try:
        async for client in http_client(untrusted):
            # Every request claims another client: all count as the peer, 127.0.0.1.
            codes = [(await _burst(client, 1, f"203.0.113.{i}"))[0] for i in range(4)]
            assert codes == [402, 402, 429, 429]
    finally:
        untrusted.stop()

    trusted = ThreadedServer(
        make_settings(tmp_path / "b", challenge_rate_per_min=2, trusted_proxies=("127.0.0.0/8",))
    )
    try:
        async for client in http_client(trusted):
            assert await _burst(client, 3, "203.0.113.1") == [402, 402, 429]
            assert await _burst(client, 2, "203.0.113.2") == [402, 402]
            # A client cannot pick its own address: the right-most untrusted hop counts.
            assert await _burst(client, 1, "198.51.100.9, 203.0.113.1") == [429]
    finally:
        trusted.stop()


def test_client_key_rules() -> None:
    proxies = parse_networks(["10.0.0.0/8", "::1"])
    assert client_key("192.0.2.7", ["198.51.100.1"], proxies) == "192.0.2.7"
    assert client_key("10.1.2.3", ["198.51.100.1, 10.9.9.9"], proxies) == "198.51.100.1"
    assert client_key("10.1.2.3", ["garbage"], proxies) == "10.1.2.3"
    assert client_key("10.1.2.3", [], proxies) == "10.1.2.3"
    # An IPv6 client is its /64.
    assert client_key("2001:db8::1", [], ()) == client_key("2001:db8::ffff:1", [], ())
    assert client_key("2001:db8::1", [], ()) != client_key("2001:db8:0:1::1", [], ())
    assert client_key("::ffff:192.0.2.7", [], ()) == "192.0.2.7"


def test_the_limiter_refills_and_stays_bounded() -> None:
    limiter = RateLimiter({"challenge": 60, "refund": 0}, max_buckets=100)
    assert not limiter.enabled("refund") and limiter.take("refund", "a", 0.0) == 0.0
    assert all(limiter.take("challenge", "a", 0.0) == 0.0 for _ in range(60))
    assert limiter.take("challenge", "a", 0.0) == pytest.approx(1.0)
    assert limiter.take("challenge", "a", 1.0) == 0.0  # one a second comes back
    for i in range(1000):
        limiter.take("challenge", f"client-{i}", 2.0)
    assert len(limiter) == 100  # the least recently used went first
    assert limiter.take("challenge", "client-999", 2.0) == 0.0  # the newest are kept
    held = len(limiter)
    assert limiter.prune(30.0) == 0  # a bucket in use within the minute is kept
    assert limiter.prune(100.0) == held and len(limiter) == 0  # refilled: forgotten


def test_settings_come_from_the_environment() -> None:
    env: dict[str, Any] = {
        "SATSGATE_CHALLENGE_RATE_PER_MIN": "7",
        "SATSGATE_TRUSTED_PROXIES": "10.0.0.0/8, ::1",
        "SATSGATE_HEADER_TIMEOUT_S": "2.5",
        "SATSGATE_MAX_CONNECTIONS_PER_CLIENT": "9",
    }
    settings = load_settings(environ=env)
    assert settings.challenge_rate_per_min == 7
    assert settings.trusted_proxies == ("10.0.0.0/8", "::1")
    assert settings.header_timeout_s == 2.5
    assert settings.max_connections_per_client == 9
    assert load_settings(environ={}).challenge_rate_per_min == 100
    with pytest.raises(ValueError, match="trusted_proxies"):
        load_settings(environ={"SATSGATE_TRUSTED_PROXIES": "not-an-address"})


async def test_a_bodiless_get_is_no_challenge_and_the_limit_still_holds(
    limited: ThreadedServer, lclient: httpx.AsyncClient
) -> None:
    """A crawler's GET of a paid endpoint makes no invoice and takes nothing of the
    address's challenge limit; the POSTs that make invoices are limited as before."""
    before = payment_count(limited)
    for _ in range(LIMIT * 3):
        probe = await lclient.get("/api/l402/render-card")
        assert probe.status_code == 402 and "WWW-Authenticate" not in probe.headers
    assert payment_count(limited) == before
    statuses = [
        (await lclient.post("/api/l402/render-card", json=CARD)).status_code
        for _ in range(LIMIT + 1)
    ]
    assert statuses == [402] * LIMIT + [429]  # the whole budget was still there
    assert payment_count(limited) - before == LIMIT
    # Past the limit the probe still answers, still without an invoice.
    probe = await lclient.get("/api/l402/render-card")
    assert probe.status_code == 402 and "invoice" not in probe.json()
    assert payment_count(limited) - before == LIMIT
