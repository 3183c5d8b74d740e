"""Nostr kind 31402 announcements against relays on loopback: nostr-sdk's own relay
(LocalRelay, the relay builder of the maintained rust-nostr project), and small NIP-01
relays that refuse or hang. Signatures are checked with a second library (coincurve's
BIP-340), the npub with a second bech32 implementation (the bech32 package)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import bech32
import httpx
import jsonschema  # type: ignore[import-untyped]
import pytest
from aiohttp import web
from coincurve import PublicKeyXOnly
from nostr_sdk import LocalRelayBuilder

from satsgate.appkeys import RATES
from satsgate.cli import main as cli_main
from satsgate.config.nostr import NostrConfig
from satsgate.engines import CpuRunner
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.nostr.announcement import Listing
from satsgate.nostr.keys import KEY_FILE
from satsgate.operator import ensure_operator_token
from satsgate.services.catalog import rates
from satsgate.services.catalog.rates import FALLBACK
from satsgate.services.registry import BY_SLUG
from tests.conftest import ThreadedServer, free_port, make_settings
from tests.engines_down import PROVIDER_KINDS as DOWN_KINDS
from tests.engines_down import down_engines

KIND = 31402


# -- relays ---------------------------------------------------------------------------------


@pytest.fixture
async def local_relay() -> AsyncIterator[str]:
    """nostr-sdk's LocalRelay (NIP-01, keeps the newest addressable event)."""
    port = free_port()
    relay = LocalRelayBuilder().port(port).build()
    await relay.run()
    yield f"ws://127.0.0.1:{port}"
    relay.shutdown()


async def stored_events(url: str, author: str | None = None) -> list[dict[str, Any]]:
    """What the relay holds of kind 31402 (a REQ until EOSE)."""
    query: dict[str, Any] = {"kinds": [KIND]}
    if author:
        query["authors"] = [author]
    events = []
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_str(json.dumps(["REQ", "q", query]))
        async for msg in ws:
            reply = json.loads(msg.data)
            if reply[0] == "EOSE":
                break
            if reply[0] == "EVENT":
                events.append(reply[2])
    return events


