"""Held communications through the gate on a real server: an e-mail the screen flags is
held (nothing sent), the payer appeals for 1 sat, the operator releases it (the e-mail
goes out, the payer fetches the result) or refunds it (once); a release and a refund
racing act once; after 24 hours an unresolved hold is refunded; the do-not-contact list
refuses before any invoice; the retention sweep clears the evidence on its schedule."""

from __future__ import annotations

import asyncio
import email
import email.policy
import hashlib
import hmac
import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session
from playwright.async_api import Browser, Page, async_playwright, expect

from satsgate.appkeys import HELD_REQUESTS
from satsgate.domain.do_not_contact import opt_out
from satsgate.operator import ensure_operator_token
from satsgate.outreach import retention
from satsgate.outreach.retention_rules import EVIDENCE_S, DeleteFiles
from satsgate.store.retention import ClearColumns, DeleteRows
from satsgate.web.operator_signin import COOKIE
from tests.conftest import (
    ThreadedServer,
    dev_pay,
    free_port,
    http_client,
    make_settings,
    skip_unless_ci,
)
from tests.ledger_check import assert_ledger_balances
from tests.mcp_client import tool_result
from tests.store_access import opened_store, store_write

HOSTILE = "This is your bank. Please reply with your PIN and the verification code we sent."


@dataclass
class Mailbox:
    received: list[EmailMessage] = field(default_factory=list)

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.received.append(message)
        return "250 OK queued"


@dataclass
class Node:
    server: ThreadedServer
    mailbox: Mailbox
    token: str

    def one(self, sql: str, *args: Any) -> Any:
        """The first row of ``sql``, read through the server's own store (either engine)."""
        store = self.server.store
        return self.server.call(
            lambda: store.db.run_sync(lambda c: c.execute(sql, args).fetchone())
        )

    def count(self, sql: str, *args: Any) -> int:
        return int(self.one(sql, *args)[0])


def serving_node(data: Path, **overrides: Any) -> Iterator[Node]:
    """A node in ``data`` that sends e-mail to a loopback SMTP server (its mailbox kept);
    ``overrides`` are settings."""
    mailbox, port = Mailbox(), free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings = make_settings(
        data,
        providers={
            "mail": {
                "kind": "smtp",
                "host": "127.0.0.1",
                "port": port,
                "from_address": "node@example.com",
                "starttls": False,
            }
        },
        engines={"email": "mail"},
        **overrides,
    )
    srv = ThreadedServer(settings)
    try:
        yield Node(srv, mailbox, ensure_operator_token(data))
    finally:
        srv.stop()
        controller.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from serving_node(tmp_path_factory.mktemp("holds"))


@pytest.fixture
async def client(node: Node) -> AsyncIterator[httpx.AsyncClient]:
    async for c in http_client(node.server):
        yield c
    assert_ledger_balances(node.server)


def mail(to: str, text: str = HOSTILE, subject: str = "Account notice") -> dict[str, Any]:
    return {"to": to, "subject": subject, "text": text}


