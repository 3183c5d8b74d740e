"""Per-client rate limits: token buckets keyed by (rule, client address).

Three rules, each ``<rule>_rate_per_min`` in Settings (0 turns it off):

- ``challenge``: an answer that makes a new invoice for a request not paid yet (a 402
  on a paid route, a fresh 402 after a refused credential of any scheme, a session's
  top-up offer, MCP ``create_payment``, an appeal's 1 sat). The limit is taken where
  invoices are made, in one place: :func:`admit_challenge`, which the challenger
  (``Challenger.create_payment``) and the session desk (``Sessions.offered``) call
  before any invoice, for the client of the request being answered
  (:class:`ChallengeAdmission`, set for every request by :func:`rate_limit_middleware`;
  an MCP message gets one of its own: :func:`separate_admission`). One answer is one
  request of the limit however many invoices it offers (a call's challenge and its
  session deposit). An unpaid POST to a paid route (no Authorization, no ``X-Cashu``)
  is charged before any work, as its answer is a 402; a request carrying a credential
  is let through, and charged only if its answer would make an invoice: a valid
  credential is never limited (limits apply to making invoices, not to spending paid
  ones), a refused one past the limit keeps its 402 problem without a challenge.
- ``refund``: POST /api/l402/refund, POST /api/claim-refund and MCP ``request_refund``.
- ``estimate``: GET /api/estimate-cost.

The same client key is the payer whose CPU work the runner queues fairly against
others' (satsgate/engines/cpu_jobs.py ``PAYER``): set for every request on a paid route
(with or without a credential) and MCP, and inherited by the job a call starts.

A bucket holds a minute's worth of requests and refills continuously, so a client may
burst up to the rate and then sustain it. Over the limit: 429 ``RATE_LIMITED`` with
``Retry-After`` (whole seconds until one request is allowed again).

The client is the peer address, or, when the peer is a trusted proxy
(``trusted_proxies``), the right-most ``X-Forwarded-For`` entry that is not itself a
trusted proxy. An IPv6 client is keyed by its /64, as one host usually holds a whole
/64. Memory is bounded: buckets idle for a minute (refilled) are dropped as new ones
come, and at most ``MAX_BUCKETS`` are kept (the least recently used go first).
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

from aiohttp import web

from satsgate.config.settings import Settings
from satsgate.edge.http import Handler, error_response
from satsgate.engines.cpu_jobs import PAYER
from satsgate.errors import ApiError, ErrorCode

MAX_BUCKETS = 100_000

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Routes (aiohttp's canonical resource paths) whose unauthenticated POST issues a challenge.
CHALLENGE_ROUTES = frozenset(
    {
        "/api/l402/{slug}",
        "/api/m/{service}/{model}",
        "/api/l402/voice-bridge/open",
        "/api/l402/ai-call",
    }
)
# Routes whose POST may run paid work: the client is its CPU jobs' payer.
PAYER_ROUTES = CHALLENGE_ROUTES | {"/api/mcp"}
_RULE_ROUTES = {
    ("POST", "/api/l402/refund"): "refund",
    ("POST", "/api/claim-refund"): "refund",  # an AI call's unused deposit
    ("POST", "/api/decline-retry"): "refund",
    ("GET", "/api/estimate-cost"): "estimate",
    ("HEAD", "/api/l402/{slug}"): "estimate",  # the price probe
}


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """Token buckets for named rules, each ``per_min`` requests a minute per client."""

    def __init__(self, rates_per_min: dict[str, int], *, max_buckets: int = MAX_BUCKETS) -> None:
        self._rates = {rule: rate for rule, rate in rates_per_min.items() if rate > 0}
        self._buckets: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()
        self._max_buckets = max_buckets

    def enabled(self, rule: str) -> bool:
        return rule in self._rates

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, rule: str, client: str, now: float | None = None) -> float:
        """Spend one request of ``client`` under ``rule``: 0.0 when allowed, else the
        seconds until one is allowed again (nothing is spent then)."""
        rate = self._rates.get(rule)
        if rate is None:
            return 0.0
        now = time.monotonic() if now is None else now
        capacity = float(rate)
        per_s = rate / 60.0
        key = (rule, client)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(capacity, now)
            self._buckets[key] = bucket
            self._bound(now)
        else:
            bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at) * per_s)
            bucket.at = now
            self._buckets.move_to_end(key)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / per_s

    def _bound(self, now: float) -> None:
        self.prune(now)
        while len(self._buckets) > self._max_buckets:
            self._buckets.popitem(last=False)  # least recently used

    def prune(self, now: float | None = None) -> int:
        """Drop the buckets that have refilled (forgetting them changes nothing). The
        dict is in order of last use, so this stops at the first one still in use:
        amortised O(1) per request."""
        now = time.monotonic() if now is None else now
        dropped = 0
        while self._buckets:
            key, bucket = next(iter(self._buckets.items()))
            if now - bucket.at < 60.0:
                break
            del self._buckets[key]
            dropped += 1
        return dropped

    def check(self, rule: str, client: str) -> None:
        """:meth:`take`, raising RATE_LIMITED with Retry-After when over the limit."""
        wait = self.take(rule, client)
        if wait > 0:
            raise rate_limited(rule, wait)


def rate_limited(rule: str, wait_s: float) -> ApiError:
    seconds = max(1, math.ceil(wait_s))
    what = {
        "challenge": "unpaid payment requests",
        "refund": "refund requests",
        "estimate": "estimates",
    }.get(rule, "requests")
    return ApiError(
        ErrorCode.RATE_LIMITED,
        f"Too many {what} from this address; retry in {seconds} s.",
        extra={"retry_after_seconds": seconds},
        headers={"Retry-After": str(seconds)},
    )


# -- the node's bound on unpaid challenges --------------------------------------------------


class ChallengeBudget:
    """At most ``cap`` invoices unpaid and unexpired at once on this node, whatever
    the addresses they come from (0: no cap). Every invoice satsgate makes for a request
    not paid yet takes a slot (:meth:`issuing`): a call's challenge (HTTP 402, MCP
    ``create_payment``, an appeal's 1 sat) and a session deposit or top-up offered with
    it. Past the cap, a new challenge is refused with RATE_LIMITED and Retry-After before
    any invoice is made (a session deposit is left out of its 402 instead, and a 402 that
    answers a refused credential or a short session goes out with no challenge, saying
    when to retry: payments/problems.without_challenge), so a flood
    from many addresses cannot grow the payments table or the node's invoices beyond
    ``cap`` per invoice lifetime.

    Counted in memory: the store is asked once at first, then every challenge issued is
    counted as outstanding until the count reaches the cap; only then is the store asked
    again (:func:`outstanding`, at most once per
    ``recount_s``) how many are still unpaid and unexpired, which gives back the slots of
    the ones paid or expired since. Challenges being issued (taken, not yet stored) are
    counted on top of what the store holds. So a flood costs one COUNT a second, and
    normal traffic none.
    """

    def __init__(
        self,
        cap: int,
        outstanding: Callable[[int], Awaitable[tuple[int, int | None]]],
        *,
        recount_s: float = 1.0,
    ) -> None:
        self.cap = cap
        self._outstanding = outstanding
        self._recount_s = recount_s
        self._known = 0  # outstanding as last counted, plus every challenge taken since
        self._pending = 0  # taken, not yet stored
        self._stored = 0  # stored, in all
        self._counted_at = -math.inf
        self._first_expiry: int | None = None

    @contextlib.asynccontextmanager
    async def issuing(self) -> AsyncIterator[None]:
        """One slot for the invoice made (and its row stored) inside the block: RATE_LIMITED
        before the block when none is left; given back if the block fails."""
        await self.take()
        try:
            yield
        except BaseException:
            self.give_back()
            raise
        self.stored()

    async def take(self) -> None:
        """Count one new challenge, or raise RATE_LIMITED (nothing counted). Then
        :meth:`stored` once its payment is stored, or :meth:`give_back` if it never is."""
        if self.cap <= 0:
            return
        if self._known >= self.cap or self._counted_at == -math.inf:  # full, or first use
            await self._recount()
            if self._known >= self.cap:
                raise node_challenges_full(self._wait_s())
        self._known += 1
        self._pending += 1

    def stored(self) -> None:
        """A challenge taken is in the store now (a recount sees it there)."""
        if self.cap > 0:
            self._pending -= 1
            self._stored += 1

    def give_back(self) -> None:
        """A challenge taken was not issued after all (the invoice or its row failed)."""
        if self.cap > 0:
            self._pending -= 1
            self._known -= 1

    async def _recount(self) -> None:
        started = time.monotonic()
        if started - self._counted_at < self._recount_s:
            return
        self._counted_at = started
        stored = self._stored
        count, self._first_expiry = await self._outstanding(int(time.time()))
        # Those stored while counting may or may not be in ``count``: counted again (safe).
        self._known = count + self._pending + (self._stored - stored)

    def _wait_s(self) -> float:
        """Until the first outstanding challenge expires (a slot opens then, if none is
        paid sooner), at most a minute."""
        if self._first_expiry is None:
            return 1.0
        return min(60.0, max(1.0, self._first_expiry - time.time()))


def node_challenges_full(wait_s: float) -> ApiError:
    seconds = max(1, math.ceil(wait_s))
    return ApiError(
        ErrorCode.RATE_LIMITED,
        f"This node has too many unpaid payment requests outstanding; retry in {seconds} s. "
        "Nothing was charged.",
        extra={"retry_after_seconds": seconds},
        headers={"Retry-After": str(seconds)},
    )


# -- client address -------------------------------------------------------------------------


def parse_networks(items: Iterable[str]) -> tuple[IpNetwork, ...]:
    return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in items)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, proxies: tuple[IpNetwork, ...]
) -> bool:
    return any(address in net for net in proxies if net.version == address.version)


def client_key(peer: str | None, forwarded_for: list[str], proxies: tuple[IpNetwork, ...]) -> str:
    """The client's key: its address, or the /64 of an IPv6 one. ``forwarded_for``
    is every X-Forwarded-For header value, in order; it counts only behind a trusted proxy.
    """
    address = _ip(peer or "")
    if address is None:
        return peer or "unknown"
    if proxies and _trusted(address, proxies):
        hops = [hop for value in forwarded_for for hop in value.split(",")]
        for hop in reversed(hops):
            candidate = _ip(hop)
            if candidate is None:
                break  # garbage from here on was written by the client: stop at the proxy
            address = candidate
            if not _trusted(candidate, proxies):
                break
    return address_key(address)


def address_key(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


# -- the HTTP face --------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What the app holds: the limiter and the trusted proxies."""

    limiter: RateLimiter
    proxies: tuple[IpNetwork, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            RateLimiter(
                {
                    "challenge": settings.challenge_rate_per_min,
                    "refund": settings.refund_rate_per_min,
                    "estimate": settings.estimate_rate_per_min,
                }
            ),
            parse_networks(settings.trusted_proxies),
        )

    def client(self, request: web.BaseRequest) -> str:
        return client_key(
            request.remote, request.headers.getall("X-Forwarded-For", []), self.proxies
        )


