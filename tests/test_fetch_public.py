"""fetch_public, the one way a caller's file is fetched by URL: it connects to the address
the name resolved to, keeps the TLS name and Host header of the URL, caps the size and
follows no redirect. The outside network is faked: a DNS answer points the public name at
a TLS server on loopback, and that test network counts as public (``reachable``);
the rebinding test keeps the real rule."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from satsgate.public_urls import (
    FetchFailed,
    IPAddress,
    Outbound,
    fetch_public,
)
from tests.certs import common_name, issue

HOST = "files.example.org"
SAMPLE = bytes(range(256)) * 64  # 16 KiB


class Site:
    def __init__(self, port: int, ca_pem: bytes) -> None:
        self.port = port
        self.ca_pem = ca_pem
        self.hosts: list[str] = []

    def url(self, path: str) -> str:
        return f"https://{HOST}:{self.port}{path}"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    ca = issue(common_name("test CA"), ca=True)
    leaf = issue(common_name(HOST), ca, hosts=(HOST,))
    cert, key = leaf.write(tmp_path, "leaf")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    seen: list[str] = []

    async def sample(request: web.Request) -> web.Response:
        seen.append(request.host)
        return web.Response(body=SAMPLE, content_type="audio/wav")

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("https://127.0.0.1/private")

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/sample.wav", sample)
    app.router.add_get("/moved", moved)
    app.router.add_get("/missing", missing)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await tcp.start()
    port = runner.addresses[0][1]
    out = Site(port, ca.cert_pem())
    out.hosts = seen
    yield out
    await runner.cleanup()


async def to_loopback(host: str, port: int) -> list[IPAddress]:
    """The fake DNS: every name is the loopback site."""
    return [ipaddress.ip_address("127.0.0.1")]


def network(site: Site, *, loopback_is_public: bool = True) -> Outbound:
    context = ssl.create_default_context(cadata=site.ca_pem.decode())
    if loopback_is_public:
        return Outbound(lookup=to_loopback, is_public=lambda a: True, verify=context)
    return Outbound(lookup=to_loopback, verify=context)


def client(site: Site) -> httpx.AsyncClient:
    return network(site).client(10)


async def test_fetches_from_the_resolved_address_with_the_urls_name(site: Site) -> None:
    async with client(site) as http:
        data = await fetch_public(http, site.url("/sample.wav"), 1 << 20, outbound=network(site))
    assert data == SAMPLE
    # The certificate was checked for the URL's name and the Host header kept it.
    assert site.hosts == [f"{HOST}:{site.port}"]


async def test_size_redirects_and_errors_are_refused(site: Site) -> None:
    async with client(site) as http:
        with pytest.raises(FetchFailed, match="larger than 1000 bytes"):
            await fetch_public(http, site.url("/sample.wav"), 1000, outbound=network(site))
        with pytest.raises(FetchFailed, match="HTTP 302"):
            await fetch_public(http, site.url("/moved"), 1 << 20, outbound=network(site))
        with pytest.raises(FetchFailed, match="HTTP 404"):
            await fetch_public(http, site.url("/missing"), 1 << 20, outbound=network(site))


async def test_a_certificate_for_another_name_is_refused(site: Site) -> None:
    url = f"https://other.example.net:{site.port}/sample.wav"
    async with client(site) as http:
        with pytest.raises(FetchFailed, match="could not be fetched"):
            await fetch_public(http, url, 1 << 20, outbound=network(site))
    assert site.hosts == []


async def test_a_name_that_resolves_inside_reaches_nothing(site: Site) -> None:
    real_rule = network(site, loopback_is_public=False)  # the name resolves to loopback
    async with client(site) as http:
        with pytest.raises(FetchFailed, match="not public"):
            await fetch_public(http, site.url("/sample.wav"), 1 << 20, outbound=real_rule)
        for hostile in (
            "https://127.0.0.1/x",
            "https://[::ffff:10.0.0.1]/x",
            "https://[::127.0.0.1]/x",
            "https://[64:ff9b::127.0.0.1]/x",
            "https://[2002:7f00:1::1]/x",
            "http://a.org/x",
        ):
            with pytest.raises(FetchFailed, match="not public"):
                await fetch_public(http, hostile, 1 << 20)
    assert site.hosts == []


async def test_a_name_whose_aaaa_embeds_loopback_reaches_nothing(site: Site) -> None:
    """A voiceFileUrl whose name resolves to NAT64 / IPv4-compatible / 6to4 spellings of
    127.0.0.1: the pinned fetch refuses it before connecting."""
    context = ssl.create_default_context(cadata=site.ca_pem.decode())
    for answer in ("64:ff9b::7f00:1", "::7f00:1", "2002:7f00:1::1", "64:ff9b:1::7f00:1"):

        async def dns(host: str, port: int, answer: str = answer) -> list[IPAddress]:
            return [ipaddress.ip_address(answer)]

        outbound = Outbound(lookup=dns, verify=context)
        async with outbound.client(10) as http:
            with pytest.raises(FetchFailed, match="not public"):
                await fetch_public(http, site.url("/sample.wav"), 1 << 20, outbound=outbound)
    assert site.hosts == []
