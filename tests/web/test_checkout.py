"""The hosted checkout page and its live status endpoint, down to a real headless Chromium."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, async_playwright, expect

from satsgate.store import PaymentStatus
from satsgate.web.checkout import render_checkout
from tests.conftest import ThreadedServer, dev_pay, skip_unless_ci

CARD = {"template": "headline", "title": "Checkout", "subtitle": "in a browser"}


async def new_payment(client: httpx.AsyncClient) -> dict[str, Any]:
    resp = await client.post("/api/l402/render-card", json=CARD)
    assert resp.status_code == 402
    return dict(resp.json())


# -- status endpoint ------------------------------------------------------------------------


async def test_status_endpoint_reports_the_payment(client: httpx.AsyncClient) -> None:
    ch = await new_payment(client)
    url = f"/api/payments/{ch['paymentId']}"
    unpaid = await client.get(url)
    assert unpaid.status_code == 200 and unpaid.headers["Cache-Control"] == "no-store"
    body = unpaid.json()
    assert body == {
        **body,
        "paymentId": ch["paymentId"],
        "status": "unpaid",
        "paid": False,
        "amountSats": 5,
        "service": "render-card",
        "title": "Render card",
    }
    await dev_pay(client, ch["invoice"])
    paid = (await client.get(url)).json()
    assert paid["status"] == "paid" and paid["paid"] is True
    assert "lightningInvoice" not in paid  # nothing left to pay

    unknown = await client.get("/api/payments/pay_" + "0" * 32)
    assert unknown.status_code == 404 and unknown.json()["error_code"] == "PAYMENT_NOT_FOUND"
    malformed = await client.get("/api/payments/../../etc")
    assert malformed.status_code == 404
    bad_wait = await client.get(url, params={"wait": "soon"})
    assert bad_wait.status_code == 400 and bad_wait.json()["error_code"] == "INVALID_INPUT"


async def test_long_poll_returns_as_soon_as_the_invoice_settles(
    client: httpx.AsyncClient,
) -> None:
    ch = await new_payment(client)
    url = f"/api/payments/{ch['paymentId']}"
    started = time.monotonic()
    short = await client.get(url, params={"wait": "0.3"})
    assert short.json()["status"] == "unpaid" and time.monotonic() - started >= 0.25

    waiting = asyncio.create_task(client.get(url, params={"wait": "25"}))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    paid_at = time.monotonic()
    await dev_pay(client, ch["invoice"])
    answer = await asyncio.wait_for(waiting, 5)
    assert answer.json()["paid"] is True
    assert time.monotonic() - paid_at < 1.0


# -- the page -------------------------------------------------------------------------------


async def test_page_is_self_contained_and_escaped(
    client: httpx.AsyncClient, server: ThreadedServer
) -> None:
    ch = await new_payment(client)
    resp = await client.get(ch["hostedCheckoutUrl"])
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/html")
    page = resp.text
    csp = resp.headers["Content-Security-Policy"]
    nonce = re.search(r"'nonce-([^']+)'", csp)
    assert nonce is not None and "default-src 'none'" in csp
    assert f'<script nonce="{nonce.group(1)}">' in page
    # Nothing fetched from elsewhere: no external scripts, styles, fonts or images.
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(?!data:)", page)
    assert "https://" not in page
    assert "http://" not in page.replace(server.url, "").replace("http://www.w3.org/2000/svg", "")
    assert ch["invoice"] in page and "Render card" in page and ">5<" in page
    assert "<svg" in page and "Waiting for payment" in page

    missing = await client.get("/checkout/pay_" + "0" * 32)
    assert missing.status_code == 404 and "No such payment" in missing.text


async def test_page_escapes_stored_values(
    server: ThreadedServer, client: httpx.AsyncClient
) -> None:
    ch = await new_payment(client)
    payment = server.call(lambda: server.store.payments.get(ch["paymentId"]))
    hostile = payment._replace(
        service='<script>alert("x")</script>',
        bolt11="lnbc1</script><script>alert(2)</script>",
        status=PaymentStatus.PAID,
    )
    page, _nonce = render_checkout(hostile, "ck_token")
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "lnbc1&lt;/script&gt;&lt;script&gt;alert(2)" in page  # in the textarea
    # The JSON handed to the script cannot close the <script> element either.
    data = page.split('id="checkout-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and "\\u003c/script\\u003e" in data


# -- in a real browser ----------------------------------------------------------------------


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


def shots_dir(tmp_path: Path) -> Path:
    path = Path(os.environ.get("SATSGATE_SCREENSHOTS", tmp_path))
    path.mkdir(parents=True, exist_ok=True)
    return path


async def test_browser_shows_paid_within_a_second_without_reload(
    browser: Browser, server: ThreadedServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    shots = shots_dir(tmp_path)
    ch = await new_payment(client)
    page = await browser.new_page(viewport={"width": 1000, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    await page.goto(ch["hostedCheckoutUrl"])
    status = page.locator("#status-text")
    assert await status.text_content() == "Waiting for payment"
    assert await page.locator(".qr svg").count() == 1
    assert await page.locator("#invoice").input_value() == ch["invoice"]
    assert await page.locator("h1").text_content() == "Render card"
    # (Locator assertions: the page's CSP forbids eval, so no string predicates.)
    await expect(page.locator("#expiry")).to_have_text(re.compile(r"^Expires in \d+:\d\d$"))
    await page.screenshot(path=str(shots / "checkout-before.png"), full_page=True)

    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    paid_at = time.monotonic()
    await dev_pay(client, ch["invoice"])
    # Pushed to the open page (no reload): seconds at most even on a loaded machine, where
    # a page that polled slowly or waited for the invoice's expiry would take minutes.
    await expect(status).to_have_text("Paid", timeout=10_000)
    elapsed = time.monotonic() - paid_at
    assert elapsed < 10.0
    assert navigations == []  # no reload
    assert await page.locator("#paid-note").is_visible()
    assert await page.locator("body.state-paid").count() == 1
    await page.screenshot(path=str(shots / "checkout-after.png"), full_page=True)
    assert problems == []  # no CSP violations, no script errors


async def test_browser_mobile_width_and_copy_button(
    browser: Browser, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    shots = shots_dir(tmp_path)
    ch = await new_payment(client)
    context = await browser.new_context(
        viewport={"width": 360, "height": 740}, device_scale_factor=2, is_mobile=True
    )
    page = await context.new_page()
    await page.goto(ch["hostedCheckoutUrl"])
    overflow = await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    qr_width = await page.evaluate(
        "document.querySelector('.qr svg').getBoundingClientRect().width"
    )
    assert 200 <= qr_width <= 340  # big enough to scan, inside the screen
    await page.click("#copy")
    await expect(page.locator("#copy")).to_have_text("Copied")
    await page.screenshot(path=str(shots / "checkout-mobile.png"), full_page=True)
    await context.close()
