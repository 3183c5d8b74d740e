"""The operator's node: the ledger to the msat, the operator token and dashboard (down to a
real headless Chromium), health without business figures, and refunds a payer recovers."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lnurl.helpers import url_decode
from playwright.async_api import Browser, async_playwright

from satsgate.backends.dev import DEV_NO_ROUTE
from satsgate.errors import ApiError
from satsgate.operator import token_path
from satsgate.server.app import ENGINES, REFUNDS
from tests.conftest import ThreadedServer, paid_l402_auth, skip_unless_ci
from tests.ledger_check import assert_ledger_balances
from tests.payouts.test_refunds import (
    _broken,
    _fine,
    claim,
    execute,
    external_invoice,
    make_spec,
    paid_payment,
    wait_refund_status,
    withdraw,
)


async def _wait_open(server: ThreadedServer, open_msat: int) -> None:
    for _ in range(200):
        if server.call(server.store.ledger.totals)["open_msat"] == open_msat:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the settlement was never applied")


async def money_scenarios(server: ThreadedServer, client: httpx.AsyncClient) -> dict[str, Any]:
    """One call served (10 sat), one failed and its refund paid out (10 sat, fee 10 msat),
    one failed whose payout found no route (20 sat, link open again), one paid and not
    used (30 sat)."""
    fine, broken = make_spec(_fine), make_spec(_broken)
    served = await paid_payment(server, client, fine, 10)
    assert execute(server, served, fine).body == {"ok": True, "size": 1}

    failed = await paid_payment(server, client, broken, 10)
    with pytest.raises(ApiError) as err:
        execute(server, failed, broken)
    paid_refund = err.value.refund
    assert paid_refund is not None
    info = await withdraw(client, paid_refund)
    assert (await claim(client, info, external_invoice(10_000)))["status"] == "OK"
    await wait_refund_status(server, info["k1"], "paid")

    unlucky = await paid_payment(server, client, broken, 20)
    with pytest.raises(ApiError) as err:
        execute(server, unlucky, broken)
    open_refund = err.value.refund
    assert open_refund is not None
    await client.post("/api/dev/outgoing-mode", json={"mode": "fail"})
    try:
        info = await withdraw(client, open_refund)
        assert (await claim(client, info, external_invoice(20_000)))["status"] == "OK"
        for _ in range(200):  # claiming -> open once the node says the payout failed
            error = server.call(lambda: server.app[REFUNDS].last_payout_error(info["k1"]))
            if error:
                break
            await asyncio.sleep(0.02)
        await wait_refund_status(server, info["k1"], "open")
    finally:
        await client.post("/api/dev/outgoing-mode", json={"mode": "succeed"})

    await paid_payment(server, client, fine, 30)
    await _wait_open(server, 30_000)
    return {
        "unlucky": unlucky,
        "open_refund": open_refund,
        "paid_refund": paid_refund,
        "failed": failed,
    }


@pytest.fixture
async def scenario(
    fresh_server: ThreadedServer, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[dict[str, Any]]:
    caplog.set_level(logging.INFO, logger="satsgate.payouts.refunds")
    async with httpx.AsyncClient(base_url=fresh_server.url, timeout=30) as client:
        yield await money_scenarios(fresh_server, client)


def expected_totals() -> dict[str, int]:
    return {
        "received_msat": 70_000,
        "earned_msat": 10_000,
        "refunded_msat": 30_000,
        "held_msat": 0,
        "open_msat": 30_000,
        "refunds_paid": 1,
        "refunds_paid_msat": 10_000,
        "refunds_open": 1,
        "refunds_open_msat": 20_000,
        "refunds_claiming": 0,
        "refunds_expired": 0,
        "refund_fees_msat": 10,  # the dev node's 1 ppt routing fee on 10 000 msat
        "payments": 4,
    }


# -- the ledger -----------------------------------------------------------------------------


async def test_the_ledger_to_the_msat(
    fresh_server: ThreadedServer, scenario: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The failed payout was logged with the node's reason, the paid one with its fee.
    logged = [
        r.getMessage() for r in caplog.get_records("setup") if r.name == "satsgate.payouts.refunds"
    ]
    assert any("refund payout failed" in m and DEV_NO_ROUTE in m for m in logged), logged
    assert any("refund paid out: 10000 msat" in m and "routing fee 10 msat" in m for m in logged), (
        logged
    )
    report = assert_ledger_balances(fresh_server)
    totals = report["totals"]
    assert {k: totals[k] for k in expected_totals()} == expected_totals()
    [day] = report["per_day"]
    assert day["day"] == time.strftime("%Y-%m-%d", time.gmtime())
    assert day["received_msat"] == 70_000 and day["earned_msat"] == 10_000
    causes = {c["cause"]: c["refunds"] for c in report["refunds_by_cause"]}
    assert causes == {"the upstream engine timed out": 2}
    [service] = report["calls_per_service"]
    assert service == {"service": "test-service", "calls": 3, "paid_msat": 40_000, "refunds": 2}
    # The failed payout is the operator's to see, with the node's reason; the link is open.
    problems = fresh_server.call(fresh_server.store.refunds.payout_problems)
    assert [(p["payment_id"], p["status"], p["payout_error"]) for p in problems] == [
        (scenario["unlucky"].payment_id, "open", DEV_NO_ROUTE)
    ]


async def test_a_refund_paid_after_a_failed_attempt_clears_the_reason(
    fresh_server: ThreadedServer, scenario: dict[str, Any]
) -> None:
    async with httpx.AsyncClient(base_url=fresh_server.url) as client:
        info = await withdraw(client, scenario["open_refund"])
        assert (await claim(client, info, external_invoice(20_000)))["status"] == "OK"
        await wait_refund_status(fresh_server, info["k1"], "paid")
    report = assert_ledger_balances(fresh_server)
    t = report["totals"]
    assert (t["refunds_paid"], t["refunds_paid_msat"], t["refund_fees_msat"]) == (2, 30_000, 30)
    assert t["earned_msat"] == 10_000  # a payout moves nothing out of earned
    assert fresh_server.call(fresh_server.store.refunds.payout_problems) == []


def run_cli(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "satsgate.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout


def ledger_args(server: ThreadedServer) -> list[str]:
    """``satsgate ledger`` on the server's data dir and store."""
    store = ["--store-url", server.settings.store_url] if server.settings.store_url else []
    return ["ledger", "--data-dir", str(server.settings.data_dir), *store]


