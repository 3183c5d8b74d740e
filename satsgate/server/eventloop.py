"""The event loop every satsgate process runs on: uvloop's.

``satsgate serve``, ``satsgate worker``, the Core Lightning plugin's service thread and
the CLI's one-shot commands all start their loop here (:func:`run`,
:func:`new_event_loop`), so they serve on one kind of loop, the one the tests and the
benchmarks run. uvloop's loop, transports and timers are compiled: each wait on the
network (an HTTP request, a PostgreSQL round trip) costs the interpreter about a third
less than on asyncio's own loop (bench/README.md, "The event loop").
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, debug: bool = False) -> T:
    """Run ``main`` to its end on a new loop, then close the loop."""
    return uvloop.run(main, debug=debug)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop, for a thread of its own that runs it."""
    return uvloop.new_event_loop()
