"""The operator's routes and the payer's refund recovery.

- ``GET /operator``: the dashboard (login form until a session is open);
  ``POST /operator/login`` checks the token and opens a server-side session (its id in
  the cookie, satsgate.web.operator_signin); ``POST /operator/logout`` ends it.
- ``GET /api/operator/ledger``: the ledger and the operator's figures as JSON, with the
  token as ``Authorization: Bearer <token>`` (or the dashboard's session cookie).
- ``GET /recover``: the form; ``POST /recover`` with the payment id and refund secret in
  the body shows the refund: its LNURL-withdraw QR code, or a form to paste an invoice
  (``POST /recover/payout``) that the node pays out. A refund secret never travels in a
  URL (it would land in access logs, browser history and Referer headers): ``GET
  /recover`` looks nothing up, and a ``refund_secret`` in its query is ignored with a
  notice; the links satsgate hands out are the bare page (``recover_url``) with the
  secret beside it, or a form button that posts it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web
from lnurl.helpers import url_encode

from satsgate.appkeys import NOSTR_STATUS
from satsgate.cluster.status import instances_state
from satsgate.config.settings import Settings
from satsgate.edge.http import read_form
from satsgate.engines import Engines
from satsgate.operator import operator_report, payout_reason, sats_text
from satsgate.payouts.refunds import NO_LIQUIDITY_HINT, RefundService
from satsgate.store import Refund, RefundStatus, Store
from satsgate.web.operator_instances import instances_section
from satsgate.web.operator_signin import COOKIE, OPERATOR, unauthorized
from satsgate.web.operator_workers import workers_section
from satsgate.web.pages import earnings_chart, esc, page, qr_svg, table
from satsgate.workers.status import operator_workers

RECOVER_PATH = "/recover"


class Keys:
    """The app's keys this module reads (defined in satsgate.server.app)."""

    def __init__(
        self,
        settings: web.AppKey[Settings],
        store: web.AppKey[Store],
        engines: web.AppKey[Engines],
        refunds: web.AppKey[RefundService],
    ) -> None:
        self.settings, self.store, self.engines, self.refunds = settings, store, engines, refunds


def install(app: web.Application, keys: Keys) -> None:
    pages = _OperatorPages(keys)
    r = app.router
    r.add_get("/operator", pages.dashboard)
    r.add_post("/operator/login", pages.login)
    r.add_post("/operator/logout", pages.logout)
    r.add_get("/api/operator/ledger", pages.ledger_api)
    r.add_get(RECOVER_PATH, pages.recover_form)
    r.add_post(RECOVER_PATH, pages.recover)
    r.add_post("/recover/payout", pages.recover_payout)