def test_cli_ledger_and_operator_token(fresh_server: ThreadedServer) -> None:
    data_dir = fresh_server.settings.data_dir
    token = run_cli("operator-token", "--data-dir", str(data_dir)).strip()
    path = token_path(data_dir)
    assert token == path.read_text().strip() and len(token) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = run_cli(*ledger_args(fresh_server))
    assert "received = earned + refunded + held + open" in out
    assert re.search(r"^total\s+0\s+0\s+0\s+0\s+0$", out, re.M), out


async def test_cli_ledger_after_the_scenarios(
    fresh_server: ThreadedServer, scenario: dict[str, Any]
) -> None:
    out = await asyncio.to_thread(run_cli, *ledger_args(fresh_server))
    assert re.search(r"^total\s+70000\s+10000\s+30000\s+0\s+30000$", out, re.M), out
    assert re.search(r"^  paid\s+1\s+10000 msat$", out, re.M), out
    assert re.search(r"^  open\s+1\s+20000 msat$", out, re.M), out
    assert "routing fees paid on refunds: 10 msat" in out
    # The count belongs to what was received: four payments, one of them earned.
    assert "received: 70 sat from 4 payments; earned: 10 sat" in out, out
    assert "refund payouts to look at: 1" in out and DEV_NO_ROUTE in out