LIMITS = web.AppKey("rate_limits", Limits)


# -- the challenge limit where invoices are made ---------------------------------------------


class ChallengeAdmission:
    """One answer's standing under the ``challenge`` limit of its client: the first
    invoice it makes spends one request of the limit (:meth:`admit`), the others it
    offers with it (a session deposit beside a call's challenge) are free, and once
    refused it stays refused (no invoice in that answer)."""

    __slots__ = ("_client", "_limiter", "_refused_wait", "admitted")

    def __init__(self, limiter: RateLimiter, client: Callable[[], str]) -> None:
        self._limiter = limiter
        self._client = client  # asked only when an invoice is about to be made
        self._refused_wait: float | None = None
        self.admitted = False

    def admit(self) -> None:
        """Before an invoice: RATE_LIMITED (Retry-After) when the client is past its limit."""
        if self.admitted:
            return
        if self._refused_wait is None:
            wait = self._limiter.take("challenge", self._client())
            if wait <= 0:
                self.admitted = True
                return
            self._refused_wait = wait
        raise rate_limited("challenge", self._refused_wait)

    def renewed(self) -> ChallengeAdmission:
        """Another answer for the same client (nothing spent yet)."""
        return ChallengeAdmission(self._limiter, self._client)


_ADMISSION: contextvars.ContextVar[ChallengeAdmission | None] = contextvars.ContextVar(
    "satsgate_challenge_admission", default=None
)


