"""routeweiler buying calls, run by tests/system/test_interop_clients.py with the Python of an
environment of its own (routeweiler 0.1.2 pins cryptography<45, which cannot share
satsgate's).

    <routeweiler venv>/bin/python tests/routeweiler_buyer.py <satsgate url> <path> <trace dir>
        <json body> [<json body> ...]

POSTs each body to <satsgate url><path> with one ``routeweiler.Routeweiler`` client, one
after the other. Its funding is a ``LightningFundingSource`` over a node client of its
``LightningNodeClient`` protocol (``pay_invoice(bolt11, *, max_fee_msat) -> preimage``,
``get_node_pubkey()``) that pays through the dev node's ``/api/dev/pay``; its SQLite trace
sink records each call in <trace dir>. Prints one JSON line per call (status, the
invoices paid during it, the body's length), then one per trace event (rail, status,
amount, the preimage it proved with). Not part of satsgate: a payer, for the tests only.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path

import httpx
from routeweiler import LightningFundingSource, Routeweiler, TraceSink

DEV_NODE_PUBKEY = "02" + "11" * 32  # the payer's own key: routeweiler only records it


class DevNodeClient:
    """routeweiler's LightningNodeClient protocol over the dev node's pay endpoint."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.paid: list[str] = []

    async def pay_invoice(self, bolt11: str, *, max_fee_msat: int) -> bytes:
        async with httpx.AsyncClient(timeout=30) as client:
            resp = await client.post(f"{self.base_url}/api/dev/pay", json={"invoice": bolt11})
        resp.raise_for_status()
        self.paid.append(bolt11)
        return bytes.fromhex(resp.json()["preimage"])

    async def get_node_pubkey(self) -> str:
        return DEV_NODE_PUBKEY


async def buy(base_url: str, path: str, trace_dir: Path, bodies: list[str]) -> None:
    node = DevNodeClient(base_url)
    funding = await LightningFundingSource.create(node, network="bitcoin-regtest")
    trace_db = trace_dir / "routeweiler.db"
    async with Routeweiler(
        funding=[funding],
        trace_sink=TraceSink.sqlite(str(trace_db)),
        keystore_root=trace_dir / "keys",
    ) as client:
        for body in bodies:
            before = len(node.paid)
            resp = await client.post(f"{base_url}{path}", json=json.loads(body))
            paid = node.paid[before:]
            line = {"status": resp.status_code, "paid": paid, "bytes": len(resp.content)}
            print(json.dumps(line), flush=True)
    with sqlite3.connect(trace_db) as db:
        rows = db.execute(
            "SELECT selected_rail, http_status, amount_native, payload FROM trace_events"
            " ORDER BY ts_start"
        ).fetchall()
    for rail, status, amount, payload in rows:
        proof = json.loads(payload)["payment"]["proofValue"]
        event = {"trace": rail, "status": status, "amount": amount, "preimage": proof}
        print(json.dumps(event), flush=True)


def main(argv: list[str]) -> None:
    base_url, path, trace_dir, *bodies = argv
    asyncio.run(buy(base_url, path, Path(trace_dir), bodies))


if __name__ == "__main__":
    main(sys.argv[1:])