def test_cli_report_read_in_part_ends_quietly(fresh_server: ThreadedServer) -> None:
    """``satsgate ledger | head``: a reader that stops before the report is written (here
    one that reads nothing) ends the command quietly, with no traceback and status 0."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = [sys.executable, "-m", "satsgate.cli", *ledger_args(fresh_server)]
    done = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | true', "sh", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 0


# -- the operator's API and health ----------------------------------------------------------


async def test_the_operator_api_takes_only_the_operator_token(
    fresh_server: ThreadedServer, scenario: dict[str, Any]
) -> None:
    token = token_path(fresh_server.settings.data_dir).read_text().strip()
    async with httpx.AsyncClient(base_url=fresh_server.url) as client:
        assert (await client.get("/api/operator/ledger")).status_code == 401
        wrong = await client.get(
            "/api/operator/ledger", headers={"Authorization": "Bearer " + "0" * 64}
        )
        assert wrong.status_code == 401
        # A payer's credential (a paid L402) opens nothing here.
        payer = await paid_l402_auth(client, "render-card", {"template": "headline", "title": "x"})
        assert (
            await client.get("/api/operator/ledger", headers={"Authorization": payer})
        ).status_code == 401
        # The dev node has settled the payment; the settlement watcher applies it to the
        # store a moment later.
        deadline = time.monotonic() + 10
        while True:
            resp = await client.get(
                "/api/operator/ledger", headers={"Authorization": f"Bearer {token}"}
            )
            assert resp.status_code == 200 and resp.headers["Cache-Control"] == "no-store"
            body = resp.json()
            if body["totals"]["received_msat"] == 75_000 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    t = body["totals"]
    assert t["received_msat"] == 75_000  # the render-card payment is paid, not yet used
    assert t["open_msat"] == 35_000 and t["earned_msat"] == 10_000
    assert [p["payout_error"] for p in body["refund_payouts"]] == [DEV_NO_ROUTE]
    engines = {e["engine"]: e for e in body["engines"]}
    assert set(engines) == {s.name for s in fresh_server.app[ENGINES].statuses()}
    assert any(e["available"] for e in engines.values())


async def test_health_keeps_only_liveness_and_versions(client: httpx.AsyncClient) -> None:
    body = (await client.get("/api/health")).json()
    assert body["status"] == "ok" and body["version"]
    for figure in ("earned_sats", "payments_today", "refunds_open", "refunds_open_sats"):
        assert figure not in body
    assert all("available" in e and "providers" not in e for e in body["engines"])


# -- refunds a payer recovers ---------------------------------------------------------------


async def test_every_recover_url_resolves_and_pays_out(
    fresh_server: ThreadedServer, scenario: dict[str, Any]
) -> None:
    refund = scenario["open_refund"]
    payment_id = scenario["unlucky"].payment_id
    async with httpx.AsyncClient(base_url=fresh_server.url) as client:
        form = await client.get("/recover")
        assert form.status_code == 200
        assert 'name="payment_id"' in form.text and 'name="refund_secret"' in form.text
        assert '<form method="post" action="/recover">' in form.text
        # A refund object's recover_url is the page; its refund_secret, posted, opens it.
        for r, state in ((refund, "open"), (scenario["paid_refund"], "paid")):
            assert r["recover_url"] == f"{fresh_server.url}/recover"
            shown = await client.get(r["recover_url"])
            assert shown.status_code == 200 and 'name="refund_secret"' in shown.text
            page = await client.post("/recover", data={"refund_secret": r["refund_secret"]})
            assert page.status_code == 200
            assert f'id="refund-status">{state}<' in page.text
            assert r["charge_id"] in page.text
            assert page.headers["Cache-Control"] == "no-store"
            assert page.headers["Referrer-Policy"] == "no-referrer"
        # A secret in the query (a link from before) is neither looked up nor echoed.
        old_link = await client.get(
            "/recover", params={"payment_id": payment_id, "refund_secret": refund["refund_secret"]}
        )
        assert old_link.status_code == 200 and "Refund of" not in old_link.text
        assert refund["refund_secret"] not in old_link.text
        assert "Paste the refund secret below" in old_link.text
        unknown = await client.post("/recover", data={"refund_secret": "ab" * 32})
        assert unknown.status_code == 404 and "No refund matches" in unknown.text
        found = await client.post(
            "/recover", data={"payment_id": payment_id, "refund_secret": refund["refund_secret"]}
        )
        assert found.status_code == 200
        assert 'id="refund-status">open<' in found.text
        assert "<svg" in found.text and "Refund QR" in found.text
        lnurl = re.search(r'id="lnurl">(LNURL1[0-9A-Z]+)<', found.text)
        assert lnurl is not None
        assert url_decode(lnurl.group(1)).endswith(f"/api/lnurlw/{refund['refund_secret']}")
        # The earlier payout found no route: the page says so, the link stays open.
        assert "The last payout attempt failed" in found.text
        assert "outbound liquidity" in found.text
        assert DEV_NO_ROUTE not in found.text  # the node's own words are the operator's
        # Another payment's id with this secret finds nothing.
        other = await client.post(
            "/recover",
            data={
                "payment_id": scenario["failed"].payment_id,
                "refund_secret": refund["refund_secret"],
            },
        )
        assert other.status_code == 404 and "No refund matches" in other.text
        wrong_amount = await client.post(
            "/recover/payout",
            data={
                "payment_id": payment_id,
                "refund_secret": refund["refund_secret"],
                "invoice": external_invoice(1_000),
            },
        )
        assert "exactly 20000 msat" in wrong_amount.text
        invoice = external_invoice(20_000)
        paid = await client.post(
            "/recover/payout",
            data={
                "payment_id": payment_id,
                "refund_secret": refund["refund_secret"],
                "invoice": "lightning:" + invoice,
            },
        )
        assert paid.status_code == 200
        assert 'id="refund-status">paid<' in paid.text and "Paid out" in paid.text
        outgoing = (await client.get("/api/dev/outgoing")).json()["payments"]
        assert [p["amount_msat"] for p in outgoing if p["bolt11"] == invoice] == [20_000]
        again = await client.post(
            "/recover/payout",
            data={
                "payment_id": payment_id,
                "refund_secret": refund["refund_secret"],
                "invoice": external_invoice(20_000),
            },
        )
        assert "already" in again.text or "is paid" in again.text
    assert assert_ledger_balances(fresh_server)["totals"]["refunds_paid_msat"] == 30_000


# -- the dashboard in a real browser --------------------------------------------------------


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    executable = shutil.which("chromium")
    if executable is None:
        skip_unless_ci("Debian chromium is not installed")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(
            executable_path=executable,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield b
        finally:
            await b.close()


async def test_dashboard_in_chromium_shows_the_ledger(
    browser: Browser, fresh_server: ThreadedServer, scenario: dict[str, Any], tmp_path: Path
) -> None:
    report = assert_ledger_balances(fresh_server)
    totals = report["totals"]
    token = token_path(fresh_server.settings.data_dir).read_text().strip()
    page = await browser.new_page(viewport={"width": 1100, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    external: list[str] = []
    page.on(
        "request",
        lambda r: None if r.url.startswith((fresh_server.url, "data:")) else external.append(r.url),
    )

    await page.goto(fresh_server.url + "/operator")
    assert await page.locator("#token").count() == 1  # the login form, nothing else
    assert await page.locator("#earned").count() == 0
    await page.fill("#token", "not-the-token")
    await page.click("#login")
    assert "not the operator token" in (await page.locator("#login-error").text_content() or "")
    await page.fill("#token", token)
    await page.click("#login")
    await page.wait_for_selector("#earned")
    # Only the refused token was an error (403); the dashboard loads without any.
    assert [p for p in problems if "403" not in p] == []
    problems.clear()
    shot = tmp_path / "operator-dashboard.png"
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    for ident, key in (
        ("received", "received_msat"),
        ("earned", "earned_msat"),
        ("refunded", "refunded_msat"),
        ("held", "held_msat"),
        ("open", "open_msat"),
        ("refund-fees", "refund_fees_msat"),
    ):
        assert await page.locator(f"#{ident}").text_content() == f"{totals[key]} msat", ident
    assert (await page.locator("#earned").text_content()) == "10000 msat"
    # The chart: one day, its earned bar carries the ledger's figure.
    bars = page.locator("#earnings-chart rect.bar.earned")
    assert await bars.count() == 1
    assert await bars.first.get_attribute("data-msat") == str(report["per_day"][0]["earned_msat"])
    box = await page.locator("#earnings-chart").bounding_box()
    assert box is not None and box["height"] > 100
    states = await page.locator("#refund-states tbody tr").all_inner_texts()
    assert [re.split(r"\s+", s.strip()) for s in states] == [
        ["open", "1", "20000"],
        ["claiming", "0", "0"],
        ["paid", "1", "10000"],
        ["expired", "0", "0"],
    ]
    payouts = await page.locator("#refund-payouts tbody").inner_text()
    assert DEV_NO_ROUTE in payouts and scenario["unlucky"].payment_id in payouts
    services = await page.locator("#calls-per-service tbody").inner_text()
    assert re.split(r"\s+", services.strip()) == ["test-service", "3", "40000", "2"]
    causes = await page.locator("#refund-causes tbody").inner_text()
    assert "the upstream engine timed out" in causes
    engines = await page.locator("#engines tbody tr").count()
    assert engines == len(fresh_server.app[ENGINES].statuses()) > 0
    assert problems == [] and external == []

    # The cookie is the operator's; signing out closes the page again.
    await page.click("text=Sign out")
    await page.wait_for_selector("#token")
    await page.close()


# -- no refund secret in any URL --------------------------------------------------------------


async def test_a_refund_secret_never_travels_in_a_url(
    browser: Browser,
    fresh_server: ThreadedServer,
    scenario: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A payer follows the refund object's recover_url in a real browser, enters the secret
    and pays the refund out: no URL the browser asked for (what an access log in front of
    satsgate writes, and what the browser's history keeps), no Referer, and no log line of
    satsgate carries the secret."""
    caplog.set_level(logging.DEBUG)
    refund = scenario["open_refund"]
    secret = refund["refund_secret"]
    page = await browser.new_page()
    requested: list[str] = []
    page.on(
        "request",
        lambda r: requested.extend([r.method + " " + r.url, r.headers.get("referer", "")]),
    )
    visited: list[str] = []
    page.on("framenavigated", lambda f: visited.append(f.url))
    await page.goto(refund["recover_url"])
    assert all(secret not in line for line in requested), requested
    await page.fill("#payment_id", scenario["unlucky"].payment_id)
    await page.fill("#refund_secret", secret)
    await page.click("#find")
    await page.wait_for_selector("#refund-status")
    assert await page.locator("#refund-status").text_content() == "open"
    await page.fill("#invoice", external_invoice(20_000))
    await page.click("#payout")
    await page.wait_for_selector("#refund-done")
    history = await page.evaluate("() => [location.href, document.referrer, history.length]")
    await page.close()
    assert any(r.startswith("POST ") and r.endswith("/recover") for r in requested)
    assert visited and all(secret not in url for url in visited), visited
    assert all(secret not in line for line in requested), requested
    assert secret not in str(history)
    logged = [r.getMessage() for r in caplog.records]
    assert logged and all(secret not in line for line in logged)