async def wait_for_event(url: str, newer_than: int = 0, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = [e for e in await stored_events(url) if e["created_at"] > newer_than]
        if events:
            return max(events, key=lambda e: int(e["created_at"]))
        await asyncio.sleep(0.1)
    raise AssertionError(f"no kind {KIND} event newer than {newer_than} reached {url}")


class MisbehavingRelays:
    """On their own loop and thread (satsgate's server blocks the test's loop while it
    starts): one that answers every EVENT with OK false, one that takes the websocket and
    never answers, and one that takes the TCP connection and never answers at all."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.received: dict[str, int] = {"refusing": 0, "hanging-ws": 0, "hanging-tcp": 0}
        self.runner, self.tcp = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(
            10
        )

    async def _start(self) -> tuple[web.AppRunner, asyncio.Server]:
        async def refusing(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            async for msg in ws:
                event = json.loads(msg.data)[1]
                self.received["refusing"] += 1
                await ws.send_str(json.dumps(["OK", event["id"], False, "blocked: not here"]))
            return ws

        async def hanging(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse(autoping=False)
            await ws.prepare(request)
            async for _msg in ws:
                self.received["hanging-ws"] += 1
                await asyncio.sleep(3600)
            return ws

        app = web.Application()
        app.router.add_get("/refusing", refusing)
        app.router.add_get("/hanging", hanging)
        runner = web.AppRunner(app)
        await runner.setup()
        self.port = free_port()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.received["hanging-tcp"] += 1
            try:
                await asyncio.sleep(3600)
            finally:
                writer.close()

        tcp = await asyncio.start_server(silent, "127.0.0.1", 0)
        self.tcp_port = tcp.sockets[0].getsockname()[1]
        return runner, tcp

    @property
    def urls(self) -> list[str]:
        return [
            f"ws://127.0.0.1:{self.port}/refusing",
            f"ws://127.0.0.1:{self.port}/hanging",
            f"ws://127.0.0.1:{self.tcp_port}",
        ]

    def stop(self) -> None:
        async def close() -> None:
            self.tcp.close()
            for task in asyncio.all_tasks():  # the hanging handlers
                if task is not asyncio.current_task():
                    task.cancel()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def misbehaving() -> Iterator[MisbehavingRelays]:
    relays = MisbehavingRelays()
    yield relays
    relays.stop()


def nostr_settings(data_dir: Path, relays: list[str], **nostr: Any) -> Any:
    table = {"relays": relays, "check_interval_s": 0.2, "timeout_s": 1.5, **nostr}
    return make_settings(data_dir, discovery={"nostr": table}, **down_engines(["sms"]))


def serve(settings: Any) -> ThreadedServer:
    return ThreadedServer(settings, {**PROVIDER_KINDS, **DOWN_KINDS})


# -- checks with other libraries ------------------------------------------------------------


def assert_signed(event: dict[str, Any]) -> None:
    """NIP-01 id and BIP-340 signature, checked with coincurve (not nostr-sdk)."""
    serial = json.dumps(
        [0, event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    event_id = hashlib.sha256(serial.encode()).hexdigest()
    assert event["id"] == event_id
    key = PublicKeyXOnly(bytes.fromhex(event["pubkey"]))
    assert key.verify(bytes.fromhex(event["sig"]), bytes.fromhex(event_id))
    forged = bytearray(bytes.fromhex(event["sig"]))
    forged[-1] ^= 1
    assert not key.verify(bytes(forged), bytes.fromhex(event_id))


def npub_hex(npub: str) -> str:
    hrp, data = bech32.bech32_decode(npub)
    assert hrp == "npub" and data is not None
    key = bech32.convertbits(data, 5, 8, False)
    assert key is not None
    return bytes(key).hex()


def tag_values(event: dict[str, Any], name: str) -> list[list[str]]:
    return [t[1:] for t in event["tags"] if t[0] == name]


# -- the tests ------------------------------------------------------------------------------


async def test_the_announcement_arrives_signed_with_its_tags_and_content(
    tmp_path: Path, local_relay: str
) -> None:
    srv = serve(nostr_settings(tmp_path / "data", [local_relay]))
    try:
        event = await wait_for_event(local_relay)
        assert event["kind"] == KIND
        assert_signed(event)

        # The key: made in the data directory, 0600, the event's author.
        key_file = tmp_path / "data" / KEY_FILE
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        secret = bytes.fromhex(key_file.read_text().strip())
        assert PublicKeyXOnly.from_secret(secret).format().hex() == event["pubkey"]

        # The operator sees the npub (and it is this key's).
        token = ensure_operator_token(tmp_path / "data")
        async with httpx.AsyncClient(base_url=srv.url) as client:
            page = await client.get("/operator", headers={"Authorization": f"Bearer {token}"})
            ledger = await client.get(
                "/api/operator/ledger", headers={"Authorization": f"Bearer {token}"}
            )
            services = {slug: (await client.get(f"/api/l402/{slug}")).json() for slug in BY_SLUG}
        status = ledger.json()["nostr"]
        assert npub_hex(status["npub"]) == event["pubkey"]
        assert status["npub"] in page.text and 'id="nostr-npub"' in page.text
        assert status["relays"][0]["state"] == "published"
        assert status["relays"][0]["publishedEventId"] == event["id"]

        # Tags, exactly as listed.
        served = [slug for slug, doc in services.items() if doc["available"]]
        assert tag_values(event, "d") == [["satsgate"]]
        assert tag_values(event, "name") == [["satsgate"]]
        assert tag_values(event, "url") == [[srv.url]]
        about, summary = tag_values(event, "about"), tag_values(event, "summary")
        assert about == summary and len(about) == 1 and "Lightning" in about[0][0]
        assert tag_values(event, "pmi") == [["l402", "lightning"], ["payment"]]
        prices = {slug: (sats, unit) for slug, sats, unit in tag_values(event, "price")}
        assert sorted(prices) == sorted(served) and "send-sms" in prices
        for slug, (sats, unit) in prices.items():
            assert unit == "sat"
            assert int(sats) == services[slug]["pricing"]["minSats"]  # the lowest price
        assert prices["render-card"] == ("5", "sat")
        topics = [t[0] for t in tag_values(event, "t")]
        assert topics[:4] == ["l402", "mpp", "lightning", "mcp"] and "text" in topics
        assert [t[0] for t in event["tags"][:2]] == ["d", "name"]

        # Content: each capability's schemas stand alone and are the OpenAPI's.
        content = json.loads(event["content"])
        assert set(content) == {"capabilities", "version"}
        capabilities = {c["name"]: c for c in content["capabilities"]}
        assert sorted(capabilities) == sorted(served)
        for slug, capability in capabilities.items():
            assert set(capability) == {
                "name",
                "description",
                "endpoint",
                "schema",
                "outputSchema",
            }
            assert capability["endpoint"] == f"{srv.url}/api/l402/{slug}"
            assert capability["description"] == services[slug]["description"]
            schema = capability["schema"]
            jsonschema.Draft202012Validator.check_schema(schema)
            validator = jsonschema.Draft202012Validator(schema)
            example = services[slug]["example"]
            if example and not any("<" in str(v) for v in example.values()):
                validator.validate(example)
            assert not validator.is_valid([])  # a body is an object: the schema says so
        job = next(c for s, c in capabilities.items() if BY_SLUG[s].mode == "job")
        assert "job_id" in json.dumps(job["outputSchema"])
    finally:
        srv.stop()


async def test_relays_that_refuse_or_hang_never_slow_start_or_requests(
    tmp_path: Path, local_relay: str, misbehaving: MisbehavingRelays
) -> None:
    started = time.monotonic()
    hang_s = 4.0  # a relay's timeout_s: what a loop held up by a hanging relay would show
    srv = serve(
        nostr_settings(tmp_path / "data", [*misbehaving.urls, local_relay], timeout_s=hang_s)
    )
    try:
        start_s = time.monotonic() - started
        async with httpx.AsyncClient(base_url=srv.url) as client:
            # While two relays hang (each up to hang_s) requests answer at once: a
            # loop held up by a relay would show ~hang_s, a busy CI machine (two test
            # workers) at most a second or so on the slowest of ten.
            slowest, took = 0.0, []
            for _ in range(10):
                t0 = time.monotonic()
                health = await client.get("/api/health")
                quote = await client.post(
                    "/api/l402/render-card", json={"template": "headline", "title": "x"}
                )
                took.append(time.monotonic() - t0)
                slowest = max(slowest, took[-1])
                assert health.status_code == 200 and quote.status_code == 402
                await asyncio.sleep(0.05)
            assert slowest < hang_s / 2 and sorted(took)[len(took) // 2] < 1.0, took
            event = await wait_for_event(local_relay)  # the good relay is not held up
            assert_signed(event)
            await asyncio.sleep(hang_s + 0.5)  # past timeout_s: every relay has answered
            token = ensure_operator_token(tmp_path / "data")
            status = (
                await client.get(
                    "/api/operator/ledger", headers={"Authorization": f"Bearer {token}"}
                )
            ).json()["nostr"]
        states = {r["url"]: r for r in status["relays"]}
        refusing, hanging_ws, hanging_tcp = misbehaving.urls
        assert states[refusing]["state"] == "refused"
        assert "blocked" in states[refusing]["detail"]
        assert states[hanging_ws]["state"] == states[hanging_tcp]["state"] == "unreachable"
        assert "no answer within" in states[hanging_ws]["detail"]
        assert states[local_relay]["state"] == "published"
        assert misbehaving.received["refusing"] >= 1
        assert misbehaving.received["hanging-ws"] >= 1
        assert misbehaving.received["hanging-tcp"] >= 1
        assert start_s < 10  # start-up did not wait for any relay (each hangs 4 s+)
    finally:
        srv.stop()


async def test_a_price_change_republishes(tmp_path: Path, local_relay: str) -> None:
    srv = serve(nostr_settings(tmp_path / "data", [local_relay], min_republish_interval_s=0))
    try:
        first = await wait_for_event(local_relay)
        before = dict((s, int(p)) for s, p, _ in tag_values(first, "price"))
        await asyncio.sleep(0.6)  # a few checks with unchanged prices: nothing new
        assert [e["id"] for e in await stored_events(local_relay)] == [first["id"]]

        # BTC doubles: the BTC-pegged SMS price halves, far past 10 %.
        snapshot = rates.Snapshot(btc_usd=2 * rates.REFERENCE_BTC_USD, fetched_at=0, source="t")
        srv.app[RATES].install(rates.RateBook((snapshot,)))  # the node's own rate book
        second = await wait_for_event(local_relay, newer_than=first["created_at"])
        assert_signed(second)
        after = dict((s, int(p)) for s, p, _ in tag_values(second, "price"))
        async with httpx.AsyncClient(base_url=srv.url) as client:
            sms = (await client.get("/api/l402/send-sms")).json()["pricing"]["minSats"]
        assert after["send-sms"] == sms < before["send-sms"]
        assert after["render-card"] == before["render-card"]
        # The relay keeps the newest addressable event only.
        assert [e["id"] for e in await stored_events(local_relay)] == [second["id"]]
    finally:
        srv.stop()


def test_what_counts_as_a_price_change() -> None:
    published = Listing(prices=(("a", 100), ("b", 5)), pegged=frozenset({"a"}))

    def changed(*prices: tuple[str, int]) -> bool:
        return Listing(prices=prices, pegged=frozenset({"a"})).changed_from(published, 10)

    assert not changed(("a", 100), ("b", 5))
    assert not changed(("a", 91), ("b", 5))  # a pegged price moving under 10 %
    assert not changed(("a", 109), ("b", 5))
    assert changed(("a", 110), ("b", 5))
    assert changed(("a", 90), ("b", 5))
    assert changed(("a", 100), ("b", 6))  # a price that is not pegged: any change
    assert changed(
        ("a", 100),
    )  # a service gone
    assert changed(("a", 100), ("b", 5), ("c", 1))  # or added


def test_config_is_checked() -> None:
    assert not NostrConfig.from_discovery({}).enabled
    config = NostrConfig.from_discovery(
        {"nostr": {"relays": ["wss://r.example", "wss://r.example"]}}
    )
    assert config.relays == ("wss://r.example",) and config.republish_interval_s == 86400
    bad: dict[str, Any]
    for bad in (
        {"nostr": {"relays": ["https://r.example"]}},
        {"nostr": {"relays": "wss://r.example", "colour": "red"}},
        {"nostr": {"relays": [1]}},
        {"nostr": {"timeout_s": 0}},
        {"elsewhere": {}},
    ):
        with pytest.raises(ValueError):
            NostrConfig.from_discovery(bad)


def test_announce_print_sends_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A "relay" that counts connections: --print must never open one.
    connections = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    config = tmp_path / "satsgate.toml"
    config.write_text(
        f'[discovery.nostr]\nrelays = ["ws://127.0.0.1:{port}"]\nname = "my node"\n'
        'urls = ["http://example.onion"]\n'
    )
    try:
        assert (
            cli_main(
                [
                    "announce",
                    "--print",
                    "--config",
                    str(config),
                    "--data-dir",
                    str(tmp_path / "data"),
                    "--base-url",
                    "https://pay.example.com",
                ]
            )
            == 0
        )
        with contextlib.suppress(TimeoutError):
            connections.append(listener.accept())
    finally:
        listener.close()
    assert connections == []
    event = json.loads(capsys.readouterr().out)
    assert_signed(event)
    assert event["kind"] == KIND
    assert tag_values(event, "name") == [["my node"]]
    assert tag_values(event, "url") == [["https://pay.example.com"], ["http://example.onion"]]
    key = (tmp_path / "data" / KEY_FILE).read_text().strip()
    assert PublicKeyXOnly.from_secret(bytes.fromhex(key)).format().hex() == event["pubkey"]
    assert json.loads(event["content"])["capabilities"][0]["endpoint"].startswith(
        "https://pay.example.com/api/l402/"
    )


def test_content_too_large_for_relays_links_the_openapi_schemas() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from satsgate.config.settings import Settings
    from satsgate.discovery.describe import describe
    from satsgate.discovery.documents import Catalog
    from satsgate.nostr.announcement import content
    from satsgate.server.app import node_engines
    from satsgate.services.registry import SERVICES

    settings = Settings(base_url="https://pay.example.com")
    with ThreadPoolExecutor(max_workers=1) as pool:
        engines = node_engines(settings, CpuRunner(pool, 1.0))
    catalog = Catalog(
        settings, SERVICES, tuple(describe(s, settings, engines, FALLBACK) for s in SERVICES)
    )
    inline = json.loads(content(catalog, 10_000_000))
    linked = json.loads(content(catalog, 1000))
    assert [c["name"] for c in inline["capabilities"]] == [
        c["name"] for c in linked["capabilities"]
    ]
    card = next(c for c in linked["capabilities"] if c["name"] == "render-card")
    assert card["schema"] == {
        "$ref": "https://pay.example.com/api/openapi.json#/components/schemas/RenderCardParams"
    }
    inline_card = next(c for c in inline["capabilities"] if c["name"] == "render-card")
    assert "RenderCardParams" in inline_card["schema"]["$defs"]
    assert "$ref" not in json.dumps(inline_card).replace('"$ref": "#/$defs/', "")
