"""Small asyncio helpers any layer may use; this module imports nothing of satsgate."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def unless_closing(awaitable: Awaitable[T], closing: asyncio.Event) -> T | None:
    """``awaitable``'s result, or None when ``closing`` is set first (for an awaitable
    that never returns None). The loser is cancelled: ``awaitable`` is waited for until
    its cancellation is done, so nothing of it runs on; its own exception propagates."""
    task = asyncio.ensure_future(awaitable)
    closed = asyncio.ensure_future(closing.wait())
    try:
        await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return None
    return task.result()