# -- the operator's sessions --------------------------------------------------------------------


async def sign_in(client: httpx.AsyncClient, token: str) -> str:
    """The session cookie a sign-in with ``token`` sets."""
    resp = await client.post("/operator/login", data={"token": token})
    assert resp.status_code == 303, resp.text
    cookie = resp.cookies.get("satsgate_operator")
    assert cookie is not None
    set_cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    client.cookies.clear()
    return cookie


async def opens_the_dashboard(client: httpx.AsyncClient, cookie: str) -> bool:
    client.cookies.clear()
    dashboard = await client.get("/operator", cookies={"satsgate_operator": cookie})
    ledger = await client.get("/api/operator/ledger", cookies={"satsgate_operator": cookie})
    holds = await client.get("/operator/holds", cookies={"satsgate_operator": cookie})
    opened = 'id="earned"' in dashboard.text
    assert opened == (ledger.status_code == 200) == (holds.status_code == 200)
    return opened


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    return found.group(1) if found else ""


async def test_signing_out_ends_the_session_for_good(fresh_server: ThreadedServer) -> None:
    token = token_path(fresh_server.settings.data_dir).read_text().strip()
    async with httpx.AsyncClient(base_url=fresh_server.url) as client:
        cookie = await sign_in(client, token)
        other = await sign_in(client, token)  # another browser of the operator's
        assert cookie != other and len(cookie) == 64
        assert await opens_the_dashboard(client, cookie)
        dashboard = await client.get("/operator", cookies={"satsgate_operator": cookie})
        csrf = csrf_of(dashboard.text)
        # Sign-out needs the session's own CSRF token: another session's does not do.
        other_csrf = csrf_of(
            (await client.get("/operator", cookies={"satsgate_operator": other})).text
        )
        assert other_csrf and other_csrf != csrf
        client.cookies.clear()
        out = await client.post(
            "/operator/logout", data={"csrf": csrf}, cookies={"satsgate_operator": cookie}
        )
        assert out.status_code == 303
        # A copy of the cookie taken before sign-out (a stolen one) opens nothing now.
        assert not await opens_the_dashboard(client, cookie)
        assert await opens_the_dashboard(client, other)  # the other session lives on


