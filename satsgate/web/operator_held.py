"""The operator's held communications and do-not-contact list.

Pages (the dashboard's session cookie, satsgate.web.operator_signin; every form carries
the session's CSRF token, an HMAC keyed with the session id, checked with the cookie):

- ``GET /operator/holds``: held requests, review requested first, with what was screened
  and why; Release / Refund buttons (``POST /operator/holds/{id}/release|refund``);
- the do-not-contact list with an add form (``POST /operator/do-not-contact``) and a
  remove button per entry (``POST /operator/do-not-contact/remove``).

JSON API (``Authorization: Bearer <operator token>``; the CLI uses it):

- ``GET /api/operator/holds``; ``POST /api/operator/holds/{id}/release``,
  ``POST /api/operator/holds/{id}/refund`` (409 when already resolved);
- ``GET /api/operator/do-not-contact``; ``POST`` with ``{"address": ...}`` adds,
  ``DELETE /api/operator/do-not-contact/{address}`` removes.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from satsgate.domain.addresses import normalise_address
from satsgate.edge.http import read_form
from satsgate.outreach.held_requests import HeldRequestDesk, HoldError, Outcome
from satsgate.store import Store
from satsgate.store.held_requests import HeldRequest
from satsgate.web.operator_signin import OPERATOR, unauthorized
from satsgate.web.pages import esc, page, table


def hold_document(hold: HeldRequest, appeal_url: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "hold_id": hold.hold_id,
        "payment_id": hold.payment_id,
        "service": hold.service,
        "channel": hold.channel,
        "status": hold.status,
        "reasons": list(hold.reasons),
        "amount_msat": hold.amount_msat,
        "created_at": hold.created_at,
        "refund_eligible_at": hold.eligible_at,
        "review_requested": hold.appeal_paid_at is not None,
        "appeal_note": hold.appeal_note,
        "text": hold.outreach_text,
        "resolution": hold.resolution,
        "resolved_by": hold.resolved_by,
        "resolved_at": hold.resolved_at,
        "job_id": hold.job_id,
    }
    if appeal_url is not None:
        doc["appeal_url"] = appeal_url
    return doc


async def _decide(desk: HeldRequestDesk, hold_id: str, action: str) -> Outcome | None:
    """The operator's release or refund of a hold (None: no such action). Shielded: a
    dropped connection must not stop it half-way. HoldError when it cannot be done."""
    if action == "release":
        return await asyncio.shield(desk.release(hold_id, by="operator"))
    if action == "refund":
        return await asyncio.shield(desk.refund(hold_id, by="operator"))
    return None


class _HoldRoutes:
    """The operator's held communications and do-not-contact list: a JSON API (the
    operator token as a bearer; listing also with a dashboard session) and pages (a
    dashboard session, forms with its CSRF token)."""

    def __init__(
        self, holds_key: web.AppKey[HeldRequestDesk], store_key: web.AppKey[Store]
    ) -> None:
        self.holds_key, self.store_key = holds_key, store_key

    def bearer(self, request: web.Request) -> bool:
        return request.app[OPERATOR].bearer(request)

    def cookie(self, request: web.Request) -> bool:
        return request.app[OPERATOR].session(request) is not None

    async def form_checked(self, request: web.Request) -> dict[str, str] | None:
        """The posted form, when the cookie and its CSRF token are a live session's."""
        if not self.cookie(request):
            return None
        form = await read_form(request)
        if not request.app[OPERATOR].form_allowed(request, form.get("csrf", "")):
            return None
        return form

    # -- JSON API ------------------------------------------------------------------------

    async def api_list(self, request: web.Request) -> web.Response:
        if not request.app[OPERATOR].authorized(request):
            return unauthorized()
        desk = request.app[self.holds_key]
        holds = await desk.listing(open_only=request.query.get("open") == "1")
        return web.json_response(
            {"holds": [hold_document(h, desk.appeal_url(h.hold_id)) for h in holds]},
            headers={"Cache-Control": "no-store"},
        )

    async def api_act(self, request: web.Request) -> web.Response:
        if not self.bearer(request):
            return unauthorized()
        return await self._act(request, request.match_info["action"])

    async def _act(self, request: web.Request, action: str) -> web.Response:
        hold_id = request.match_info["hold_id"]
        try:
            outcome = await _decide(request.app[self.holds_key], hold_id, action)
            if outcome is None:
                return web.json_response({"error": f"unknown action {action}"}, status=404)
        except HoldError as exc:
            return web.json_response({"error": str(exc), "hold_id": hold_id}, status=409)
        return web.json_response(outcome.as_dict(), headers={"Cache-Control": "no-store"})

    async def api_dnc_list(self, request: web.Request) -> web.Response:
        if not request.app[OPERATOR].authorized(request):
            return unauthorized()
        entries = await request.app[self.store_key].do_not_contact.listing()
        return web.json_response({"entries": entries}, headers={"Cache-Control": "no-store"})

    async def api_dnc_add(self, request: web.Request) -> web.Response:
        if not self.bearer(request):
            return unauthorized()
        try:
            body = await request.json()
            address = normalise_address(str(body["address"]))
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            return web.json_response({"error": f"send {{'address': ...}}: {exc}"}, status=400)
        added = await request.app[self.store_key].do_not_contact.add(address, "operator")
        return web.json_response({"address": address, "added": added})

    async def api_dnc_remove(self, request: web.Request) -> web.Response:
        if not self.bearer(request):
            return unauthorized()
        try:
            address = normalise_address(request.match_info["address"])
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        removed = await request.app[self.store_key].do_not_contact.remove(address)
        return web.json_response({"address": address, "removed": removed})

    # -- pages ---------------------------------------------------------------------------

    async def holds_page(self, request: web.Request) -> web.Response:
        session_id = request.app[OPERATOR].session(request)
        if session_id is None:
            raise web.HTTPSeeOther("/operator")
        desk = request.app[self.holds_key]
        holds = await desk.listing()
        entries = await request.app[self.store_key].do_not_contact.listing()
        notice = request.query.get("done", "")
        return page(
            "Held communications",
            _holds_body(holds, entries, request.app[OPERATOR].csrf_token(session_id), notice),
        )

    async def page_act(self, request: web.Request) -> web.Response:
        form = await self.form_checked(request)
        if form is None:
            return page("Forbidden", "<p>Sign in at /operator first.</p>", status=403)
        action = request.match_info["action"]
        hold_id = request.match_info["hold_id"]
        try:
            outcome = await _decide(request.app[self.holds_key], hold_id, action)
            if outcome is None:
                raise web.HTTPNotFound()
            done = f"{hold_id} {outcome.status}"
        except HoldError as exc:
            done = str(exc)
        raise web.HTTPSeeOther(f"/operator/holds?{_query(done)}")

    async def page_dnc(self, request: web.Request) -> web.Response:
        form = await self.form_checked(request)
        if form is None:
            return page("Forbidden", "<p>Sign in at /operator first.</p>", status=403)
        repo = request.app[self.store_key].do_not_contact
        remove = request.path.endswith("/remove")
        try:
            address = normalise_address(form.get("address", ""))
        except ValueError as exc:
            raise web.HTTPSeeOther(f"/operator/holds?{_query(str(exc))}") from None
        if remove:
            await repo.remove(address)
            done = f"{address} removed from the do-not-contact list"
        else:
            await repo.add(address, "operator")
            done = f"{address} is on the do-not-contact list"
        raise web.HTTPSeeOther(f"/operator/holds?{_query(done)}")


