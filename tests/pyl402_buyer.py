"""pyl402 buying calls, run by tests/system/test_interop_clients.py with the Python of an
environment of its own (pyl402 0.1.2 pins httpx<0.28, which cannot share satsgate's).

    <pyl402 venv>/bin/python tests/pyl402_buyer.py <satsgate url> <path> <json body> ...

POSTs each body to <satsgate url><path> with one ``pyl402.client.L402Client`` and its
in-memory token store (a token per URL), one after the other; its wallet pays through the
dev node's ``/api/dev/pay``. Prints one JSON line per call (status, the invoices paid
during it, the body's length), then ``{"paid": n}``. Not part of satsgate: a payer, for
the tests only.
"""

from __future__ import annotations

import json
import sys

import httpx
from pyl402.client.l402 import L402Client
from pyl402.token_store.token_store import MemoryTokenStore
from pyl402.wallet.wallet import PaymentResult, Wallet


class DevNodeWallet(Wallet):  # type: ignore[misc]
    """pyl402's wallet interface over the dev node's pay endpoint."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.paid: list[str] = []

    def pay_invoice(self, invoice: str) -> PaymentResult:
        resp = httpx.post(f"{self.base_url}/api/dev/pay", json={"invoice": invoice}, timeout=30)
        if resp.status_code != 200:
            return PaymentResult("", False, resp.text)
        self.paid.append(invoice)
        return PaymentResult(resp.json()["preimage"], True)


def main(argv: list[str]) -> None:
    base_url, path, *bodies = argv
    wallet = DevNodeWallet(base_url)
    with L402Client(wallet, MemoryTokenStore(), timeout=60) as client:
        for body in bodies:
            before = len(wallet.paid)
            resp = client.post(f"{base_url}{path}", json=json.loads(body))
            paid = wallet.paid[before:]
            line = {"status": resp.status_code, "paid": paid, "bytes": len(resp.content)}
            print(json.dumps(line), flush=True)
    print(json.dumps({"paid": len(wallet.paid)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
