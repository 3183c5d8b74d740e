"""PostgreSQL's LISTEN as an async iterator: ``async for channel, payload in
notifications(url, ["a", "b"])``.

One connection of its own (a pooled connection cannot sit in LISTEN), asynchronous, so
the event loop is never blocked while it waits. A notification is delivered only to
connections listening when it is committed: each time the iterator has connected (the
first time, and after a lost connection, retried every ``retry_s``) it yields
``("", "")`` first, and a caller then reads the state it follows once, since whatever
was sent while nobody listened is gone. TCP keepalives notice a connection that died
silently (a machine that went away) within about half a minute.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

RECONNECTED = ("", "")

_KEEPALIVE: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


async def notifications(
    url: str, channels: Sequence[str], *, retry_s: float = 1.0
) -> AsyncIterator[tuple[str, str]]:
    """``(channel, payload)`` for each NOTIFY on ``channels``, and :data:`RECONNECTED`
    each time listening (re)started; runs until the caller stops iterating."""
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True, **_KEEPALIVE)
        except psycopg.OperationalError as exc:
            log.warning("LISTEN: cannot connect (%s); again in %g s", exc, retry_s)
            await asyncio.sleep(retry_s)
            continue
        try:
            async with conn:
                for channel in channels:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                yield RECONNECTED
                async for note in conn.notifies():
                    yield note.channel, note.payload
        except psycopg.OperationalError as exc:
            log.warning("LISTEN: connection lost (%s); again in %g s", exc, retry_s)
        await asyncio.sleep(retry_s)
