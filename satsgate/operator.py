"""The node operator's side: the operator token, the ledger report as text, and the
operator's figures (ledger, payouts that need a look, engines).

The token is 32 random bytes (hex) in ``<data_dir>/operator_token``, mode 0600, created
at first start; ``satsgate operator-token`` prints it. It is the operator's own key and
never one a payer holds: payers' credentials are per-payment macaroons and refund
secrets, none of which opens anything here. The API takes it as a bearer token; the
dashboard's login form opens a server-side session (satsgate.web.operator_signin), so
the token itself is never stored in a browser. ``satsgate operator-token --rotate`` (or
the CLN ``satsgate-operator-token rotate=true``) replaces it: the old token and every
session opened with it stop working at once, without a restart.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from satsgate.config.secret_file import read_or_create_secret
from satsgate.constant_time import texts_equal
from satsgate.engines import Engines
from satsgate.store import Store

TOKEN_FILE = "operator_token"


def token_path(data_dir: Path) -> Path:
    return data_dir / TOKEN_FILE


def ensure_operator_token(data_dir: Path) -> str:
    """The operator token, created (0600) the first time."""
    path = token_path(data_dir)
    token = read_or_create_secret(path, lambda: secrets.token_hex(32))
    if len(token) < 32:
        raise ValueError(f"{path} does not hold an operator token; delete it to make a new one")
    return token


def rotate_operator_token(data_dir: Path) -> str:
    """A new operator token in place of the old one (0600, replaced atomically: a reader
    sees the old file or the new one, never a half-written one)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = token_path(data_dir)
    fresh = path.with_name(f"{TOKEN_FILE}.{secrets.token_hex(8)}.tmp")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    os.replace(fresh, path)
    return ensure_operator_token(data_dir)


def token_matches(token: str, offered: str) -> bool:
    return texts_equal(offered.strip(), token)


async def operator_report(store: Store, engines: Engines | None) -> dict[str, Any]:
    """Everything the dashboard shows, as JSON: the ledger, payouts to look at, engines."""
    report = await store.ledger.report()
    report["refund_payouts"] = await store.refunds.payout_problems()
    # Communications held for review: within the ledger's held (their payments serve).
    report["held_communications"] = await store.held_requests.totals()
    report["session_payouts"] = await store.sessions.payout_problems()
    if engines is not None:
        report["engines"] = [
            {
                "engine": s.name,
                "available": s.available,
                "source": s.source,
                "label": s.label,
                "reason": s.reason,
            }
            for s in engines.statuses()
        ]
    return report


_PAYOUT_UNDER_WAY = "payout under way or unknown"


def payout_reason(payout: dict[str, Any]) -> str:
    """Why a payout to look at is not done: the node's last error, else that it is under
    way (or its outcome unknown)."""
    return str(payout["payout_error"] or _PAYOUT_UNDER_WAY)


def _payouts_to_look_at(
    kind: str, payouts: list[dict[str, Any]], describe: Callable[[dict[str, Any]], str]
) -> list[str]:
    """``satsgate ledger``'s list of ``kind`` payouts to look at (none: no lines): each
    payout as ``describe`` says, then its reason."""
    if not payouts:
        return []
    return [
        f"{kind} payouts to look at: {len(payouts)}",
        *(f"  {describe(item)}: {payout_reason(item)}" for item in payouts),
    ]


def sats_text(value: int) -> str:
    """An msat amount in sats for people: "1,234 sat", or "2.500 sat" with a part of one."""
    sats, rest = divmod(value, 1000)
    return f"{sats:,}.{rest:03d} sat" if rest else f"{sats:,} sat"


def _ecash_lines(e: dict[str, Any]) -> list[str]:
    """Cashu ecash (see satsgate/store/ecash.py), when any was taken."""
    if not e.get("tokens_received") and not e.get("melts"):
        return []
    return [
        "",
        "ecash (Cashu, sat; its calls are in the equation above as payments):",
        f"  tokens received {e['tokens_received']}: {e['received_sat']} = kept {e['kept_sat']}"
        f" + change given back {e['change_sat']} + mint swap fees {e['swap_fees_sat']}",
        f"  refunded in ecash {e['refunded_sat']} ({e['refunds']} tokens)",
        f"  melted into the node {e['melted_sat']} in {e['melts']} melts"
        f" (fees {e['melt_fees_sat']}, fee reserve back {e['melt_change_sat']};"
        " seen settled at the node"
        f" {e['melted_settled_sat']})",
        f"  held at mints {e['held_sat']}, melting {e['melting_sat']}",
    ]


def ledger_text(report: dict[str, Any]) -> str:
    """``satsgate ledger``: the equation in total and per day, refunds by state, fees."""
    t = report["totals"]
    lines = [
        "received = earned + refunded + held + open  (msat)",
        "",
        f"{'':<12}{'received':>14}{'earned':>14}{'refunded':>14}{'held':>12}{'open':>12}",
    ]

    def row(label: str, f: dict[str, Any]) -> str:
        return (
            f"{label:<12}{f['received_msat']:>14}{f['earned_msat']:>14}"
            f"{f['refunded_msat']:>14}{f['held_msat']:>12}{f['open_msat']:>12}"
        )

    for day in report["per_day"]:
        lines.append(row(day["day"], day))
    lines.append(row("total", t))
    lines += [
        "",
        # Every payment received counts here, refunded and unused ones too: the count
        # belongs to what was received, not to what was earned.
        f"received: {sats_text(t['received_msat'])} from {t['payments']} payments;"
        f" earned: {sats_text(t['earned_msat'])}",
        "refunds by state:",
    ]
    for state in ("open", "claiming", "paid", "expired"):
        lines.append(
            f"  {state:<9}{t[f'refunds_{state}']:>6}  {t[f'refunds_{state}_msat']:>14} msat"
        )
    lines.append(f"routing fees paid on refunds: {t['refund_fees_msat']} msat")
    lines.append(
        f"hold invoices canceled (never charged, outside the equation): "
        f"{t['canceled_holds']} ({t['canceled_holds_msat']} msat)"
    )
    lines += _payouts_to_look_at(
        "refund",
        report.get("refund_payouts") or [],
        lambda item: f"{item['refund_id']} {item['amount_msat']} msat {item['status']}",
    )
    lines.append(
        f"payment sessions: {t['sessions_open']} open of {t['sessions']}; balances held "
        f"{t['session_balances_msat']} msat; refunds {t['session_refunds_msat']} msat "
        f"({t['session_refunds_paid_msat']} paid out, fees {t['session_payout_fees_msat']} msat)"
    )
    lines += _payouts_to_look_at(
        "session",
        report.get("session_payouts") or [],
        lambda item: (
            f"{item['session_id']} {item['refund_msat']} msat {item['payout_status']}"
            f" after {item['payout_attempts']} attempt(s)"
        ),
    )
    lines.append(
        f"routing fees paid on all payouts (the operator's cost, outside the equation): "
        f"{t['payout_fees_msat']} msat; earned less those fees: "
        f"{t['earned_msat'] - t['payout_fees_msat']} msat"
    )
    lines += _ecash_lines(report.get("ecash") or {})
    if (
        t["received_msat"]
        != t["earned_msat"] + t["refunded_msat"] + t["held_msat"] + t["open_msat"]
    ):  # pragma: no cover - the ledger is built to balance
        lines.append("WARNING: the ledger does not balance")
    return "\n".join(lines)
