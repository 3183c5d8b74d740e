"""Signed callbacks to callers: the end of an async job POSTed to its ``callback_url``.

What is sent: the job's poll answer (``status``, ``requestId``, ``jobType`` and the
``result``, or the error envelope with its refund, which carries ``smoke_failures`` or
``output_duration_seconds`` where the spec says so), plus ``event``
(``job.completed`` or ``job.failed``) and ``callback_id``; the header
``X-Service-Delivery: <job id>/<attempt>`` numbers the attempts.

How it is signed: ``X-Service-Signature: t=<unix seconds>,v1=<hex>`` where ``<hex>`` is
HMAC-SHA256, keyed with the job's ``callback_secret`` (hex text, used as its ASCII
bytes; the 202 answer hands it to the caller), over ``<t>.<the exact body bytes>``. A
receiver recomputes it, compares in constant time and refuses a ``t`` far from its
clock. The body is the same bytes on every attempt; ``t`` is new each time.

Delivery: a 2xx answer within ``timeout_s`` ends it; anything else is retried after
``RETRY_AFTER_S`` (seven attempts over about three hours), then given up. Every attempt
checks again that the URL's name resolves only to public addresses and connects to one
of them (public_urls.pinned), so DNS rebinding cannot reach inside. Redirects are
not followed. The outbox lives in the store, so a restart resumes it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from typing import Any

import httpx

from satsgate.public_urls import Outbound, UnsafeUrl, pinned
from satsgate.store import CallbackDelivery, CallbackRepository, Job, JobStatus

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Service-Signature"
# Seconds to wait before attempt 2, 3, ...: 10 s, 1 min, 5 min, 15 min, 1 h, 2 h.
RETRY_AFTER_S = (10, 60, 300, 900, 3600, 7200)
MAX_ATTEMPTS = len(RETRY_AFTER_S) + 1
LEASE_S = 120  # a claimed row is not claimed again for this long (one attempt at a time)
KEEP_ENDED_S = 7 * 24 * 3600  # ended deliveries (their bodies hold results) are pruned after


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Service-Signature value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def callback_body(job: Job, answer: dict[str, Any]) -> str:
    """The JSON text delivered for ``job``, whose poll answer is ``answer``; marked
    ``untrusted_output: true`` at its top, as the poll is, when the result carries text
    from outside (the gate marks such a result)."""
    assert job.callback is not None
    event = "job.completed" if job.status is JobStatus.COMPLETED else "job.failed"
    doc = {"event": event, "callback_id": job.callback.callback_id, **answer}
    result = answer.get("result")
    if isinstance(result, dict) and result.get("untrusted_output") is True:
        doc["untrusted_output"] = True
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


class CallbackSender:
    def __init__(
        self,
        deliveries: CallbackRepository,
        outbound: Outbound,
        *,
        timeout_s: float = 10.0,
        retry_after_s: tuple[int, ...] = RETRY_AFTER_S,
    ) -> None:
        self._deliveries = deliveries
        self._outbound = outbound
        self._timeout_s = timeout_s
        self._retry_after_s = retry_after_s
        self._http = outbound.client(timeout_s)
        self._kicked: asyncio.Task[int] | None = None

    def kick(self) -> None:
        """Deliver what is due now, in the background (a job just ended)."""
        if self._kicked is None or self._kicked.done():
            self._kicked = asyncio.create_task(self.deliver_due(), name="callbacks")

    async def deliver_due(self) -> int:
        """Attempt every due delivery once; how many were delivered."""
        now = int(time.time())
        due = await self._deliveries.claim_due(now, LEASE_S)
        results = await asyncio.gather(*(self._attempt(d) for d in due))
        return sum(results)

    async def _attempt(self, delivery: CallbackDelivery) -> bool:
        attempt = delivery.attempts + 1
        body = delivery.body.encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "satsgate-callbacks",
            SIGNATURE_HEADER: signature(delivery.secret, int(time.time()), body),
            "X-Service-Delivery": f"{delivery.job_id}/{attempt}",
        }
        error: str
        try:
            async with (
                asyncio.timeout(self._timeout_s),
                pinned(
                    self._http, "POST", delivery.url, self._outbound, content=body, headers=headers
                ) as resp,
            ):
                if 200 <= resp.status_code < 300:
                    await self._deliveries.delivered(delivery.job_id, attempt, int(time.time()))
                    return True
                error = f"HTTP {resp.status_code}"
        except UnsafeUrl as exc:
            error = f"refused: {exc}"
        except TimeoutError:
            error = f"no answer within {self._timeout_s:g} s"
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        now = int(time.time())
        retry_at = (
            now + self._retry_after_s[attempt - 1] if attempt <= len(self._retry_after_s) else None
        )
        log.info("callback for %s, attempt %d: %s", delivery.job_id, attempt, error)
        await self._deliveries.failed(delivery.job_id, attempt, error, retry_at, now)
        return False

    async def prune(self) -> int:
        return await self._deliveries.prune(int(time.time()) - KEEP_ENDED_S)

    async def close(self) -> None:
        if self._kicked is not None:
            self._kicked.cancel()
            await asyncio.gather(self._kicked, return_exceptions=True)
        await self._http.aclose()
