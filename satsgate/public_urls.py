"""The public-HTTPS-only guard for caller-supplied URLs (callback_url, voiceFileUrl),
and :func:`fetch_public`, the one way satsgate fetches a caller's file by URL.

Two checks, because a name can change what it points to:

- :func:`check_public_https_url` before payment: scheme https, a host, no user
  info, and a host that is not a loopback, private, link-local, CGNAT,
  multicast, reserved or otherwise non-global address literal in any spelling
  (``127.1``, ``0x7f000001``, ``2130706433``, ``[::ffff:127.0.0.1]``, and every IPv6
  form that carries an inside IPv4 address: ``[64:ff9b::127.0.0.1]``,
  ``[::127.0.0.1]``, 6to4, Teredo, ...; :func:`is_public_address`), nor a
  local-only name (``localhost``, ``*.local``, ``*.internal``, ...).
- :meth:`Outbound.public_addresses` at connect time: every address the name resolves
  to must be public, and :func:`pinned` connects to one of those addresses (so a DNS
  answer that flips to 127.0.0.1 after the check is still refused).

:class:`Outbound` is the outside network as satsgate sees it: the DNS, which addresses
count as public, and the certificate authorities trusted. The app uses the system's;
tests put a loopback receiver behind a fake DNS answer.

A refused callback URL is ``L402_CALLBACK_INVALID`` (before any invoice);
polling still works.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from satsgate.errors import ApiError, ErrorCode

MAX_URL_CHARS = 2048
MAX_CALLBACK_ID_CHARS = 128

_LOCAL_SUFFIXES = (
    ".localhost", ".local", ".localdomain", ".internal", ".intranet", ".lan", ".home",
    ".home.arpa", ".corp", ".private", ".onion", ".test", ".invalid", ".example",
)  # fmt: skip
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeUrl(ValueError):
    pass


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """inet_aton spellings that resolvers accept: 127.1, 0x7f.0.0.1, 017700000001, 2130706433."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(parts):
        return None
    values: list[int] = []
    for part in parts:
        try:
            if part.lower().startswith("0x"):
                values.append(int(part[2:], 16))
            elif len(part) > 1 and part.startswith("0"):
                values.append(int(part, 8))
            else:
                values.append(int(part, 10))
        except ValueError:
            return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (5 - len(values)) + last
    return ipaddress.IPv4Address(number)


# Where IPv6 carries an IPv4 address a host or gateway on the path may deliver to.
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: IPv4 in the low 32 bits
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")  # the only IPv6 space IANA allocates
_ISATAP_IID = 0x0000_5EFE  # RFC 5214 interface id ``[02]00:5efe:a.b.c.d`` (u/g bits aside)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address that ``address`` reaches through: IPv4-mapped ``::ffff:a.b.c.d``,
    the NAT64 well-known prefix ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::/48`` (bits
    16-48), or an ISATAP interface id ``::[02]00:5efe:a.b.c.d`` under any prefix. None
    when it carries none of these (the forms refused whatever they carry, see
    :func:`is_public_address`, are not decoded)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if (int(address) >> 32) & 0xFCFF_FFFF == _ISATAP_IID:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def is_public_address(address: IPAddress) -> bool:
    """Globally routable unicast: not loopback, private, link-local, CGNAT, reserved, ...

    An IPv6 address is public only inside 2000::/3 (global unicast) and outside the
    special blocks Python knows (2001::/23 with Teredo, documentation, ...), with two
    exceptions whose embedded IPv4 address is checked by the IPv4 rules instead:
    IPv4-mapped ``::ffff:a.b.c.d`` and the NAT64 well-known prefix ``64:ff9b::/96``
    (RFC 6052 forbids it for non-global IPv4, but a gateway that translates it anyway
    reaches what the gateway reaches, so a private IPv4 in it is refused like the IPv4
    itself; a public one is what a DNS64 resolver hands an IPv6-only node for any
    IPv4-only site). Every other form that carries an IPv4 address is refused outright
    or by what it carries: IPv4-compatible ``::a.b.c.d`` and SIIT ``::ffff:0:a.b.c.d``
    (outside 2000::/3), the local-use NAT64 prefix ``64:ff9b:1::/48`` (RFC 8215: local
    only, and its IPv4 sits where the local operator chose), Teredo ``2001::/32`` (a
    tunnel through a relay to the obfuscated client IPv4), 6to4 and ISATAP whose
    embedded IPv4 is not public. A site-specific NAT64 or 6rd prefix inside 2000::/3
    cannot be told from any other global address by its text."""
    if isinstance(address, ipaddress.IPv4Address):
        return bool(address.is_global) and not address.is_multicast
    carried = embedded_ipv4(address)
    if carried is not None and not is_public_address(carried):
        return False
    if address.ipv4_mapped is not None or address in _NAT64_WELL_KNOWN:
        return True  # the IPv4 address it carries is public
    if address not in _GLOBAL_UNICAST or address.teredo is not None:
        return False
    return bool(address.is_global) and not address.is_multicast