def admit_challenge() -> None:
    """Before any invoice for a request not paid yet: the per-address limit of the client
    being answered; RATE_LIMITED when it is past it. Outside a request (the operator's
    own work, a background sweep) there is no client and nothing to limit."""
    admission = _ADMISSION.get()
    if admission is not None:
        admission.admit()


@contextlib.contextmanager
def separate_admission() -> Iterator[None]:
    """Inside the block, invoices are one answer of their own (an MCP message in a batch:
    each one that makes an invoice is a request of the limit)."""
    admission = _ADMISSION.get()
    if admission is None:
        yield
        return
    token = _ADMISSION.set(admission.renewed())
    try:
        yield
    finally:
        _ADMISSION.reset(token)


def _rule_for(request: web.Request, path: str) -> str | None:
    if request.method == "POST" and path in CHALLENGE_ROUTES:
        # A credential (Authorization, or ecash in X-Cashu) is let through: charged only
        # when its answer makes an invoice (admit_challenge).
        headers = request.headers
        return None if "Authorization" in headers or "X-Cashu" in headers else "challenge"
    return _RULE_ROUTES.get((request.method, path))


@web.middleware
async def rate_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Limit by route before any work: unpaid challenges, refunds, estimates; give the
    request its :class:`ChallengeAdmission` (any invoice its answer makes is limited);
    and name the client as the payer of the CPU work a paid route runs."""
    limits = request.app.get(LIMITS)
    if limits is None:
        return await handler(request)
    route = request.match_info.route.resource
    path = route.canonical if route is not None else ""
    rule = _rule_for(request, path)
    pays = request.method == "POST" and path in PAYER_ROUTES
    known: list[str] = []

    def client() -> str:  # found once, if asked
        if not known:
            known.append(limits.client(request))
        return known[0]

    admission = ChallengeAdmission(limits.limiter, client)
    if rule == "challenge":  # an unpaid call: its answer is a 402 with a new invoice
        try:
            admission.admit()
        except ApiError as exc:
            return error_response(exc)
    elif rule is not None:
        wait = limits.limiter.take(rule, client())
        if wait > 0:
            return error_response(rate_limited(rule, wait))
    admitted = _ADMISSION.set(admission)
    payer = PAYER.set(client()) if pays else None
    try:
        return await handler(request)
    finally:
        if payer is not None:
            PAYER.reset(payer)
        _ADMISSION.reset(admitted)
