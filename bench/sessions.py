"""Payment sessions against L402 on the same service: a session bearer call vs an L402
paid call of the bench's no-op service (``POST /bench/noop``, 1 sat), and what the
session challenge adds to the 402.

    python bench/sessions.py [--rounds 3] [--duration 5] [--connections 32]

Scenarios, interleaved per round (wrk -t1, its own process, loopback):

- ``session_bearer``: one open session, every request carries the same bearer credential
  (``Authorization: Payment <b64url JSON>``, action ``bearer``): credential decode, the
  challenge's HMAC, sha256(preimage) == sessionId, the debit (one conditional UPDATE ...
  RETURNING the balance), the handler, the receipt. No invoice, no payment per call.
- ``l402_paid``: the same call with a new L402 credential per request, each one seeded
  as a paid payment beforehand (as bench/run.py's ``paid_noop``): macaroon decode +
  signature + caveats + the spend. A real L402 client also pays one 402 (an invoice) and
  one Lightning payment per call, which this leaves out in L402's favour.
- both again at one connection (latency, not queueing);
- ``challenge_402``: a 402 of the same service (L402 + charge + session challenges: two
  invoices, two rows) and ``challenge_402_no_session`` on a second server started with the
  session challenge turned off, for the cost of offering sessions.

Checks: every bearer request counted 200 was debited (the session's spent equals the
200s, plus at most one call in flight per connection when wrk stopped), the balance
never went below zero, and the store's ledger balances. Writes
``bench/results/sessions.json``, prints a table.

``--serve`` (internal): run one bench server (the real app plus /bench/noop, see
satsgate_server.py) with a deposit large enough for the whole run.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import re
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from run import (
    RESULTS,
    WrkResult,
    environment,
    free_port,
    http,
    log,
    run_wrk,
    start_server,
)
from satsgate_server import NOOP_PRICE_MSAT, NOOP_SLUG, NOOP_SPEC, NoopParams, build_app
from seed import seed, spec_for

from satsgate.config.settings import Settings, ensure_server_secret
from satsgate.lightning.invoices import sign_invoice

BENCH = Path(__file__).resolve().parent
DEPOSIT_SAT = 5_000_000  # 5 M calls of the 1-sat no-op: never runs dry in a bench


def serve(port: int, data_dir: Path, offer_sessions: bool) -> None:
    from _serve import serve as serve_app

    from satsgate.server.app import GATE

    logging.basicConfig(level=logging.WARNING)
    settings = Settings(
        host="127.0.0.1",
        port=port,
        data_dir=data_dir,
        challenge_rate_per_min=0,
        session_deposit_multiplier=DEPOSIT_SAT,
        session_max_deposit_sat=DEPOSIT_SAT,
    )
    app = build_app(settings)
    if not offer_sessions:

        async def no_sessions(app: Any) -> None:
            app[GATE].sessions = None

        app.on_startup.append(no_sessions)
    serve_app(app, "127.0.0.1", port)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


@dataclass(frozen=True)
class OpenedSession:
    """An open session on a bench server: what its bearer credentials are built from."""

    session_id: str
    echoed: dict[str, str]  # the session challenge, echoed
    preimage: str
    token: str | None  # the session token the open answered (None before the binding)

    def bearer(self, nonce: int | None = None) -> str:
        """A bearer credential's Authorization value; ``nonce`` makes it a distinct one
        (an extra payload member the server ignores), as a client that builds a fresh
        credential per call sends."""
        payload: dict[str, Any] = {
            "action": "bearer",
            "sessionId": self.session_id,
            "preimage": self.preimage,
        }
        if self.token is not None:
            payload["token"] = self.token
        if nonce is not None:
            payload["n"] = nonce
        return credential(self.echoed, payload)


def credential(echoed: dict[str, str], payload: dict[str, Any]) -> str:
    doc = {"challenge": echoed, "payload": payload}
    return "Payment " + b64url(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


def open_session(url: str) -> OpenedSession:
    """Open a session on the no-op service through the dev node, and make one bearer
    call with it."""
    wants_session = {"Accept-Payment": "lightning/charge, lightning/session"}
    status, _, www = http("POST", url + "/bench/noop", "{}", wants_session)
    assert status == 402, status
    header = next(v for v in www if 'intent="session"' in v)
    challenge = dict(re.findall(r'(\w+)="([^"]*)"', header))
    request = unb64url(challenge["request"])
    assert request["depositAmount"] == str(DEPOSIT_SAT), request
    status, paid, _ = http(
        "POST", url + "/api/dev/pay", json.dumps({"invoice": request["depositInvoice"]})
    )
    assert status == 200, paid
    refund_to = sign_invoice(
        network="regtest",
        amount_msat=0,
        payment_hash=secrets.token_hex(32),
        payment_secret=secrets.token_hex(32),
        description="bench refund",
        expiry_s=86_400,
        private_key_hex=secrets.token_hex(32),
    )
    echoed = {k: challenge[k] for k in ("id", "realm", "method", "intent", "request", "expires")}
    opened = credential(
        echoed, {"action": "open", "preimage": paid["preimage"], "returnInvoice": refund_to}
    )
    req = urllib.request.Request(
        url + "/bench/noop",
        data=b"{}",
        method="POST",
        headers={"Authorization": opened, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200, resp.status
        token = resp.headers.get("Payment-Session-Token")
    session = OpenedSession(request["paymentHash"], echoed, paid["preimage"], token)
    status, body, _ = http("POST", url + "/bench/noop", "{}", {"Authorization": session.bearer()})
    assert status == 200 and body == {"ok": True}, body
    return session


def session_spent_msat(db: Path, session_id: str) -> tuple[int, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT spent_msat, deposit_msat FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
    finally:
        conn.close()
    return int(row[0]), int(row[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-session-offer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.port, args.data_dir, not args.no_session_offer)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="satsgate-bench-sessions-"))
    data = tmp / "data"
    servers = []
    try:
        main_server = start_server(
            "satsgate",
            [
                str(BENCH / "sessions.py"),
                "--serve",
                "--port",
                str(free_port()),
                "--data-dir",
                str(data),
            ],
            tmp / "satsgate.log",
        )
        servers.append(main_server)
        plain = start_server(
            "satsgate-no-session",
            [
                str(BENCH / "sessions.py"),
                "--serve",
                "--no-session-offer",
                "--port",
                str(free_port()),
                "--data-dir",
                str(tmp / "data-plain"),
            ],
            tmp / "satsgate-plain.log",
        )
        servers.append(plain)
        url = main_server.url
        session = open_session(url)
        session_id, bearer = session.session_id, session.bearer()
        spent0, deposit = session_spent_msat(Settings(data_dir=data).db_path, session_id)
        settings = ensure_server_secret(Settings(data_dir=data))
        noop_spec = spec_for(NOOP_SLUG, NOOP_SPEC.title, NOOP_PRICE_MSAT, NoopParams())
        rate = 3000.0
        results: list[WrkResult] = []
        bearer_200 = 0
        for rnd in range(args.rounds):
            log(f"round {rnd + 1}/{args.rounds}")
            for conns in (args.connections, 1):
                sfx = "" if conns > 1 else "_c1"
                res = run_wrk(
                    "session_bearer" + sfx,
                    main_server,
                    url + "/bench/noop",
                    "static.lua",
                    ["POST", "{}", "1", bearer],
                    duration=args.duration,
                    connections=conns,
                    threads=1,
                )
                bearer_200 += res.statuses.get("200", 0)
                results.append(res)
                count = int(rate * args.duration * 2) + 50 * conns + 200
                creds = tmp / f"l402-{rnd}-{conns}.creds"
                seed(settings, noop_spec, count, creds)
                res = run_wrk(
                    "l402_paid" + sfx,
                    main_server,
                    url + "/bench/noop",
                    "paid.lua",
                    [str(creds), "/bench/noop", "{}", "1"],
                    duration=args.duration,
                    connections=conns,
                    threads=1,
                )
                rate = max(rate, res.rps * (4 if res.exhausted_threads else 1))
                results.append(res)
            for name, server in (
                ("challenge_402", main_server),
                ("challenge_402_no_session", plain),
            ):
                results.append(
                    run_wrk(
                        name,
                        server,
                        server.url + "/bench/noop",
                        "static.lua",
                        ["POST", "{}", "1", ""],
                        duration=args.duration,
                        connections=args.connections,
                        threads=1,
                    )
                )
        time.sleep(0.5)
        spent, deposit = session_spent_msat(Settings(data_dir=data).db_path, session_id)
        debited_calls = (spent - spent0) // NOOP_PRICE_MSAT
        checks = {
            "bearer_200_counted_by_wrk": bearer_200,
            "bearer_calls_debited": debited_calls,
            "every_200_debited": bearer_200
            <= debited_calls
            <= bearer_200 + args.connections * args.rounds * 2,
            "balance_never_below_zero": 0 <= spent <= deposit,
        }
    finally:
        for server in servers:
            server.stop()
    by_name: dict[str, list[WrkResult]] = {}
    for r in results:
        by_name.setdefault(r.scenario, []).append(r)
    summary = {
        name: {
            "rps_median": statistics.median(r.rps for r in runs),
            "p50_ms_median": statistics.median(r.latency_ms["p50"] for r in runs),
            "p99_ms_median": statistics.median(r.latency_ms["p99"] for r in runs),
            "cpu_us_per_request_median": statistics.median(r.cpu_us_per_request for r in runs),
            "statuses": [r.statuses for r in runs],
        }
        for name, runs in by_name.items()
    }
    doc = {
        "config": vars(args) | {"data_dir": None},
        "environment": environment(),
        "summary": summary,
        "checks": checks,
        "runs": [r.__dict__ for r in results],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sessions.json").write_text(json.dumps(doc, indent=2, default=str))
    print("| scenario | rps (median) | p50 ms | p99 ms | server CPU us/request |")
    print("|---|---:|---:|---:|---:|")
    for name, s in summary.items():
        print(
            f"| {name} | {s['rps_median']:.0f} | {s['p50_ms_median']:.2f} | "
            f"{s['p99_ms_median']:.2f} | {s['cpu_us_per_request_median']:.0f} |"
        )
    print(json.dumps(checks))
    ok = checks["every_200_debited"] and checks["balance_never_below_zero"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    sys.exit(main())
