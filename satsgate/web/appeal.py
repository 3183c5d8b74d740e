"""The appeal page (``/appeal``): the payer of a held communication asks for human review.

``appeal_url`` in the CONTENT_POLICY_HELD answer is ``/appeal#t=<token>``: the token is
a capability (an HMAC of the hold id under the server secret), given only to the payer,
and the page shows nothing without it. It opens the refund secret of a refunded request,
so it never travels in a URL: the fragment stays in the browser, the page's script
takes it out of the address (and the history entry) and posts it
(``POST /appeal/view``); without script the page asks for it to be pasted. Every
button on the page posts the token again; ``?t=`` in a query (a link of an older
version) is not read. On the page the payer can add a note and pay
1 sat (an invoice through the node, shown as a QR code and text); once it is paid the
request is ``review requested`` and listed first to the operator. The page then shows
the outcome: the result of a released request, or the refund of a refunded one (the
same refund /recover claims). An appeal invoice replaced in its last minute still counts
if it is paid first; an appeal invoice paid after the request was decided, or after
another one already asked for the review, is refunded, and the page shows that refund
(or, while such an invoice is still open, that it is no longer needed).

Server-rendered like /recover (satsgate.web.pages): CSS and the one script under a
nonce, every value escaped; a "Check payment" button reloads the state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from satsgate.edge.http import read_form
from satsgate.errors import ApiError, ErrorCode
from satsgate.outreach.held_requests import APPEAL_PATH, APPEAL_SATS, HeldRequestDesk, HoldError
from satsgate.store import JobStatus, Payment, PaymentStatus
from satsgate.store.held_requests import HeldRequest
from satsgate.web.operator_routes import recover_button
from satsgate.web.pages import esc, page, qr_svg

VIEW_PATH = APPEAL_PATH + "/view"

_STATES = {
    "held": "Held for review",
    "review_requested": "Review requested",
    "releasing": "Being released",
    "released": "Released and delivered",
    "failed": "Released, but delivery failed (refunded)",
    "refunding": "Being refunded",
    "refunded": "Refunded",
}
_CATEGORIES = {
    "credential": "it asks the recipient for a password, PIN, code or card number",
    "impersonation": "it presents itself as a bank, an authority, support or a relative",
    "threat": "it reads as a threat",
    "harassment": "it reads as harassment",
    "scam": "it asks for payment in a way scams do",
    "llm": "the language-model check flagged it",
}


_Form = Mapping[str, object]  # the posted form
# What a form post does with the hold its token opened: the page it answers.
_HoldAction = Callable[[HeldRequestDesk, HeldRequest, str, _Form], Awaitable[web.Response]]


def install(app: web.Application, holds_key: web.AppKey[HeldRequestDesk]) -> None:
    async def ask(request: web.Request) -> web.Response:
        error = ""
        if "t" in request.query:
            error = (
                "This link carried the appeal token in its address, where logs keep it; "
                "this page no longer reads it from there. Paste the token (after t=) below."
            )
        return page("Appeal a held request", _ask_token(error), script=_READ_FRAGMENT)

    def on_hold(action: _HoldAction) -> Callable[[web.Request], Awaitable[web.Response]]:
        """A form post that carries the appeal token: ``action`` on the hold it opens;
        a 404 asking for the token when it opens none."""

        async def route(request: web.Request) -> web.Response:
            desk = request.app[holds_key]
            form = await read_form(request)
            token = str(form.get("t", "")).strip()
            hold = await _hold_of(desk, token)
            if hold is None:
                return page(
                    "Appeal a held request", _ask_token("This appeal link is not valid."), 404
                )
            return await action(desk, hold, token, form)

        return route

    @on_hold
    async def show(
        desk: HeldRequestDesk, hold: HeldRequest, token: str, form: _Form
    ) -> web.Response:
        hold = await desk.refresh_appeal(hold)
        return page("Appeal a held request", await _body(desk, hold, token))

    @on_hold
    async def appeal(
        desk: HeldRequestDesk, hold: HeldRequest, token: str, form: _Form
    ) -> web.Response:
        try:
            await desk.appeal_invoice(hold, str(form.get("note", "")))
        except HoldError as exc:
            return page(
                "Appeal a held request", await _body(desk, hold, token, str(exc)), status=409
            )
        except ApiError as exc:
            # The node's bound on unpaid invoices (max_unpaid_challenges): no new invoice
            # now; the page says when to retry (an open invoice it showed stays payable).
            if exc.code != ErrorCode.RATE_LIMITED:
                raise
            body = await _body(desk, hold, token, exc.message)
            resp = page("Appeal a held request", body, status=429)
            resp.headers.update(exc.headers)
            return resp
        hold = await desk.get(hold.hold_id) or hold
        return page("Appeal a held request", await _body(desk, hold, token))

    app.router.add_get(APPEAL_PATH, ask)
    app.router.add_post(APPEAL_PATH, appeal)
    app.router.add_post(VIEW_PATH, show)


# The appeal link's fragment (#t=<token>): out of the address bar and the history entry,
# then posted. A page without it (or without script) shows the form to paste the token.
_READ_FRAGMENT = (
    "(function(){var m=/^#t=([A-Za-z0-9_.-]{1,120})$/.exec(location.hash);if(!m)return;"
    "history.replaceState(null,'',location.pathname);"
    "document.getElementById('t').value=m[1];document.getElementById('open-form').submit();})();"
)


async def _hold_of(desk: HeldRequestDesk, token: str) -> HeldRequest | None:
    hold_id = desk.hold_id_of(token) if 0 < len(token) <= 120 else None
    return None if hold_id is None else await desk.get(hold_id)


def _ask_token(error: str = "") -> str:
    notice = f'<p class="notice error" id="appeal-error">{esc(error)}</p>' if error else ""
    return (
        '<section class="card"><h1>Appeal a held request</h1>'
        "<p>A message, call or fax that the automatic screen held is not sent and its "
        "payment is kept, not spent. Open the <code>appeal_url</code> from the "
        "CONTENT_POLICY_HELD answer to ask a person to review it (1 sat), or paste its "
        "appeal token (the part after <code>#t=</code>) here.</p>"
        f'{notice}<form method="post" action="{VIEW_PATH}" id="open-form"><label>Appeal token '
        '<input name="t" id="t" required autocomplete="off"></label>'
        '<button type="submit" id="open">Open</button></form></section>'
    )


def _why(hold: HeldRequest) -> str:
    seen: list[str] = []
    for reason in hold.reasons:
        text = _CATEGORIES.get(reason.split(":")[0], "the screen flagged it")
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


async def _body(desk: HeldRequestDesk, hold: HeldRequest, token: str, error: str = "") -> str:
    sats = hold.amount_msat // 1000
    state = _STATES.get(hold.status, hold.status)
    notice = f'<p class="notice error" id="appeal-error">{esc(error)}</p>' if error else ""
    head = (
        f'<section class="card"><h1>Held request · {esc(hold.service)}</h1>'
        f'<p>Status: <strong id="hold-status" data-status="{esc(hold.status)}">{esc(state)}'
        f"</strong></p>{notice}"
        f'<p id="hold-why">The automatic screen held this '
        f"{esc(_CHANNELS.get(hold.channel, hold.channel.replace('_', ' ')))}"
        f" before it was sent: {esc(_why(hold))}. Nothing reached the recipient.</p>"
        f'<p class="muted">Payment <span class="mono" id="payment-id">{esc(hold.payment_id)}'
        f"</span> · {esc(sats)} sat · held at {esc(_when(hold.created_at))} · {_deadline(hold)}"
        "</p>"
    )
    if hold.status == "held":
        return head + await _appeal_part(desk, hold, token) + "</section>"
    if hold.status == "review_requested":
        return head + (
            '<p class="ok" id="review-requested">Your 1-sat appeal is paid: a person will '
            "review the request. Reload this page for the outcome; the result also appears "
            f'at the poll_url of the held answer (job <span class="mono">{esc(hold.job_id)}'
            "</span>).</p>"
            + await _late_appeal_part(desk, hold)
            + _check_button(token)
            + "</section>"
        )
    head += await _late_appeal_part(desk, hold)
    job = await desk.job(hold)
    if hold.status == "released" and job is not None and job.status is JobStatus.COMPLETED:
        result = json.dumps(job.result, indent=2, ensure_ascii=False)
        return head + (
            '<p class="ok" id="released">A reviewer released the request and it was '
            "delivered. The result:</p>"
            f'<pre class="mono" id="result">{esc(result)}</pre></section>'
        )
    refund = (job.error or {}).get("refund") if job is not None else None
    if isinstance(refund, dict):
        now = await desk.refund_state(str(refund.get("refund_secret", "")))
        return head + _refund_part(refund, hold, now) + "</section>"
    return head + _check_button(token) + "</section>"


async def _late_appeal_part(desk: HeldRequestDesk, hold: HeldRequest) -> str:
    """Appeal invoices that can buy nothing more (the request was decided, or another
    appeal of it was paid): those paid anyway were refunded (the page's refresh_appeal
    did it), each shown with its link; one still open: do not pay it."""
    parts = []
    for n, (payment_id, refund) in enumerate(await desk.appeal_refunds(hold)):
        parts.append(await _appeal_refund_part(desk, hold, payment_id, refund, n))
    if parts:
        return "".join(parts)
    now = time.time()
    for payment in await desk.appeal_payments(hold):
        if payment.status is PaymentStatus.UNPAID and payment.expires_at > now:
            what = (
                "Your appeal is already paid: another appeal invoice"
                if hold.status == "review_requested"
                else "The request was decided before the appeal invoice was paid: it"
            )
            return (
                f'<p class="notice" id="appeal-void">{what} is no longer needed, do not pay '
                "it. A payment that arrives anyway is refunded in full here.</p>"
            )
    return ""


async def _appeal_refund_part(
    desk: HeldRequestDesk, hold: HeldRequest, payment_id: str, refund: dict[str, Any], n: int
) -> str:
    suffix = f"-{n + 1}" if n else ""  # the first keeps the plain ids
    secret = str(refund.get("refund_secret", ""))
    lnurl = str(refund.get("lnurl_withdraw", ""))
    state = await desk.refund_state(secret)
    counted = hold.appeal_paid_at is not None and hold.appeal_payment_id != payment_id
    why = (
        "after another appeal payment had already asked for the review"
        if counted
        else "after the request was decided"
    )
    done = _payout(state)
    if done is not None:
        return (
            f'<p class="notice" id="appeal-refund{suffix}">An appeal payment arrived {why}, '
            f"so it was refunded: {esc(done)}.</p>"
        )
    return (
        f'<p class="notice" id="appeal-refund{suffix}">An appeal payment arrived {why}, '
        "so it bought nothing and is refunded: "
        f'<strong id="appeal-refund-sats{suffix}">'
        f"{esc(refund.get('amount_sats', APPEAL_SATS))}</strong> sat. Scan it with your "
        "wallet, or claim it on the recovery page.</p>"
        f'<p class="mono" id="appeal-refund-lnurl{suffix}">{esc(lnurl)}</p>'
        f'<p>Refund secret <span class="mono" id="appeal-refund-secret{suffix}">{esc(secret)}'
        "</span></p>"
        + recover_button(payment_id, secret, f"appeal-recover-link{suffix}", "Claim on /recover")
    )


async def _appeal_part(desk: HeldRequestDesk, hold: HeldRequest, token: str) -> str:
    payment = await desk.appeal_payment(hold)
    unpaid = payment is not None and payment.status is PaymentStatus.UNPAID
    if payment is not None and unpaid and payment.expires_at > time.time():
        return _invoice_part(payment, token)
    ask = (
        f"<h2>Ask for human review ({APPEAL_SATS} sat)</h2>"
        "<p>A person looks at the request. If it is legitimate they release it and it is "
        "sent; otherwise it is refunded. Tell the reviewer what the message is for "
        "(optional):</p>"
        '<form method="post" action="/appeal">'
        f'<input type="hidden" name="t" value="{esc(token)}">'
        '<label>Note for the reviewer <textarea name="note" id="note" rows="3" '
        'maxlength="2000"></textarea></label>'
        f'<button type="submit" id="request-review">Ask for review · {APPEAL_SATS} sat'
        "</button></form>"
    )
    return ask


def _invoice_part(payment: Payment, token: str) -> str:
    return (
        f"<h2>Pay {esc(payment.amount_msat // 1000)} sat to ask for review</h2>"
        '<div class="qr" id="appeal-qr">'
        f"{qr_svg('lightning:' + payment.bolt11.upper(), 'Invoice QR')}</div>"
        f'<p class="mono" id="appeal-invoice">{esc(payment.bolt11)}</p>'
        f'<p><a href="lightning:{esc(payment.bolt11)}" id="wallet-link">Open in wallet</a></p>'
        + _check_button(token, "I have paid · check")
    )


def _check_button(token: str, label: str = "Check again") -> str:
    return (
        f'<form method="post" action="{VIEW_PATH}">'
        f'<input type="hidden" name="t" value="{esc(token)}">'
        f'<button type="submit" id="check">{esc(label)}</button></form>'
    )


def _refund_part(refund: dict[str, Any], hold: HeldRequest, state: str | None) -> str:
    secret = str(refund.get("refund_secret", ""))
    lnurl = str(refund.get("lnurl_withdraw", ""))
    sats = refund.get("amount_sats", hold.amount_msat // 1000)
    what = (
        "The request was released but its delivery failed, so it was refunded."
        if hold.status == "failed"
        else "The request was not sent and its payment was refunded."
    )
    done = _payout(state)
    if done is not None:
        return (
            f'<p id="refunded">{esc(what)} The refund of <strong id="refund-sats">{esc(sats)}'
            f'</strong> sat is <strong id="refund-state">{esc(done)}</strong>.</p>'
        )
    return (
        f'<p id="refunded">{esc(what)} Refund of <strong id="refund-sats">{esc(sats)}'
        "</strong> sat: scan it with your wallet, or claim it on the recovery page.</p>"
        f'<div class="qr" id="refund-qr">{qr_svg("lightning:" + lnurl.upper(), "Refund QR")}'
        f'</div><p class="mono" id="refund-lnurl">{esc(lnurl)}</p>'
        f'<p>Refund secret <span class="mono" id="refund-secret">{esc(secret)}</span></p>'
        + recover_button(hold.payment_id, secret, "recover-link", "Claim on /recover")
    )


def _payout(state: str | None) -> str | None:
    """How far a claimed refund's payout is, in the page's words; None while the refund
    waits to be claimed (the page then shows its link)."""
    if state == "paid":
        return "paid out to your wallet"
    if state == "claiming":
        return "being paid out"
    return None


def _deadline(hold: HeldRequest) -> str:
    if hold.open:
        return (
            f"refunded automatically after {esc(_when(hold.eligible_at))} if nobody decides "
            "before then."
        )
    if hold.resolved_at is None:
        return "being decided."
    return f"decided at {esc(_when(hold.resolved_at))}."


_CHANNELS = {"email": "e-mail", "sms": "SMS", "ai_call": "AI call", "e_signature": "e-signature"}


def _when(ts: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))