class _OperatorPages:
    """The operator's dashboard and sign-in, its ledger API, and the payer's /recover."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    async def _report(self, app: web.Application) -> dict[str, Any]:
        """The ledger report with the Nostr, workers' and instances' states."""
        report = await operator_report(app[self.keys.store], app[self.keys.engines])
        report["nostr"] = _nostr_status(app)
        report["workers"] = await operator_workers(app)
        report["instances"] = await instances_state(app[self.keys.store])
        return report

    async def ledger_api(self, request: web.Request) -> web.Response:
        if not request.app[OPERATOR].authorized(request):
            return unauthorized()
        report = await self._report(request.app)
        resp = web.json_response(report)
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def dashboard(self, request: web.Request) -> web.Response:
        access = request.app[OPERATOR]
        session_id = access.session(request)
        if session_id is None and not access.bearer(request):
            return _login_page()
        report = await self._report(request.app)
        csrf = access.csrf_token(session_id) if session_id is not None else ""
        return page("Operator", _dashboard_body(report, csrf))

    async def login(self, request: web.Request) -> web.Response:
        form = await read_form(request)
        offered = str(form.get("token", ""))
        access = request.app[OPERATOR]
        if not offered or not access.token_matches(offered):
            await asyncio.sleep(0.5)  # a guess costs time
            return _login_page("That is not the operator token.", status=403)
        access.end_session(request)  # a session the browser held before is replaced
        resp = web.HTTPSeeOther("/operator")
        access.set_cookie(request, resp, access.open_session())
        raise resp

    async def logout(self, request: web.Request) -> web.Response:
        access = request.app[OPERATOR]
        form = await read_form(request)
        live = access.session(request) is not None
        if live and not access.form_allowed(request, str(form.get("csrf", ""))):
            return page("Forbidden", "<p>Sign out from the dashboard's button.</p>", status=403)
        access.end_session(request)
        resp = web.HTTPSeeOther("/operator")
        resp.del_cookie(COOKIE, path="/")
        raise resp

    async def recover_form(self, request: web.Request) -> web.Response:
        payment_id = request.query.get("payment_id", "").strip()[:128]
        notice = ""
        if "refund_secret" in request.query:
            # A link from before secrets left URLs: the secret is not looked up or echoed.
            notice = (
                "This link carried the refund secret in its address, where logs and "
                "browser history keep it; this page no longer reads it from there. Paste "
                "the refund secret below."
            )
        return page("Recover a refund", _recover_form(payment_id, "", notice))

    async def recover(self, request: web.Request) -> web.Response:
        form = await read_form(request)
        secret = str(form.get("refund_secret", "")).strip()
        payment_id = str(form.get("payment_id", "")).strip()
        if not secret:
            return page("Recover a refund", _recover_form(payment_id, ""))
        refund = await _find_refund(request.app[self.keys.store], payment_id, secret)
        if refund is None:
            return _no_refund_page(payment_id, secret)
        body = await _refund_body(request, self.keys, refund, payment_id)
        return page("Your refund", body)

    async def recover_payout(self, request: web.Request) -> web.Response:
        form = await read_form(request)
        secret = str(form.get("refund_secret", "")).strip()
        payment_id = str(form.get("payment_id", "")).strip()
        invoice = str(form.get("invoice", "")).strip()
        if invoice.lower().startswith("lightning:"):
            invoice = invoice[10:]
        refund = await _find_refund(request.app[self.keys.store], payment_id, secret)
        if refund is None:
            return _no_refund_page(payment_id, secret)
        refunds = request.app[self.keys.refunds]
        answer = await refunds.withdraw_callback(refund.k1, invoice)
        message = None
        if answer.get("status") != "OK":
            message = str(answer.get("reason", "The payout was refused."))
        else:
            # The payout runs in the background; wait a moment for its outcome.
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                current = await request.app[self.keys.store].refunds.get_by_k1(refund.k1)
                if current is not None and current.status is not RefundStatus.CLAIMING:
                    break
        current = await request.app[self.keys.store].refunds.get_by_k1(refund.k1) or refund
        body = await _refund_body(request, self.keys, current, payment_id, message)
        return page("Your refund", body)


def _no_refund_page(payment_id: str, secret: str) -> web.Response:
    return page(
        "Recover a refund",
        _recover_form(payment_id, secret, "No refund matches this payment id and refund secret."),
        status=404,
    )


def recover_button(payment_id: str, secret: str, ident: str, label: str) -> str:
    """A button that opens a refund on /recover: the secret travels in the POST body, never
    in a URL (works without script)."""
    return (
        f'<form method="post" action="{RECOVER_PATH}" class="inline">'
        f'<input type="hidden" name="payment_id" value="{esc(payment_id)}">'
        f'<input type="hidden" name="refund_secret" value="{esc(secret)}">'
        f'<button type="submit" id="{esc(ident)}">{esc(label)}</button></form>'
    )


async def _find_refund(store: Store, payment_id: str, secret: str) -> Refund | None:
    """The refund whose secret this is; the payment id, when given, must be its own."""
    if not secret or len(secret) > 128:
        return None
    refund = await store.refunds.get_by_k1(secret.lower())
    if refund is None or (payment_id and refund.payment_id != payment_id):
        return None
    return refund


# -- pages ----------------------------------------------------------------------------------


def _login_page(error: str = "", status: int = 200) -> web.Response:
    notice = f'<p class="notice error" id="login-error">{esc(error)}</p>' if error else ""
    body = (
        '<section class="card"><h1>Operator</h1>'
        "<p>Enter the operator token. On the node: <code>satsgate operator-token</code> "
        "(or <code>lightning-cli satsgate-operator-token</code> with the plugin).</p>"
        f'{notice}<form method="post" action="/operator/login">'
        '<label>Operator token <input type="password" name="token" id="token" '
        'autocomplete="current-password" required></label>'
        '<button type="submit" id="login">Sign in</button></form></section>'
    )
    return page("Operator sign-in", body, status=status)


def _figure(ident: str, label: str, msat: int, sub: str = "") -> str:
    sats = f"{msat / 1000:,.3f}".rstrip("0").rstrip(".")
    return (
        f'<div class="figure"><div class="label">{esc(label)}</div>'
        f'<div class="value" id="{ident}" data-msat="{msat}">{msat} msat</div>'
        f'<div class="sub">{esc(sats)} sat{(" · " + esc(sub)) if sub else ""}</div></div>'
    )


def _nostr_status(app: web.Application) -> dict[str, Any] | None:
    status = app.get(NOSTR_STATUS)
    return status() if status is not None else None


def _nostr_section(status: dict[str, Any] | None) -> str:
    """The Nostr announcements: the node's npub and each relay's state."""
    if status is None:
        return (
            '<section class="card" id="nostr"><h2>Nostr announcements</h2><p class="muted">'
            "Off: set <code>[discovery.nostr] relays</code> to announce this node's services."
            "</p></section>"
        )
    relays = table(
        ("relay", "state", "detail", "attempts"),
        ((r["url"], r["state"], r["detail"] or "-", r["attempts"]) for r in status["relays"]),
        numeric={3},
        table_id="nostr-relays",
    )
    last = status["eventId"] or "none yet"
    return (
        '<section class="card" id="nostr"><h2>Nostr announcements</h2>'
        f'<p>Announcing as <code id="nostr-npub">{esc(status["npub"])}</code></p>'
        f'<p class="muted">Last event: {esc(last)} ({esc(status["reason"] or "-")})</p>'
        f"{relays}</section>"
    )


def _dashboard_body(report: dict[str, Any], csrf: str) -> str:
    """The operator's page: the ledger's figures, then a card per table."""
    t = report["totals"]
    held = report.get("held_communications", {})
    return (
        '<h1>Operator</h1><p class="muted">received = earned + refunded + held + open, '
        "to the msat</p>"
        f'<div class="figures">{_figures(t)}</div>'
        f'<p class="muted" id="canceled-holds">Hold invoices canceled (never charged, '
        f"outside the equation): {t['canceled_holds']} ({t['canceled_holds_msat']} msat)</p>"
        f'<p><a href="/operator/holds" id="holds-link">Held communications '
        f"({held.get('held', 0)} open, {held.get('review_requested', 0)} asking for "
        "review) and the do-not-contact list</a></p>"
        + _card("Earnings over time", earnings_chart(report["per_day"]))
        + _card("Per day", _per_day_table(report))
        + _card("Refunds by state", _refund_states_table(t))
        + _card(
            "Refund payouts to look at",
            '<p class="muted">Claims under way, and links whose last payout failed (the link '
            "stays open; the payer can try again).</p>" + _refund_payouts_table(report),
        )
        + _card(
            "Session payouts to look at",
            '<p class="muted">Payment sessions whose balance could not be paid to the return '
            "invoice yet (retried with backoff), or whose payout's outcome is unknown. Open "
            f"balances: {t['session_balances_msat']} msat in {t['sessions_open']} session(s)."
            "</p>" + _session_payouts_table(report),
        )
        + _card("Calls per service", _services_table(report))
        + _card("Failures and refunds by cause", _causes_table(report))
        + _card("Engines", _engines_table(report))
        + instances_section(report.get("instances"))
        + workers_section(report.get("workers"))
        + _nostr_section(report.get("nostr"))
        + '<form method="post" action="/operator/logout">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<button type="submit" id="logout">Sign out</button></form>'
    )


def _card(title: str, body: str) -> str:
    return f'<section class="card"><h2>{title}</h2>{body}</section>'


def _figures(t: dict[str, Any]) -> str:
    return "".join(
        (
            _figure("received", "Received", t["received_msat"], f"{t['payments']} payments"),
            _figure("earned", "Earned", t["earned_msat"]),
            _figure("refunded", "Refunded", t["refunded_msat"], "open, claiming or paid out"),
            _figure("held", "Held", t["held_msat"], "calls in flight, holds settling"),
            _figure("open", "Open (paid, not used)", t["open_msat"]),
            _figure("refund-fees", "Routing fees on refunds", t["refund_fees_msat"]),
        )
    )


def _per_day_table(report: dict[str, Any]) -> str:
    columns = ("received_msat", "earned_msat", "refunded_msat", "held_msat", "open_msat")
    return table(
        ("day", "received", "earned", "refunded", "held", "open"),
        ((d["day"], *(d[c] for c in columns)) for d in reversed(report["per_day"])),
        numeric={1, 2, 3, 4, 5},
        table_id="per-day",
    )


def _refund_states_table(t: dict[str, Any]) -> str:
    return table(
        ("state", "refunds", "msat"),
        (
            (s, t[f"refunds_{s}"], t[f"refunds_{s}_msat"])
            for s in ("open", "claiming", "paid", "expired")
        ),
        numeric={1, 2},
        table_id="refund-states",
    )


def _services_table(report: dict[str, Any]) -> str:
    return table(
        ("service", "calls", "paid msat", "refunds"),
        (
            (s["service"], s["calls"], s["paid_msat"], s["refunds"])
            for s in report["calls_per_service"]
        ),
        numeric={1, 2, 3},
        table_id="calls-per-service",
    )


def _causes_table(report: dict[str, Any]) -> str:
    return table(
        ("cause", "refunds", "msat"),
        ((c["cause"], c["refunds"], c["amount_msat"]) for c in report["refunds_by_cause"]),
        numeric={1, 2},
        table_id="refund-causes",
    )


def _refund_payouts_table(report: dict[str, Any]) -> str:
    return table(
        ("refund", "payment", "msat", "state", "node's reason"),
        (
            (
                p["refund_id"],
                p["payment_id"],
                p["amount_msat"],
                p["status"],
                payout_reason(p),
            )
            for p in report["refund_payouts"]
        ),
        numeric={2},
        table_id="refund-payouts",
    )


def _session_payouts_table(report: dict[str, Any]) -> str:
    return table(
        ("session", "msat", "state", "attempts", "node's reason"),
        (
            (
                p["session_id"],
                p["refund_msat"],
                p["payout_status"],
                p["payout_attempts"],
                payout_reason(p),
            )
            for p in report.get("session_payouts", [])
        ),
        numeric={1, 3},
        table_id="session-payouts",
    )


def _engines_table(report: dict[str, Any]) -> str:
    return table(
        ("engine", "state", "source", "detail"),
        (
            (
                e["engine"],
                "available" if e["available"] else "unavailable",
                e["source"] or "-",
                e["label"] if e["available"] else e["reason"],
            )
            for e in report.get("engines", [])
        ),
        table_id="engines",
    )


def _recover_form(payment_id: str, secret: str, error: str = "") -> str:
    notice = f'<p class="notice error" id="recover-error">{esc(error)}</p>' if error else ""
    return (
        '<section class="card"><h1>Recover a refund</h1>'
        "<p>A call that failed after payment was refunded. Enter the payment id and the "
        "refund secret from the refund (the error body of the failed call) to claim it.</p>"
        f'{notice}<form method="post" action="{RECOVER_PATH}">'
        f'<label>Payment id <input name="payment_id" id="payment_id" value="{esc(payment_id)}"'
        ' placeholder="pay_…" autocomplete="off"></label>'
        f'<label>Refund secret <input name="refund_secret" id="refund_secret" '
        f'value="{esc(secret)}" required autocomplete="off"></label>'
        '<button type="submit" id="find">Find my refund</button></form></section>'
    )


def _amount_text(amount_msat: int) -> str:
    """A refund's amount as a payer's wallet must ask for it: whole sats, or to the msat
    (an invoice for the rounded sats would be refused as not exact)."""
    if amount_msat % 1000 == 0:
        return sats_text(amount_msat)
    return f"{amount_msat} msat ({sats_text(amount_msat)})"


async def _refund_body(
    request: web.Request,
    keys: Keys,
    refund: Refund,
    payment_id: str,
    message: str | None = None,
) -> str:
    base = request.app[keys.settings].public_base_url
    refunds = request.app[keys.refunds]
    amount = _amount_text(refund.amount_msat)
    expired = refund.status is RefundStatus.OPEN and refund.expires_at <= time.time()
    status = "expired" if expired else str(refund.status)
    notices = []
    if message:
        notices.append(f'<p class="notice error" id="payout-error">{esc(message)}</p>')
    last_error = await refunds.last_payout_error(refund.k1)
    if refund.status is RefundStatus.OPEN and last_error and not expired:
        # The node's own words stay the operator's (/operator): they can name channels
        # and what they could carry, which is not the payer's to learn.
        notices.append(
            '<p class="notice" id="last-payout-error">The last payout attempt failed. The '
            "refund is still open: try again later or with another wallet "
            f"({esc(NO_LIQUIDITY_HINT)}).</p>"
        )
    head = (
        f'<section class="card"><h1>Refund of {esc(amount)}</h1>'
        f'<p>Status: <strong id="refund-status">{esc(status)}</strong> · '
        f'<span class="mono">{esc(refund.refund_id)}</span> · payment '
        f'<span class="mono">{esc(refund.payment_id)}</span></p>{"".join(notices)}'
    )
    if status == "paid":
        return head + '<p class="ok" id="refund-done">Paid out to your wallet.</p></section>'
    if status == "claiming":
        return head + (
            '<p id="refund-claiming">A payout is under way. Reload this page in a minute.'
            "</p></section>"
        )
    if status == "expired":
        return head + (
            '<p id="refund-expired">This refund link expired unclaimed. Ask the operator of '
            "this service to issue it again.</p></section>"
        )
    lnurl = url_encode(f"{base}/api/lnurlw/{refund.k1}")
    return head + (
        "<h2>Scan with your wallet</h2>"
        f'<div class="qr" id="refund-qr">{qr_svg("lightning:" + str(lnurl).upper(), "Refund QR")}'
        "</div>"
        f'<p class="mono" id="lnurl">{esc(lnurl)}</p>'
        f"<h2>Or paste an invoice for exactly {esc(amount)}</h2>"
        '<form method="post" action="/recover/payout">'
        f'<input type="hidden" name="refund_secret" value="{esc(refund.k1)}">'
        f'<input type="hidden" name="payment_id" value="{esc(payment_id)}">'
        '<label>Lightning invoice <textarea name="invoice" id="invoice" rows="4" required>'
        "</textarea></label>"
        '<button type="submit" id="payout">Pay out my refund</button></form></section>'
    )
