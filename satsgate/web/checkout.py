"""The hosted checkout page (``/checkout/<token>``) and its live status endpoint.

The page's token is its own (``Challenger.checkout_token``), never the paymentId: the
link is meant to be shown to whoever pays (a person, a wallet), and a paymentId spends
an MCP payment. The page and its poll never show the paymentId.

The page is one self-contained HTML document: CSS and JS inline under a
per-response CSP nonce, the QR code as inline SVG (segno), nothing fetched from
elsewhere. Every value from the store is HTML-escaped; the JSON handed to the
script is escaped so it cannot close its ``<script>`` element.

``GET /api/payments/<token or paymentId>?wait=N`` (the check_payment_status operation,
satsgate.operations.payments) long-polls (by paymentId it answers the MCP caller's
Payment resource, by token the same without the paymentId): it returns at once when the
payment is settled (or settles while waiting, via ``Gate.wait_paid``), else
after at most 25 s. The page polls it in a loop, so "paid" shows within a
moment of settlement without a reload.
"""

from __future__ import annotations

import html
import json
import secrets
from functools import cache
from importlib import resources
from string import Template
from typing import Any

import segno
from aiohttp import web

from satsgate.operations.payments import load_payment, public_status
from satsgate.payments.gate import Gate
from satsgate.services.registry import BY_SLUG
from satsgate.store import Payment, PaymentStatus

CHECKOUT_PATH = "/checkout/{token}"
# An inline icon, so the browser does not ask for /favicon.ico.
ICON = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Crect width='16' height='16' rx='4' fill='%23f7931a'/%3E"
    "%3Cpath d='M9 2 4 9h3l-1 5 5-7H8z' fill='%231c1b19'/%3E%3C/svg%3E"
)
_LABELS = {
    "unpaid": "Waiting for payment",
    "paid": "Paid",
    "spent": "Paid · used",
    "refunded": "Paid · refunded",
    "canceled": "Canceled · nothing charged",
    "expired": "Expired",
}


def install(app: web.Application, gate_key: web.AppKey[Gate]) -> None:
    """Add the checkout page (its status endpoint is the check_payment_status operation)."""

    async def page(request: web.Request) -> web.Response:
        return await checkout_page(request, request.app[gate_key])

    app.router.add_get(CHECKOUT_PATH, page)


@cache
def _asset(*parts: str) -> str:
    return resources.files("satsgate.web").joinpath(*parts).read_text(encoding="utf-8")


# -- the page -------------------------------------------------------------------------------


async def checkout_page(request: web.Request, gate: Gate) -> web.Response:
    token = request.match_info["token"]
    payment = await load_payment(gate, token)
    if payment is None:
        return _not_found_page()
    return _page_response(render_checkout(payment, token))


def render_checkout(payment: Payment, token: str) -> tuple[str, str]:
    """(html, nonce) of the checkout page for ``payment``."""
    spec = BY_SLUG.get(payment.service)
    title = spec.title if spec is not None else payment.service
    description = spec.description if spec is not None else ""
    status = public_status(payment)
    state = {"unpaid": "waiting", "spent": "paid"}.get(status, status)
    amount_sats = payment.amount_msat // 1000
    uri = f"lightning:{payment.bolt11}"
    # Upper case puts the whole URI in the QR alphanumeric mode: a smaller, denser-safe code.
    qr = segno.make(uri.upper(), error="m")
    qr_svg = qr.svg_inline(
        scale=4, border=2, dark="#111111", light="#ffffff", omitsize=True, title="Invoice QR code"
    )
    data = {
        "status": status,
        "invoice": payment.bolt11,
        "expiresAt": payment.expires_at,
        # Relative, so the page works behind a reverse proxy under any prefix.
        "statusUrl": f"../api/payments/{token}",
    }
    nonce = secrets.token_urlsafe(16)
    esc = html.escape
    page = Template(_asset("templates", "checkout.html")).substitute(
        nonce=nonce,
        icon=ICON,
        css=_asset("static", "checkout.css"),
        js=_asset("static", "checkout.js"),
        title=esc(title),
        description=esc(description),
        amount=esc(str(amount_sats)),
        state=esc(state),
        status_text=esc(_LABELS.get(status, status)),
        qr_svg=qr_svg,
        wallet_uri=esc(uri),
        bolt11=esc(payment.bolt11),
        paid_note=paid_note(payment, spec.tool_name if spec is not None else payment.service),
        # A reference for support, not the paymentId: the invoice's hash, shortened.
        payment_id=esc(payment.payment_hash[:16]),
        paid_hidden="" if payment.status in (PaymentStatus.PAID, PaymentStatus.SPENT) else "hidden",
        expires_unix=esc(str(payment.expires_at)),
        expiry_text="",
        data_json=_script_json(data),
    )
    return page, nonce


def paid_note(payment: Payment, tool: str) -> str:
    """What the agent does next once someone paid here (HTML), in the words of the way
    the payment was made: an MCP agent calls the tool with its paymentId; an HTTP agent
    that got a 402 fetches the proof with that 402's credential, then repeats its call."""
    esc = html.escape
    if payment.via == "mcp":
        return (
            f"Payment received. Your agent can now call <code>{esc(tool)}</code> with this payment."
        )
    return (
        "Payment received. The agent that asked for it can now finish its request: it "
        "reads <code>GET /api/payments/&lt;paymentId of its 402&gt;</code> with the "
        "Authorization of that 402 (its macaroon, or its Payment challenge), which answers "
        "the preimage, then repeats its request with the credential as usual."
    )


def _script_json(value: Any) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' that could end the element."""
    text = json.dumps(value, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _page_response(rendered: tuple[str, str], status: int = 200) -> web.Response:
    page, nonce = rendered
    resp = web.Response(text=page, status=status, content_type="text/html", charset="utf-8")
    resp.headers["Content-Security-Policy"] = (
        f"default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def _not_found_page() -> web.Response:
    nonce = secrets.token_urlsafe(16)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="{ICON}">'
        f'<title>No such payment · satsgate</title><style nonce="{nonce}">'
        f"{_asset('static', 'checkout.css')}</style></head>"
        '<body class="state-expired"><main class="sheet"><header class="brand">'
        '<span class="bolt" aria-hidden="true">⚡</span><span>satsgate</span></header>'
        '<section class="purchase"><h1>No such payment</h1><p class="desc">This checkout link '
        "is unknown. Ask your agent for a new payment.</p></section></main></body></html>"
    )
    return _page_response((page, nonce), status=404)