async def paid_call(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[httpx.Response, str]:
    resp = await client.post("/api/l402/send-email", json=body)
    assert resp.status_code == 402, resp.text
    ch = resp.json()
    preimage = await dev_pay(client, ch["invoice"])
    auth = f"L402 {ch['macaroon']}:{preimage}"
    return await client.post(
        "/api/l402/send-email", json=body, headers={"Authorization": auth}
    ), auth


async def held_call(client: httpx.AsyncClient, to: str) -> dict[str, Any]:
    resp, _ = await paid_call(client, mail(to))
    assert resp.status_code == 451, resp.text
    body = dict(resp.json())
    assert body["error_code"] == "CONTENT_POLICY_HELD"
    return body


def operator(node: Node) -> dict[str, str]:
    return {"Authorization": f"Bearer {node.token}"}


async def poll(client: httpx.AsyncClient, held: dict[str, Any]) -> dict[str, Any]:
    resp = await client.get(
        "/api/l402/job-status", params={"requestId": held["requestId"], "jobType": "held"}
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def test_flagged_email_is_held_not_sent_not_refunded(
    node: Node, client: httpx.AsyncClient
) -> None:
    before = len(node.mailbox.received)
    resp, auth = await paid_call(client, mail("held@example.org"))
    assert resp.status_code == 451
    assert resp.headers["X-Error-Code"] == "CONTENT_POLICY_HELD"
    body = resp.json()
    assert body["held"] is True and body["appeal_sats"] == 1
    assert body["appeal_url"].startswith(node.server.url + "/appeal#t=hold_")
    assert body["payment_id"].startswith("pay_") and "refund" not in body
    assert len(node.mailbox.received) == before  # nothing was sent
    status = node.count(
        "SELECT COUNT(*) FROM payments WHERE payment_id = ? AND status = 'serving'",
        body["payment_id"],
    )
    assert status == 1  # held: neither answered nor refunded
    assert node.count("SELECT COUNT(*) FROM refunds WHERE payment_id = ?", body["payment_id"]) == 0
    assert (await poll(client, body))["status"] == "IN_PROGRESS"
    # The same credential again: the hold's answer again, nothing spent twice.
    again = await client.post(
        "/api/l402/send-email", json=mail("held@example.org"), headers={"Authorization": auth}
    )
    assert again.status_code == 451 and again.json()["hold_id"] == body["hold_id"]
    report = (await client.get("/api/operator/ledger", headers=operator(node))).json()
    assert report["totals"]["held_msat"] >= report["held_communications"]["held_msat"] >= 200_000
    # The screening record holds no address and no text.
    row = node.one(
        "SELECT verdict, reasons, recipient_hashes, amount_msat FROM screenings"
        " ORDER BY id DESC LIMIT 1"
    )
    assert row[0] == "held" and "credential:code" in row[1] and row[3] == 200_000
    assert "held@example.org" not in row[2] and re.fullmatch(r'\["[0-9a-f]{64}"\]', row[2])


async def test_ordinary_email_passes_the_screen(node: Node, client: httpx.AsyncClient) -> None:
    before = len(node.mailbox.received)
    resp, _ = await paid_call(
        client, mail("ok@example.org", "Your table is booked for 7pm.", "Booking")
    )
    assert resp.status_code == 200, resp.text
    assert len(node.mailbox.received) == before + 1
    assert node.mailbox.received[-1].get_content().strip() == "Your table is booked for 7pm."


async def test_appeal_then_release_sends_and_the_payer_fetches_the_result(
    node: Node, client: httpx.AsyncClient
) -> None:
    held = await held_call(client, "release@example.org")
    page = await open_appeal(client, held["appeal_url"])
    assert page.status_code == 200 and 'data-status="held"' in page.text
    token = held["appeal_url"].split("t=", 1)[1]
    asked = await client.post(
        "/appeal", data={"t": token, "note": "It is my own bank's test."}, follow_redirects=True
    )
    assert asked.status_code == 200, asked.text  # followed the 303 to the invoice
    bolt11 = re.search(r'id="appeal-invoice">([^<]+)<', asked.text)
    assert bolt11 is not None
    await dev_pay(client, bolt11.group(1))
    page = await open_appeal(client, held["appeal_url"])
    assert 'data-status="review_requested"' in page.text
    listing = (await client.get("/api/operator/holds", headers=operator(node))).json()["holds"]
    assert listing[0]["hold_id"] == held["hold_id"] and listing[0]["review_requested"]
    assert listing[0]["appeal_note"] == "It is my own bank's test."
    assert (await client.get("/api/operator/holds")).status_code == 401

    before = len(node.mailbox.received)
    resp = await client.post(
        f"/api/operator/holds/{held['hold_id']}/release", headers=operator(node)
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "released"
    assert len(node.mailbox.received) == before + 1
    sent = node.mailbox.received[-1]
    assert sent["To"] == "release@example.org" and "verification code" in sent.get_content()
    job = await poll(client, held)
    assert job["status"] == "COMPLETED"
    assert job["result"]["accepted"] == ["release@example.org"]
    page = await open_appeal(client, held["appeal_url"])
    assert 'id="released"' in page.text and "release@example.org" in page.text
    # The payment is earned now, the appeal's 1 sat too.
    assert (
        node.count(
            "SELECT COUNT(*) FROM payments WHERE payment_id = ? AND status = 'spent'",
            held["payment_id"],
        )
        == 1
    )
    assert (
        node.count("SELECT COUNT(*) FROM payments WHERE service = 'appeal' AND status = 'spent'")
        >= 1
    )
    again = await client.post(
        f"/api/operator/holds/{held['hold_id']}/refund", headers=operator(node)
    )
    assert again.status_code == 409


async def test_operator_refund_issues_one_refund_visible_to_the_payer(
    node: Node, client: httpx.AsyncClient
) -> None:
    held = await held_call(client, "refund@example.org")
    resp = await client.post(
        f"/api/operator/holds/{held['hold_id']}/refund", headers=operator(node)
    )
    assert resp.status_code == 200, resp.text
    refund = resp.json()["refund"]
    assert refund["amount_sats"] == 200 and refund["lnurl_withdraw"].startswith("LNURL")
    second = await client.post(
        f"/api/operator/holds/{held['hold_id']}/refund", headers=operator(node)
    )
    assert second.status_code == 409
    release = await client.post(
        f"/api/operator/holds/{held['hold_id']}/release", headers=operator(node)
    )
    assert release.status_code == 409
    assert node.count("SELECT COUNT(*) FROM refunds WHERE payment_id = ?", held["payment_id"]) == 1
    job = await poll(client, held)
    assert job["status"] == "FAILED" and job["error_code"] == "L402_REFUND_ISSUED"
    page = await open_appeal(client, held["appeal_url"])
    assert refund["refund_secret"] in page.text
    recover = await client.post(
        "/recover",
        data={"payment_id": held["payment_id"], "refund_secret": refund["refund_secret"]},
    )
    assert recover.status_code == 200 and "Refund of 200 sat" in recover.text


async def open_appeal(client: httpx.AsyncClient, appeal_url: object) -> httpx.Response:
    """What the appeal page's script does with the link: post the fragment's token."""
    page_url, _, token = str(appeal_url).partition("#t=")
    assert token, appeal_url
    return await client.post(page_url + "/view", data={"t": token})


async def appeal_invoice(client: httpx.AsyncClient, held: dict[str, Any]) -> str:
    """Ask for review on the appeal page: the 1-sat invoice it shows."""
    token = held["appeal_url"].split("t=", 1)[1]
    asked = await client.post("/appeal", data={"t": token}, follow_redirects=True)
    assert asked.status_code == 200, asked.text
    bolt11 = re.search(r'id="appeal-invoice">([^<]+)<', asked.text)
    assert bolt11 is not None
    return bolt11.group(1)


async def test_an_appeal_paid_after_the_operator_refunded_is_refunded_on_the_page(
    node: Node, client: httpx.AsyncClient
) -> None:
    """The operator refunds the hold while its appeal invoice is open; the payer pays it
    anyway: the sat is refunded (once) and the appeal page says so."""
    held = await held_call(client, "late-appeal@example.org")
    bolt11 = await appeal_invoice(client, held)
    resp = await client.post(
        f"/api/operator/holds/{held['hold_id']}/refund", headers=operator(node)
    )
    assert resp.status_code == 200, resp.text
    page = await open_appeal(client, held["appeal_url"])
    assert 'data-status="refunded"' in page.text and 'id="appeal-void"' in page.text
    await dev_pay(client, bolt11)
    page = await open_appeal(client, held["appeal_url"])
    assert 'id="appeal-refund"' in page.text and 'id="appeal-void"' not in page.text
    lnurl = re.search(r'id="appeal-refund-lnurl">([^<]+)<', page.text)
    assert lnurl is not None and lnurl.group(1).startswith("LNURL")
    assert re.search(r'id="appeal-refund-sats">1<', page.text)
    hold = node.server.call(lambda: node.server.app[HELD_REQUESTS].get(held["hold_id"]))
    appeal_id = hold.appeal_payment_id
    assert appeal_id is not None
    assert node.count("SELECT COUNT(*) FROM payments WHERE payment_id = ? AND status = 'refunded'",
                      appeal_id) == 1  # fmt: skip
    # Looking again (and the scheduler) refunds nothing more.
    await open_appeal(client, held["appeal_url"])
    assert node.server.call(lambda: node.server.app[HELD_REQUESTS].refund_late_appeals()) == 0
    assert node.count("SELECT COUNT(*) FROM refunds WHERE payment_id = ?", appeal_id) == 1
    secret = re.search(r'id="appeal-refund-secret">([^<]+)<', page.text)
    assert secret is not None
    recover = await client.post(
        "/recover", data={"payment_id": appeal_id, "refund_secret": secret.group(1)}
    )
    assert recover.status_code == 200 and "Refund of 1 sat" in recover.text


async def test_an_appeal_paid_after_release_is_refunded_by_the_scheduler(
    node: Node, client: httpx.AsyncClient
) -> None:
    """Released while the appeal invoice was open, paid later, the page never looked at
    again: the scheduled sweep refunds the sat, once; the released result stays."""
    held = await held_call(client, "late-release@example.org")
    bolt11 = await appeal_invoice(client, held)
    resp = await client.post(
        f"/api/operator/holds/{held['hold_id']}/release", headers=operator(node)
    )
    assert resp.status_code == 200 and resp.json()["status"] == "released", resp.text
    desk = node.server.app[HELD_REQUESTS]
    appeal_id = node.server.call(lambda: desk.get(held["hold_id"])).appeal_payment_id
    await dev_pay(client, bolt11)
    for _ in range(100):  # the settlement watcher records the payment
        settled = node.count(
            "SELECT COUNT(*) FROM payments WHERE payment_id = ? AND status != 'unpaid'", appeal_id
        )
        if settled:
            break
        await asyncio.sleep(0.05)
    node.server.call(lambda: desk.refund_late_appeals())
    assert node.server.call(lambda: desk.refund_late_appeals()) == 0
    assert node.count("SELECT COUNT(*) FROM refunds WHERE payment_id = ?", appeal_id) == 1
    refunded = "SELECT COUNT(*) FROM payments WHERE payment_id = ? AND status = 'refunded'"
    assert node.count(refunded, appeal_id) == 1
    page = await open_appeal(client, held["appeal_url"])
    assert 'id="released"' in page.text and 'id="appeal-refund"' in page.text
    # The held payment itself stays earned: only the appeal's sat went back.
    assert node.count("SELECT COUNT(*) FROM refunds WHERE payment_id = ?", held["payment_id"]) == 0


async def test_release_and_refund_racing_act_exactly_once(
    node: Node, client: httpx.AsyncClient
) -> None:
    helds = [await held_call(client, f"race{i}@example.org") for i in range(4)]
    before = len(node.mailbox.received)

    async def act(hold_id: str, action: str) -> int:
        r = await client.post(f"/api/operator/holds/{hold_id}/{action}", headers=operator(node))
        return r.status_code

    outcomes = await asyncio.gather(
        *(act(h["hold_id"], a) for h in helds for a in ("release", "refund", "release", "refund"))
    )
    for i, held in enumerate(helds):
        mine = outcomes[i * 4 : i * 4 + 4]
        assert sorted(mine) == [200, 409, 409, 409], mine
        refunds = node.count(
            "SELECT COUNT(*) FROM refunds WHERE payment_id = ?", held["payment_id"]
        )
        sent = sum(1 for m in node.mailbox.received[before:] if m["To"] == f"race{i}@example.org")
        assert refunds + sent == 1, (refunds, sent)


async def test_unresolved_hold_is_refunded_after_24_hours(
    node: Node, client: httpx.AsyncClient
) -> None:
    held = await held_call(client, "expire@example.org")
    desk = node.server.app[HELD_REQUESTS]
    hold = node.server.call(lambda: desk.get(held["hold_id"]))
    assert hold.eligible_at == hold.created_at + 24 * 3600
    node.server.call(lambda: desk.expire(hold.created_at + 24 * 3600 - 1))
    assert node.server.call(lambda: desk.get(held["hold_id"])).status == "held"
    assert (await poll(client, held))["status"] == "IN_PROGRESS"
    assert node.server.call(lambda: desk.expire(hold.created_at + 24 * 3600)) >= 1
    job = await poll(client, held)
    assert job["status"] == "FAILED"
    done = node.server.call(lambda: desk.get(held["hold_id"]))
    assert (done.status, done.resolution, done.resolved_by) == ("refunded", "expired", "schedule")
    assert node.count("SELECT COUNT(*) FROM refunds WHERE payment_id = ?", held["payment_id"]) == 1
    assert node.server.call(lambda: desk.expire(hold.created_at + 48 * 3600)) == 0


async def test_do_not_contact_refuses_before_any_invoice(
    node: Node, client: httpx.AsyncClient
) -> None:
    added = await client.post(
        "/api/operator/do-not-contact",
        json={"address": "Opted.Out@EXAMPLE.org"},
        headers=operator(node),
    )
    assert added.status_code == 200 and added.json()["address"] == "opted.out@example.org"
    invoices = node.count("SELECT COUNT(*) FROM payments")
    resp = await client.post(
        "/api/l402/send-email", json=mail("opted.out@example.org", "Your table is booked.")
    )
    assert resp.status_code == 403 and resp.json()["error_code"] == "RECIPIENT_OPTED_OUT"
    assert node.count("SELECT COUNT(*) FROM payments") == invoices  # no invoice row
    # A list with one opted-out address among others is refused too (any spelling).
    resp = await client.post(
        "/api/l402/send-email",
        json={"to": ["a@example.org", "OPTED.OUT@example.org"], "subject": "Hi", "text": "Hello"},
    )
    assert resp.status_code == 403 and resp.json()["recipients"] == ["OPTED.OUT@example.org"]
    # A STOP reply through the adapter's API: the same list.
    store = node.server.store
    assert node.server.call(
        lambda: opt_out(store.do_not_contact, "stop@example.org", source="sms-stop")
    )
    resp = await client.post("/api/l402/send-email", json=mail("stop@example.org", "Hello"))
    assert resp.status_code == 403
    assert node.count("SELECT COUNT(*) FROM payments") == invoices
    removed = await client.delete(
        "/api/operator/do-not-contact/stop@example.org", headers=operator(node)
    )
    assert removed.json()["removed"] is True
    resp = await client.post("/api/l402/send-email", json=mail("stop@example.org", "Hello"))
    assert resp.status_code == 402


async def test_retention_sweep_clears_evidence_on_schedule(
    node: Node, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    held = await held_call(client, "retention@example.org")
    store, desk = node.server.store, node.server.app[HELD_REQUESTS]
    created = node.server.call(lambda: desk.get(held["hold_id"])).created_at
    data_dir = node.server.settings.data_dir
    node.server.call(lambda: retention.sweep(store.retention, data_dir, created + EVIDENCE_S - 1))
    kept = node.server.call(lambda: desk.get(held["hold_id"]))
    assert kept.params is not None and "verification code" in (kept.outreach_text or "")
    node.server.call(lambda: retention.sweep(store.retention, data_dir, created + EVIDENCE_S + 1))
    gone = node.server.call(lambda: desk.get(held["hold_id"]))
    assert gone.params is None and gone.outreach_text is None
    assert gone.amount_msat == 200_000 and gone.status == "held"  # amounts and status stay
    assert node.count("SELECT COUNT(*) FROM screenings") > 0  # the de-identified record stays
    # What released holds delivered (their job results name the recipients) is gone too.
    assert (
        node.count("SELECT COUNT(*) FROM jobs WHERE job_type = 'held' AND status = 'COMPLETED'") > 0
    )
    assert (
        node.count("SELECT COUNT(*) FROM jobs WHERE job_type = 'held' AND result_json IS NOT NULL")
        == 0
    )
    # A release with its evidence gone cannot run the request: it is refunded instead.
    out = await client.post(
        f"/api/operator/holds/{held['hold_id']}/release", headers=operator(node)
    )
    assert out.status_code == 200 and out.json()["status"] == "refunded"


async def test_retention_rules_of_other_tables_and_files(node: Node, tmp_path: Path) -> None:
    store = node.server.store
    with opened_store(node.server.settings) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS t_msgs (id INTEGER, body TEXT, amount INTEGER, at INTEGER)"
        )
        conn.execute("DELETE FROM t_msgs")
        conn.executemany(
            "INSERT INTO t_msgs VALUES (?, ?, ?, ?)", [(1, "old", 5, 1000), (2, "new", 6, 90_000)]
        )
    files = tmp_path / "faxes"
    files.mkdir()
    (files / "old.pdf").write_bytes(b"%PDF")
    (files / "new.pdf").write_bytes(b"%PDF")
    os.utime(files / "old.pdf", (1000, 1000))
    os.utime(files / "new.pdf", (90_000, 90_000))
    rules = (
        ClearColumns("t_msgs", "at", ("body",), 86_400, "texts"),
        DeleteFiles("faxes", 86_400, "fax images"),
        DeleteRows("no_such_table", "at", 1, "nothing"),
        DeleteRows("t_msgs", "at", 1, "matched rows", match=(("amount", "5"),)),
    )
    done = node.server.call(lambda: retention.sweep(store.retention, tmp_path, 90_000, rules))
    assert done == {"texts": 1, "fax images": 1, "nothing": 0, "matched rows": 1}
    with opened_store(node.server.settings) as conn:
        left = [tuple(r) for r in conn.execute("SELECT id, body, amount FROM t_msgs ORDER BY id")]
        assert left == [(2, "new", 6)]
        conn.execute("DROP TABLE t_msgs")
    assert sorted(p.name for p in files.iterdir()) == ["new.pdf"]


async def test_cli_lists_and_releases_through_the_running_server(
    node: Node, client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    from satsgate.cli import main

    held = await held_call(client, "cli@example.org")
    where = [
        "--data-dir",
        str(node.server.settings.data_dir),
        "--port",
        str(node.server.settings.port),
    ]
    await asyncio.to_thread(main, ["hold", "list", *where])
    listing = capsys.readouterr().out
    assert held["hold_id"] in listing and "credential:code" in listing
    before = len(node.mailbox.received)
    await asyncio.to_thread(main, ["hold", "release", held["hold_id"], *where])
    assert '"status": "released"' in capsys.readouterr().out
    assert node.mailbox.received[before]["To"] == "cli@example.org"
    with pytest.raises(SystemExit, match="already released"):
        await asyncio.to_thread(main, ["hold", "refund", held["hold_id"], *where])
    await asyncio.to_thread(main, ["hold", "dnc-add", "cli-stop@example.org", *where])
    await asyncio.to_thread(main, ["hold", "dnc-list", *where])
    assert "cli-stop@example.org  operator" in capsys.readouterr().out


# -- the pages in a real browser ----------------------------------------------------------


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


def watch(page: Page) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    return problems


async def test_browser_appeal_review_release_and_refund(
    node: Node, client: httpx.AsyncClient, browser: Browser, tmp_path: Path
) -> None:
    shots = shots_dir(tmp_path)
    released, refunded = (
        await held_call(client, "browser-release@example.org"),
        await held_call(client, "browser-refund@example.org"),
    )
    # The payer: the appeal page, a note, the 1-sat invoice, paid, review requested.
    payer = await browser.new_page(viewport={"width": 900, "height": 1000})
    payer_problems = watch(payer)
    # What a proxy's access log and the browser's history would keep of the payer's pages.
    requested: list[str] = []
    payer.on("request", lambda r: requested.extend([r.url, r.headers.get("referer", "")]))
    visited: list[str] = []
    payer.on("framenavigated", lambda f: visited.append(f.url))
    await payer.goto(released["appeal_url"])
    await expect(payer.locator("#hold-status")).to_have_text("Held for review")
    await expect(payer.locator("#hold-why")).to_contain_text("password, PIN, code")
    await payer.fill("#note", "A drill my team runs, see ticket 42.")
    await payer.click("#request-review")
    invoice = payer.locator("#appeal-invoice")
    await expect(invoice).to_have_text(re.compile(r"^lnbcrt10n1"))
    assert await payer.locator("#appeal-qr svg").count() == 1
    await payer.screenshot(path=str(shots / "appeal-invoice.png"), full_page=True)
    await dev_pay(client, str(await invoice.text_content()))
    await payer.click("#check")
    await expect(payer.locator("#hold-status")).to_have_text("Review requested")

    # The operator: sign in, the held list (review requested first), release one, refund
    # the other, put an address on the do-not-contact list.
    op = await browser.new_page(viewport={"width": 1200, "height": 1000})
    op_problems = watch(op)
    await op.goto(node.server.url + "/operator")
    await op.fill("#token", node.token)
    await op.click("#login")
    await op.goto(node.server.url + "/operator/holds")
    first = op.locator("#holds tbody tr").first
    await expect(first).to_have_attribute("id", f"row-{released['hold_id']}")
    await expect(first).to_contain_text("A drill my team runs")
    await op.screenshot(path=str(shots / "operator-holds.png"), full_page=True)
    before = len(node.mailbox.received)
    await op.click(f"#release-{released['hold_id']}")
    await expect(op.locator("#done")).to_have_text(f"{released['hold_id']} released")
    await expect(op.locator(f"#row-{released['hold_id']}")).to_have_attribute(
        "data-status", "released"
    )
    assert node.mailbox.received[before]["To"] == "browser-release@example.org"
    await op.click(f"#refund-{refunded['hold_id']}")
    await expect(op.locator("#done")).to_have_text(f"{refunded['hold_id']} refunded")
    await op.fill("#dnc-address", "+44 20 7946 0000")
    await op.click("#dnc-add")
    await expect(op.locator("#do-not-contact")).to_contain_text("+442079460000")
    # The two forms read as two: Remove's field does not sit flush under Add's button.
    add = await op.locator("#dnc-add").bounding_box()
    remove = await op.locator("label:has(#dnc-remove-address)").bounding_box()
    assert add is not None and remove is not None
    assert remove["y"] - (add["y"] + add["height"]) >= 16

    # The payer sees the outcomes: the delivered result, and the refund with its link.
    await payer.goto(released["appeal_url"])
    await expect(payer.locator("#hold-status")).to_have_text("Released and delivered")
    await expect(payer.locator("#result")).to_contain_text("browser-release@example.org")
    await payer.goto(refunded["appeal_url"])
    await expect(payer.locator("#hold-status")).to_have_text("Refunded")
    await expect(payer.locator("#refund-sats")).to_have_text("200")
    assert await payer.locator("#refund-qr svg").count() == 1
    await payer.screenshot(path=str(shots / "appeal-refunded.png"), full_page=True)
    refund_secret = str(await payer.locator("#refund-secret").text_content())
    await payer.click("#recover-link")
    await expect(payer.locator("h1")).to_have_text("Refund of 200 sat")
    assert payer_problems == [] and op_problems == []
    # No appeal token or refund secret in any URL the browser asked for (or sent as Referer).
    tokens = [str(h["appeal_url"]).split("t=", 1)[1] for h in (released, refunded)]
    assert requested
    for secret in [refund_secret, *tokens]:
        assert all(secret not in url for url in requested), (secret, requested)
        assert secret not in payer.url


async def test_an_appeal_token_in_a_query_opens_nothing(
    node: Node, client: httpx.AsyncClient
) -> None:
    """``/appeal?t=`` (the link of an older version) is not read, nor echoed; without script
    the page asks for the token and opens the request when it is posted."""
    held = await held_call(client, "query@example.org")
    token = str(held["appeal_url"]).split("#t=", 1)[1]
    old_link = await client.get("/appeal", params={"t": token})
    assert old_link.status_code == 200 and "data-status" not in old_link.text
    assert token not in old_link.text and "Paste the token" in old_link.text
    csp = old_link.headers["Content-Security-Policy"]
    nonce = re.search(r"script-src 'nonce-([^']+)'", csp)
    assert nonce is not None and f'<script nonce="{nonce.group(1)}">' in old_link.text
    pasted = await client.post("/appeal/view", data={"t": token})
    assert pasted.status_code == 200 and 'data-status="held"' in pasted.text
    # The page's buttons post the token too: none of its forms is a GET.
    assert 'method="get"' not in pasted.text


async def test_operator_forms_need_the_csrf_token(node: Node, client: httpx.AsyncClient) -> None:
    held = await held_call(client, "csrf@example.org")
    await client.post("/operator/login", data={"token": node.token})
    cookies = {COOKIE: str(client.cookies.get(COOKIE))}
    client.cookies.clear()
    forged = await client.post(
        f"/operator/holds/{held['hold_id']}/refund", data={"csrf": "0" * 64}, cookies=cookies
    )
    assert forged.status_code == 403
    # The static CSRF token of old (an HMAC of the operator token) is no session's.
    static = hmac.new(node.token.encode(), b"satsgate operator csrf v1", hashlib.sha256)
    old = await client.post(
        f"/operator/holds/{held['hold_id']}/refund",
        data={"csrf": static.hexdigest()},
        cookies=cookies,
    )
    assert old.status_code == 403
    client.cookies.clear()
    no_cookie = await client.post(f"/operator/holds/{held['hold_id']}/refund", data={})
    assert no_cookie.status_code == 403
    assert (
        node.server.call(lambda: node.server.app[HELD_REQUESTS].get(held["hold_id"])).status
        == "held"
    )
    bad = await open_appeal(client, held["appeal_url"][:-4] + "0000")
    assert bad.status_code == 404 and "not valid" in bad.text


async def test_held_over_mcp_and_the_result_through_get_job_result(
    node: Node, client: httpx.AsyncClient
) -> None:
    async def tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await tool_result(client, name, arguments)

    args = mail("mcp@example.org")
    created = await tool("create_payment", {"toolName": "send_email", **args})
    pay = created["structuredContent"]
    await dev_pay(client, pay["lightningInvoice"])
    held = await tool("send_email", {"paymentId": pay["paymentId"], **args})
    assert held["isError"] is True
    body = held["structuredContent"]
    assert body["error_code"] == "CONTENT_POLICY_HELD"
    assert (body["held"], body["appeal_sats"], body["payment_id"]) == (True, 1, pay["paymentId"])
    assert body["appeal_url"].startswith(node.server.url + "/appeal#t=")
    ask = {"requestId": body["requestId"], "jobType": "held", "paymentId": pay["paymentId"]}
    waiting = await tool("get_job_result", ask)
    assert waiting["structuredContent"]["status"] == "IN_PROGRESS"
    resp = await client.post(
        f"/api/operator/holds/{body['hold_id']}/release", headers=operator(node)
    )
    assert resp.json()["status"] == "released"
    done = await tool("get_job_result", ask)
    assert done["isError"] is False
    assert done["structuredContent"]["result"]["accepted"] == ["mcp@example.org"]


async def test_holds_survive_a_restart_and_one_caught_mid_release_is_refunded(
    node: Node, tmp_path: Path
) -> None:
    settings = make_settings(
        tmp_path / "data",
        providers=node.server.settings.providers,
        engines=node.server.settings.engines,
    )
    first = ThreadedServer(settings)
    try:
        async for c in http_client(first):
            kept = await held_call(c, "restart-kept@example.org")
            stuck = await held_call(c, "restart-stuck@example.org")
    finally:
        first.stop()
    claimed = store_write(  # a crash between a release's claim and its end
        settings,
        "UPDATE held_requests SET status = 'releasing', claimed_by = ? WHERE hold_id = ?",
        first.store.instance_id,
        stuck["hold_id"],
    )
    assert claimed == 1
    second = ThreadedServer(settings)
    try:
        desk = second.app[HELD_REQUESTS]
        still = second.call(lambda: desk.get(kept["hold_id"]))
        assert still.status == "held"
        refunded = second.call(lambda: desk.get(stuck["hold_id"]))
        assert (refunded.status, refunded.resolved_by) == ("refunded", "restart")
        before = len(node.mailbox.received)
        outcome = second.call(lambda: desk.release(kept["hold_id"]))
        assert outcome.status == "released"
        assert node.mailbox.received[before]["To"] == "restart-kept@example.org"
        assert_ledger_balances(second)
    finally:
        second.stop()
