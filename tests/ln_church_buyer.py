"""ln-church-agent buying calls, run by tests/system/test_interop_clients.py with the Python of an
environment of its own (ln-church-agent 1.18 pins bolt11<2.1.1, which cannot share
satsgate's bolt11 2.2; that bolt11 needs bitstring<5).

    <ln-church venv>/bin/python tests/ln_church_buyer.py <base url> <path> <dev node url>
        <json body> [<json body> ...]

POSTs each body to <base url><path> with one ``ln_church_agent.Payment402Client`` (its
"generic paid fetch", ``execute_detailed``), one after the other; its ``ln_adapter`` (the
SDK's LightningProvider protocol, ``pay_invoice(invoice) -> preimage hex``) pays through
the dev node's ``/api/dev/pay`` at <dev node url>. Prints one JSON line per call: the scheme
it paid with, the invoices paid during it, the body's keys; or the SDK's error (its
class and message). Not part of satsgate: a payer, for the tests only.
"""

from __future__ import annotations

import json
import sys

import httpx
from ln_church_agent import Payment402Client


class DevNodeWallet:
    """ln-church-agent's LightningProvider protocol over the dev node's pay endpoint."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.paid: list[str] = []

    def pay_invoice(self, invoice: str) -> str:
        resp = httpx.post(f"{self.base_url}/api/dev/pay", json={"invoice": invoice}, timeout=30)
        resp.raise_for_status()
        self.paid.append(invoice)
        return str(resp.json()["preimage"])


def main(argv: list[str]) -> None:
    base_url, path, dev_node_url, *bodies = argv
    wallet = DevNodeWallet(dev_node_url)
    client = Payment402Client(base_url=base_url, ln_adapter=wallet)
    for body in bodies:
        before = len(wallet.paid)
        line: dict[str, object]
        try:
            result = client.execute_detailed("POST", path, json.loads(body))
        except Exception as exc:  # the SDK's errors are its own exception tree
            line = {"error": type(exc).__name__, "message": str(exc)}
        else:
            line = {"scheme": result.used_scheme, "keys": sorted(result.response)}
        print(json.dumps({**line, "paid": wallet.paid[before:]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
