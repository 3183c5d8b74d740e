"""Events every instance on one PostgreSQL store hears: ``NOTIFY`` on a channel, and a
connection of each instance's own that ``LISTEN``s to it.

What an instance keeps in memory and another instance's waiter needs (a job's progress
and its end: a job running on A, its `await_result` stream held by B) is published
here; the store stays the truth (a waiter reads the job's row when woken), so a
notification lost while the listening connection reconnects costs a waiter at most its
fallback poll, never a wrong answer. On SQLite (one process) there is nothing to
publish: :func:`open_events` gives None.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from satsgate.store.engine import Engine

log = logging.getLogger(__name__)

# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more.
MAX_PAYLOAD = 7000

Handler = Callable[[str], None]


class ClusterEvents:
    def __init__(self, url: str, db: Engine) -> None:
        self._url = url
        self._db = db
        self._handlers: dict[str, list[Handler]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def on(self, channel: str, handler: Handler) -> None:
        """Call ``handler(payload)`` for each notification on ``channel`` (before start)."""
        self._handlers.setdefault(channel, []).append(handler)

    def publish(self, channel: str, payload: str) -> None:
        """NOTIFY every instance (this one too), without waiting; a payload over
        :data:`MAX_PAYLOAD` is not sent."""
        if len(payload.encode()) > MAX_PAYLOAD:
            log.warning("event on %s not sent: %d bytes", channel, len(payload))
            return
        task = asyncio.create_task(self._notify(channel, payload))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _notify(self, channel: str, payload: str) -> None:
        try:
            await self._db.run_sync(
                lambda conn: conn.execute("SELECT pg_notify(?, ?)", (channel, payload))
            )
        except Exception as exc:  # the store away: waiters fall back to their poll
            log.debug("event on %s not sent: %s", channel, exc)

    def start(self) -> None:
        if self._handlers and self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name="cluster-events")

    async def _listen(self) -> None:
        from satsgate.store.pg_listen import RECONNECTED, notifications

        async for channel, payload in notifications(self._url, list(self._handlers)):
            if (channel, payload) == RECONNECTED:
                continue  # a waiter reads the store at its fallback poll: nothing to redo
            for handler in self._handlers.get(channel, ()):
                try:
                    handler(payload)
                except Exception:
                    log.exception("event handler on %s failed", channel)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


def open_events(store_url: str, db: Engine) -> ClusterEvents | None:
    """The events of a PostgreSQL store; None on SQLite (one process hears itself)."""
    return ClusterEvents(store_url, db) if store_url else None
