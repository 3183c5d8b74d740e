"""The `satsgate` command: serve (dev node, or beside a Core Lightning node)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence

from satsgate.backends import BackendConfigError, make_backend
from satsgate.config import Settings, load_settings
from satsgate.lightning import LightningBackend


def build_backend(settings: Settings) -> LightningBackend:
    """The configured backend; exits with the reason when there is none."""
    try:
        return make_backend(settings)
    except BackendConfigError as exc:
        raise SystemExit(str(exc)) from None


async def _serve(settings: Settings) -> None:
    from satsgate.runner import freeze_startup_heap, start_service

    handle = await start_service(settings, build_backend(settings))
    freeze_startup_heap()
    logging.getLogger("satsgate").info(
        "satsgate listening on %s (backend %s, network %s, data %s)",
        handle.url,
        settings.backend,
        settings.network,
        settings.data_dir,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await handle.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="satsgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP and MCP service")
    serve.add_argument("--config", help="TOML settings file")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--data-dir")
    serve.add_argument("--base-url", help="public address used in links")
    serve.add_argument("--backend", choices=("dev", "cln", "lnd"))
    serve.add_argument("--network", help="expected network (default regtest)")
    serve.add_argument("--cln-rpc", help="path to Core Lightning's lightning-rpc socket")
    serve.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = load_settings(
            args.config,
            {
                "host": args.host,
                "port": args.port,
                "data_dir": args.data_dir,
                "base_url": args.base_url,
                "backend": args.backend,
                "network": args.network,
                "cln_rpc": args.cln_rpc,
            },
        )
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