def install(
    app: web.Application,
    *,
    holds_key: web.AppKey[HeldRequestDesk],
    store_key: web.AppKey[Store],
) -> None:
    routes = _HoldRoutes(holds_key, store_key)
    r = app.router
    r.add_get("/api/operator/holds", routes.api_list)
    r.add_post("/api/operator/holds/{hold_id}/{action}", routes.api_act)
    r.add_get("/api/operator/do-not-contact", routes.api_dnc_list)
    r.add_post("/api/operator/do-not-contact", routes.api_dnc_add)
    r.add_delete("/api/operator/do-not-contact/{address}", routes.api_dnc_remove)
    r.add_get("/operator/holds", routes.holds_page)
    r.add_post("/operator/holds/{hold_id}/{action}", routes.page_act)
    r.add_post("/operator/do-not-contact", routes.page_dnc)
    r.add_post("/operator/do-not-contact/remove", routes.page_dnc)


def _query(done: str) -> str:
    from urllib.parse import urlencode

    return urlencode({"done": done[:300]})


def _note(note: str | None) -> str:
    return f"<p><strong>Payer:</strong> {esc(note)}</p>" if note else ""


def _when(ts: int | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def _holds_body(
    holds: list[HeldRequest], entries: list[dict[str, Any]], csrf: str, notice: str
) -> str:
    rows = []
    for h in holds:
        actions = ""
        if h.open:
            actions = "".join(
                f'<form method="post" action="/operator/holds/{esc(h.hold_id)}/{a}">'
                f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
                f'<button type="submit" id="{a}-{esc(h.hold_id)}">{a.title()}</button></form>'
                for a in ("release", "refund")
            )
        text = (h.outreach_text or "(evidence cleared)")[:600]
        rows.append(
            f'<tr id="row-{esc(h.hold_id)}" data-status="{esc(h.status)}">'
            f'<td><span class="mono">{esc(h.hold_id)}</span><br>{esc(h.service)} · '
            f"{esc(h.channel)}<br>{esc(h.amount_msat // 1000)} sat</td>"
            f'<td class="status">{esc(h.status.replace("_", " "))}'
            f"{'<br>by ' + esc(h.resolved_by) if h.resolved_by else ''}</td>"
            f"<td>{esc(', '.join(h.reasons))}</td>"
            f'<td><pre class="mono">{esc(text)}</pre>'
            f"{_note(h.appeal_note)}</td>"
            f"<td>{esc(_when(h.created_at))}<br>auto-refund {esc(_when(h.eligible_at))}</td>"
            f"<td>{actions}</td></tr>"
        )
    body = "".join(rows) or '<tr><td colspan="6" class="muted">none</td></tr>'
    holds_table = (
        '<table id="holds"><thead><tr><th>request</th><th>status</th><th>reasons</th>'
        "<th>what was screened</th><th>held</th><th></th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )
    dnc_rows = table(
        ("address", "source", "since"),
        ((e["address"], e["source"], _when(int(e["created_at"]))) for e in entries),
        table_id="do-not-contact",
    )
    flash = f'<p class="notice" id="done">{esc(notice)}</p>' if notice else ""
    return (
        '<h1>Held communications</h1><p class="muted">Review requested first. Release sends '
        "the request as it was paid (the do-not-contact list still applies); Refund gives "
        "the payment back as an LNURL-withdraw refund. Unresolved holds are refunded 24 "
        "hours after they were held.</p>"
        f'{flash}<section class="card">{holds_table}</section>'
        '<section class="card"><h2>Do-not-contact list</h2>'
        f"{dnc_rows}"
        '<form method="post" action="/operator/do-not-contact">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<label>Number (E.164) or e-mail address <input name="address" id="dnc-address" '
        'required autocomplete="off"></label>'
        '<button type="submit" id="dnc-add">Add</button></form>'
        '<form method="post" action="/operator/do-not-contact/remove">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<label>Remove <input name="address" id="dnc-remove-address" required '
        'autocomplete="off"></label><button type="submit" id="dnc-remove">Remove</button>'
        "</form></section>"
        '<p><a href="/operator">Back to the dashboard</a></p>'
    )
