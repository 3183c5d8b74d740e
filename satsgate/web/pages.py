"""Small self-contained HTML pages: the operator's dashboard (``/operator``, behind the
operator token) and the payer's refund recovery (``/recover``).

Like the checkout page: server-rendered, CSS inline under a per-response nonce, no
script (but the appeal page's few lines that read its link's fragment, under the same
nonce), no external resource (the chart is inline SVG drawn here, the QR code segno's
inline SVG); every value is HTML-escaped.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

import segno
from aiohttp import web

ICON = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Crect width='16' height='16' rx='4' fill='%23f7931a'/%3E"
    "%3Cpath d='M9 2 4 9h3l-1 5 5-7H8z' fill='%231c1b19'/%3E%3C/svg%3E"
)

CSS = """
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,sans-serif;background:#f6f4ef;color:#1c1b19}main{max-width:1040px;margin:0 auto;
padding:24px 20px 60px}header{display:flex;gap:10px;align-items:center;font-weight:700;
font-size:18px;margin-bottom:18px}.bolt{color:#f7931a}h1{font-size:24px;margin:0 0 12px}
h2{font-size:17px;margin:28px 0 8px}section.card{background:#fff;border:1px solid #e4e0d6;
border-radius:12px;padding:16px 18px;margin-bottom:16px}table{border-collapse:collapse;
width:100%}th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #eee;
vertical-align:top}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.figures{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px}
.figure{background:#fff;border:1px solid #e4e0d6;border-radius:12px;padding:12px 14px}
.figure .label{color:#6b665c;font-size:13px}.figure .value{font-size:20px;font-weight:700;
font-variant-numeric:tabular-nums}.figure .sub{color:#6b665c;font-size:12px}
.ok{color:#1f7a3a}.bad{color:#b3261e}.muted{color:#6b665c}form{display:grid;gap:10px;
max-width:560px}form+form{margin-top:22px}label{display:grid;gap:4px;font-weight:600}input,textarea{font:inherit;
padding:8px 10px;border:1px solid #cfc9bb;border-radius:8px;width:100%}
button{font:inherit;font-weight:700;padding:9px 14px;border:0;border-radius:8px;
background:#f7931a;color:#1c1b19;cursor:pointer;justify-self:start}
.qr svg{width:240px;height:240px}.mono{font-family:ui-monospace,monospace;
word-break:break-all;font-size:13px}.notice{padding:10px 12px;border-radius:8px;
background:#fff4e0;border:1px solid #f0c987}.error{background:#fde8e6;border-color:#f1b0a9}
svg.chart text{font:11px system-ui,sans-serif;fill:#6b665c}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0 0 6px}#holds td{font-size:13px}
#holds td:first-child{min-width:190px}#holds form{display:block;margin:0 0 6px}
#holds .mono{word-break:normal}
"""


def esc(value: Any) -> str:
    return html.escape(str(value))


def page(title: str, body: str, status: int = 200, script: str = "") -> web.Response:
    """A page; ``script``, when given, runs under the response's nonce (the only script
    the page's Content-Security-Policy lets run)."""
    nonce = secrets.token_urlsafe(16)
    doc = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f'<link rel="icon" href="{ICON}"><title>{esc(title)} · satsgate</title>'
        f'<style nonce="{nonce}">{CSS}</style></head><body><main>'
        '<header><span class="bolt" aria-hidden="true">⚡</span><span>satsgate</span></header>'
        f"{body}</main>"
        + (f'<script nonce="{nonce}">{script}</script>' if script else "")
        + "</body></html>"
    )
    resp = web.Response(text=doc, status=status, content_type="text/html", charset="utf-8")
    resp.headers["Content-Security-Policy"] = (
        f"default-src 'none'; style-src 'nonce-{nonce}'; img-src data:; base-uri 'none'; "
        + (f"script-src 'nonce-{nonce}'; " if script else "")
        + "form-action 'self'; frame-ancestors 'none'"
    )
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    numeric: set[int] | None = None,
    table_id: str = "",
) -> str:
    numeric = numeric or set()
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{esc(c)}</td>' if i in numeric else f"<td>{esc(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    ident = f' id="{esc(table_id)}"' if table_id else ""
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def qr_svg(data: str, title: str) -> str:
    return str(
        segno.make(data, error="m").svg_inline(
            scale=4, border=2, dark="#111111", light="#ffffff", omitsize=True, title=title
        )
    )


def earnings_chart(days: Sequence[dict[str, Any]], width: int = 960, height: int = 220) -> str:
    """Earned (and refunded) msat per day as an inline SVG bar chart, the last 60 days
    that had payments. Each bar carries its figure in a <title> and a data attribute."""
    days = list(days)[-60:]
    if not days:
        return '<p class="muted" id="chart-empty">No payments yet.</p>'
    pad_left, pad_bottom, pad_top = 70, 28, 12
    plot_w, plot_h = width - pad_left - 10, height - pad_bottom - pad_top
    top = max(max(d["earned_msat"], d["refunded_msat"], 0) for d in days) or 1
    slot = plot_w / len(days)
    bar = max(2.0, min(36.0, slot * 0.38))
    parts = [
        f'<svg class="chart" id="earnings-chart" role="img" viewBox="0 0 {width} {height}"'
        f' width="100%" xmlns="http://www.w3.org/2000/svg"><title>Earned per day</title>',
        f'<line x1="{pad_left}" y1="{pad_top + plot_h}" x2="{width - 10}"'
        f' y2="{pad_top + plot_h}" stroke="#cfc9bb"/>',
        f'<text x="{pad_left - 6}" y="{pad_top + 10}" text-anchor="end">'
        f"{esc(top // 1000)} sat</text>",
        f'<text x="{pad_left - 6}" y="{pad_top + plot_h}" text-anchor="end">0</text>',
    ]
    for i, d in enumerate(days):
        x = pad_left + i * slot + slot / 2
        for offset, key, colour in (
            (-bar, "earned_msat", "#f7931a"),
            (0, "refunded_msat", "#8a8474"),
        ):
            value = max(int(d[key]), 0)
            h = plot_h * value / top
            parts.append(
                f'<rect class="bar {key[:-5]}" data-day="{esc(d["day"])}" data-msat="{value}"'
                f' x="{x + offset:.1f}" y="{pad_top + plot_h - h:.1f}" width="{bar:.1f}"'
                f' height="{h:.1f}" fill="{colour}"><title>{esc(d["day"])}: {key[:-5]}'
                f" {value} msat</title></rect>"
            )
        if len(days) <= 14 or i % max(1, len(days) // 10) == 0:
            parts.append(
                f'<text x="{x:.1f}" y="{height - 8}" text-anchor="middle">'
                f"{esc(d['day'][5:])}</text>"
            )
    parts.append("</svg>")

    def swatch(colour: str) -> str:
        return (
            f'<svg width="10" height="10" aria-hidden="true"><rect width="10" height="10"'
            f' fill="{colour}"/></svg>'
        )

    legend = (
        f'<p class="muted">{swatch("#f7931a")} earned &nbsp; {swatch("#8a8474")} refunded,'
        " per day (msat; hover a bar for its figure)</p>"
    )
    return "".join(parts) + legend
