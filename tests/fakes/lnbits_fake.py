"""An LNbits wallet API on loopback, the Lightning side of the tests' Nutshell mint
(Nutshell's ``LNbitsWallet`` backend speaks it): the routes and fields that backend uses.

- incoming invoices (the mint's mint quotes) are paid at once, as if their payer had paid;
- outgoing payments (the mint's melts) are made for real into satsgate's dev node, through
  its ``POST /api/dev/pay``: the node's invoice is settled, and the preimage is the node's.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
import time
from typing import Any

import httpx
from aiohttp import web

from satsgate.lightning.invoices import decode_invoice, sign_invoice


class LnbitsFake:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.pay_into = ""  # the satsgate whose dev node outgoing payments pay into
        self.paid_out: list[str] = []  # bolt11 of every outgoing payment made
        self._key = secrets.token_hex(32)
        self._payments: dict[str, dict[str, Any]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        app = web.Application()
        app.router.add_get("/api/v1/wallet", self._wallet)
        app.router.add_post("/api/v1/payments", self._payment)
        app.router.add_get("/api/v1/payments/sse", self._sse)
        app.router.add_get("/api/v1/payments/{checking_id}", self._status)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        self._closing = asyncio.Event()
        asyncio.run_coroutine_threadsafe(self._start(port), self._loop).result(10)

    async def _start(self, port: int) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._closing.set)
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _wallet(self, request: web.Request) -> web.Response:
        return web.json_response({"id": "w", "name": "tests", "balance": 10**15})

    async def _sse(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        # No push events (the mint asks for each payment's status): open until stop().
        await self._closing.wait()
        return resp

    async def _payment(self, request: web.Request) -> web.Response:
        body = await request.json()
        if not body.get("out"):
            amount_sat = int(body["amount"])
            preimage = secrets.token_hex(32)
            payment_hash = hashlib.sha256(bytes.fromhex(preimage)).hexdigest()
            bolt11 = sign_invoice(
                network="regtest",
                amount_msat=amount_sat * 1000,
                payment_hash=payment_hash,
                payment_secret=secrets.token_hex(32),
                description=str(body.get("memo", "")),
                expiry_s=3600,
                private_key_hex=self._key,
                created_at=int(time.time()),
            )
            self._payments[payment_hash] = {"preimage": preimage, "fee": 0}
            return web.json_response(
                {"payment_hash": payment_hash, "checking_id": payment_hash, "bolt11": bolt11}
            )
        bolt11 = str(body["bolt11"])
        payment_hash = decode_invoice(bolt11).payment_hash
        async with httpx.AsyncClient(timeout=30) as client:
            resp = await client.post(f"{self.pay_into}/api/dev/pay", json={"invoice": bolt11})
        if resp.status_code != 200:
            return web.json_response({"detail": resp.text[:200]}, status=400)
        self._payments[payment_hash] = {"preimage": resp.json()["preimage"], "fee": 0}
        self.paid_out.append(bolt11)
        return web.json_response({"payment_hash": payment_hash, "checking_id": payment_hash})

    async def _status(self, request: web.Request) -> web.Response:
        found = self._payments.get(request.match_info["checking_id"])
        if found is None:
            return web.json_response({"detail": "Payment does not exist."}, status=404)
        return web.json_response(
            {
                "paid": True,
                "preimage": found["preimage"],
                "details": {"fee": found["fee"], "status": "success", "pending": False},
            }
        )
