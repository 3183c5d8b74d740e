import asyncio

import pytest

from satsgate.aio import unless_closing


async def test_the_awaitable_first_is_its_result() -> None:
    assert await unless_closing(asyncio.sleep(0, "paid"), asyncio.Event()) == "paid"


async def test_closing_first_is_none_and_the_awaitable_is_cancelled() -> None:
    closing = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    waiting = asyncio.ensure_future(unless_closing(forever(), closing))
    await asyncio.sleep(0)
    closing.set()
    assert await waiting is None
    assert cancelled.is_set()  # done before unless_closing returned


async def test_the_awaitable_s_exception_propagates() -> None:
    async def fails() -> str:
        raise TimeoutError("no answer")

    with pytest.raises(TimeoutError, match="no answer"):
        await unless_closing(fails(), asyncio.Event())
