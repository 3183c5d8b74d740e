"""Lightning Labs' l402sdk buying calls, run by tests/system/test_interop_clients.py in a process of
its own: the SDK's calls block in Rust without releasing the GIL, which would stop a
satsgate served from the same process.

    python tests/l402sdk_buyer.py <LND REST url> <hex macaroon> <max sats per call> <url>
        <json body> [<json body> ...]

POSTs each body to <url> with one ``L402Client.with_lnd_rest`` client, one after the
other, and prints one JSON line per call (status, paid, cached_token, the receipt, the
body), then ``{"total_spent": n}``. An SDK error prints ``{"error": "..."}`` and stops.
Not part of satsgate: a payer, for the tests only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import l402


def main(argv: list[str]) -> None:
    lnd_url, macaroon, max_sats, url, *bodies = argv
    client = l402.L402Client.with_lnd_rest(
        lnd_url, macaroon, budget=l402.Budget(per_request_max=int(max_sats))
    )
    for body in bodies:
        try:
            resp = client.post(url, body)
        except Exception as exc:  # the SDK raises RuntimeError subclasses of its own
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return
        receipt: dict[str, Any] | None = None
        if resp.receipt is not None:
            receipt = {
                "amount_sats": resp.receipt.amount_sats,
                "payment_hash": resp.receipt.payment_hash,
                "preimage": resp.receipt.preimage,
                "response_status": resp.receipt.response_status,
            }
        answer = {
            "status": resp.status,
            "paid": resp.paid,
            "cached_token": resp.cached_token,
            "receipt": receipt,
            "body": resp.text(),
        }
        print(json.dumps(answer), flush=True)
    print(json.dumps({"total_spent": client.total_spent()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
