"""The baseline: a bare aiohttp JSON handler, nothing of satsgate, in its own process.

    python bench/baseline_server.py --port 8080

Prints ``READY <url>`` on stdout once listening; stops on SIGTERM/SIGINT or when
stdin closes (so it never outlives the bench runner that started it).
"""

from __future__ import annotations

import argparse

from _serve import serve
from aiohttp import web


async def hello(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def hello_post(request: web.Request) -> web.Response:
    """The same, for a POST that carries a JSON body (read and parsed, then ignored)."""
    await request.json()
    return web.json_response({"status": "ok"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_post("/", hello_post)
    serve(app, args.host, args.port)


if __name__ == "__main__":
    main()
