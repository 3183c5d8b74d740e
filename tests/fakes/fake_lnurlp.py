"""A Lightning-address wallet on loopback (LUD-16 / LUD-06 payRequest), in its own thread
and event loop: ``GET /.well-known/lnurlp/<name>`` answers the payRequest, its callback
``?amount=<msat>`` answers ``{pr, routes}`` with a BOLT11 invoice signed by the wallet's
own node key, committing to the metadata by description hash. The dev node pays those
invoices like any other node's (tests read its outgoing payments).

``mode`` scripts misbehaviour: ``error`` (LUD-06 ``{"status": "ERROR"}``), ``wrong_amount``,
``wrong_hash`` (an invoice whose description hash is not the metadata's), ``down`` (500).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import coincurve
from aiohttp import web
from bolt11 import Bolt11, encode
from bolt11.models.features import Feature, Features, FeatureState
from bolt11.models.tags import Tag, TagChar, Tags
from bolt11.types import MilliSatoshi

from tests.conftest import free_port

DOMAIN = "wallet.test"


def lnurlp_invoice(
    key: coincurve.PrivateKey, amount_msat: int, description_hash: str, network: str = "bcrt"
) -> str:
    preimage = os.urandom(32)
    tags = Tags(
        [
            Tag(TagChar.payment_hash, hashlib.sha256(preimage).hexdigest()),
            Tag(TagChar.payment_secret, os.urandom(32).hex()),
            Tag(TagChar.description_hash, description_hash),
            Tag(TagChar.expire_time, 600),
            Tag(
                TagChar.features,
                Features.from_feature_list(
                    {
                        Feature.var_onion_optin: FeatureState.required,
                        Feature.payment_secret: FeatureState.required,
                    }
                ),
            ),
        ]
    )
    invoice = Bolt11(
        currency=network, date=int(time.time()), tags=tags, amount_msat=MilliSatoshi(amount_msat)
    )
    return str(encode(invoice, key.secret.hex()))


@dataclass
class Issued:
    name: str
    amount_msat: int
    bolt11: str


@dataclass
class FakeLightningAddress:
    mode: str = "ok"
    issued: list[Issued] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key = coincurve.PrivateKey()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    @property
    def hosts(self) -> dict[str, str]:
        """For Settings.lightning_address_hosts: the wallet's domain served here."""
        return {DOMAIN: self.url}

    def address(self, name: str = "alice") -> str:
        return f"{name}@{DOMAIN}"

    @staticmethod
    def metadata(name: str) -> str:
        return json.dumps(
            [["text/plain", f"Payment to {name}"], ["text/identifier", f"{name}@{DOMAIN}"]]
        )

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/.well-known/lnurlp/{name}", self._pay_request)
        app.router.add_get("/lnurlp/{name}/callback", self._callback)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        async def down() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    async def _pay_request(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests.append(f"payRequest {name}")
        if self.mode == "down":
            return web.Response(status=500, text="down")
        return web.json_response(
            {
                "tag": "payRequest",
                "callback": f"{self.url}/lnurlp/{name}/callback",
                "minSendable": 1000,
                "maxSendable": 10_000_000_000,
                "metadata": self.metadata(name),
                "commentAllowed": 0,
            }
        )

    async def _callback(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        amount = int(request.query["amount"])
        self.requests.append(f"callback {name} {amount}")
        if self.mode == "error":
            return web.json_response({"status": "ERROR", "reason": "wallet closed"})
        description_hash = hashlib.sha256(self.metadata(name).encode()).hexdigest()
        if self.mode == "wrong_hash":
            description_hash = hashlib.sha256(b"something else").hexdigest()
        if self.mode == "wrong_amount":
            amount += 1000
        pr = lnurlp_invoice(self.key, amount, description_hash)
        self.issued.append(Issued(name, amount, pr))
        body: dict[str, Any] = {"pr": pr, "routes": []}
        return web.json_response(body)