def host_address(host: str) -> IPAddress | None:
    """The address a host literal stands for, or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return _legacy_ipv4(host)


def check_public_https_url(url: str) -> str:
    """The URL if it is public HTTPS by its text; raises UnsafeUrl saying why not."""
    if len(url) > MAX_URL_CHARS:
        raise UnsafeUrl(f"the URL is longer than {MAX_URL_CHARS} characters")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise UnsafeUrl("the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrl(f"the URL does not parse: {exc}") from None
    if parts.scheme.lower() != "https":
        raise UnsafeUrl("only https:// URLs are accepted")
    if parts.username is not None or parts.password is not None:
        raise UnsafeUrl("user info in the URL is not accepted")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise UnsafeUrl("the URL has no host")
    if port == 0:
        raise UnsafeUrl("port 0 is not a destination")
    address = host_address(host)
    if address is not None:
        if not is_public_address(address):
            raise UnsafeUrl(f"{address} is not a public address")
        return url
    if host in _LOCAL_NAMES or host.endswith(_LOCAL_SUFFIXES) or "." not in host:
        raise UnsafeUrl(f"{host!r} is not a public host name")
    return url


def callback_error(exc: UnsafeUrl) -> ApiError:
    return ApiError(
        ErrorCode.L402_CALLBACK_INVALID,
        f"callback_url rejected: {exc}. It must be a public https:// URL.",
        example='{"callback_url": "https://hooks.example.org/satsgate"}',
    )


def check_callback(callback_url: str | None) -> None:
    """Before payment: raise L402_CALLBACK_INVALID for a non-public or non-HTTPS URL."""
    if callback_url is None:
        return
    try:
        check_public_https_url(callback_url)
    except UnsafeUrl as exc:
        raise callback_error(exc) from None


DnsLookup = Callable[[str, int], Awaitable[list[IPAddress]]]


async def system_lookup(host: str, port: int) -> list[IPAddress]:
    """The addresses the system resolver gives ``host``; UnsafeUrl when it gives none."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UnsafeUrl(f"{host!r} does not resolve: {exc}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


@dataclass(frozen=True)
class Outbound:
    lookup: DnsLookup = system_lookup
    is_public: Callable[[IPAddress], bool] = is_public_address
    verify: ssl.SSLContext | bool = True  # the CAs a caller's https:// server is checked by

    async def public_addresses(self, url: str) -> list[IPAddress]:
        """At connect time: the URL's addresses, all public; raises UnsafeUrl."""
        check_public_https_url(url)
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        literal = host_address(host)
        addresses = [literal] if literal is not None else await self.lookup(host, parts.port or 443)
        if not addresses or not all(self.is_public(a) for a in addresses):
            raise UnsafeUrl(f"{host!r} resolves to a non-public address")
        return addresses

    def client(self, timeout_s: float) -> httpx.AsyncClient:
        """A client for callers' servers: no redirects, no proxies from the environment."""
        return httpx.AsyncClient(
            verify=self.verify,
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
        )


SYSTEM_OUTBOUND = Outbound()


@contextlib.asynccontextmanager
async def pinned(
    http: httpx.AsyncClient,
    method: str,
    url: str,
    outbound: Outbound,
    *,
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[httpx.Response]:
    """A streamed request to a caller's public https:// URL, connected to an address the
    check found public (the TLS name and Host header stay the URL's). Redirects are never
    followed: each hop would need the same check. Raises UnsafeUrl or httpx errors."""
    address = (await outbound.public_addresses(url))[0]
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    literal = f"[{address}]" if address.version == 6 else str(address)
    port = f":{parts.port}" if parts.port else ""
    target = urlunsplit(("https", f"{literal}{port}", parts.path or "/", parts.query, ""))
    async with http.stream(
        method,
        target,
        content=content,
        headers={**(headers or {}), "Host": host + port},
        extensions={"sni_hostname": host},
        follow_redirects=False,
    ) as resp:
        yield resp


class FetchFailed(Exception):
    """A caller's public file could not be fetched; the message is safe to show the caller."""


async def fetch_public(
    http: httpx.AsyncClient,
    url: str,
    max_bytes: int,
    *,
    timeout_s: float = 30.0,
    outbound: Outbound = SYSTEM_OUTBOUND,
) -> bytes:
    """The body of a caller's public https:// file, at most ``max_bytes``; FetchFailed."""
    try:
        async with asyncio.timeout(timeout_s), pinned(http, "GET", url, outbound) as resp:
            if resp.status_code != 200:
                raise FetchFailed(f"the file URL answered HTTP {resp.status_code}")
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise FetchFailed(f"the file is larger than {max_bytes} bytes")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise FetchFailed(f"the file is larger than {max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except UnsafeUrl as exc:
        raise FetchFailed(f"the URL is not public: {exc}") from None
    except TimeoutError:
        raise FetchFailed(f"the file did not arrive within {timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"the file could not be fetched ({type(exc).__name__})") from None