async def test_rotating_the_token_ends_every_session(fresh_server: ThreadedServer) -> None:
    data_dir = fresh_server.settings.data_dir
    old = token_path(data_dir).read_text().strip()
    async with httpx.AsyncClient(base_url=fresh_server.url) as client:
        cookie = await sign_in(client, old)
        assert await opens_the_dashboard(client, cookie)
        rotate = ("operator-token", "--rotate", "--data-dir", str(data_dir))
        new = (await asyncio.to_thread(run_cli, *rotate)).strip()
        assert new != old and len(new) == 64 and token_path(data_dir).read_text().strip() == new
        assert stat.S_IMODE(token_path(data_dir).stat().st_mode) == 0o600
        # The running server follows at once: the old session and token open nothing.
        assert not await opens_the_dashboard(client, cookie)
        for token, status in ((old, 401), (new, 200)):
            resp = await client.get(
                "/api/operator/ledger", headers={"Authorization": f"Bearer {token}"}
            )
            assert resp.status_code == status
        refused = await client.post("/operator/login", data={"token": old})
        assert refused.status_code == 403
        assert await opens_the_dashboard(client, await sign_in(client, new))


async def test_a_forged_or_static_cookie_is_refused(fresh_server: ThreadedServer) -> None:
    """Whoever knows how the cookie used to be made (an HMAC of the token) or guesses a
    value gets nothing; nor does a form posted with such a cookie and its old CSRF token."""
    token = token_path(fresh_server.settings.data_dir).read_text().strip()
    static = hmac.new(token.encode(), b"satsgate operator session v1", hashlib.sha256)
    async with httpx.AsyncClient(base_url=fresh_server.url) as client:
        for forged in (static.hexdigest(), "0" * 64, token, ""):
            assert not await opens_the_dashboard(client, forged)
        old_csrf = hmac.new(token.encode(), b"satsgate operator csrf v1", hashlib.sha256)
        client.cookies.clear()
        form = await client.post(
            "/operator/do-not-contact",
            data={"csrf": old_csrf.hexdigest(), "address": "forged@example.org"},
            cookies={"satsgate_operator": static.hexdigest()},
        )
        assert form.status_code == 403
    listed = fresh_server.call(fresh_server.store.do_not_contact.listing)
    assert all(e["address"] != "forged@example.org" for e in listed)
