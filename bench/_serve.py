"""Run an aiohttp app until SIGTERM/SIGINT or stdin EOF; announce ``READY <url>`` on stdout.

:func:`serve` runs it on the event loop satsgate serves on (satsgate/server/eventloop.py),
the bare baselines too: every server a bench compares runs on the same kind of loop
(asyncio's only where no satsgate.server.eventloop can be imported at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading

from aiohttp import web

try:
    from satsgate.server.eventloop import run as run_loop
except ImportError:  # an install of satsgate from before it
    run_loop = asyncio.run


def _stdin_closed(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    # A daemon thread: when the parent (the bench runner) goes away, stdin reads EOF.
    with contextlib.suppress(Exception):
        while sys.stdin.buffer.read(4096):
            pass
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(stop.set)


async def serve_until_stopped(app: web.Application, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    threading.Thread(target=_stdin_closed, args=(loop, stop), daemon=True).start()
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        print(f"READY http://{host}:{port}", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(app: web.Application, host: str, port: int, *, debug: bool = False) -> None:
    """Serve ``app`` until stopped (see :func:`serve_until_stopped`) on satsgate's loop."""
    run_loop(serve_until_stopped(app, host, port), debug=debug)
