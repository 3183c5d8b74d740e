"""Start and stop the service on a port: used by the CLI and the Core Lightning plugin."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from satsgate.config.settings import Settings
from satsgate.edge.connection_guard import (
    ConnectionGuard,
    GuardConfig,
    GuardedSite,
    ensure_fd_limit,
)
from satsgate.engines import ProviderFactory
from satsgate.engines.providers import PROVIDER_KINDS
from satsgate.lightning.backend import LightningBackend
from satsgate.procguard import secure_data_dir
from satsgate.public_urls import SYSTEM_OUTBOUND, Outbound
from satsgate.server.app import STORE, create_app
from satsgate.server.log_levels import quiet_library_logs
from satsgate.store import Store


@dataclass
class ServiceHandle:
    runner: web.AppRunner
    app: web.Application
    url: str

    @property
    def store(self) -> Store:
        return self.app[STORE]

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_service(
    settings: Settings,
    backend: LightningBackend,
    *,
    provider_kinds: Mapping[str, ProviderFactory] = PROVIDER_KINDS,
    outbound: Outbound = SYSTEM_OUTBOUND,
) -> ServiceHandle:
    """Build the app, run its start-up (store, node, background tasks) and listen."""
    quiet_library_logs()
    secure_data_dir(settings.data_dir)
    app = create_app(settings, backend, provider_kinds=provider_kinds, outbound=outbound)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    try:
        await runner.setup()
    except BaseException:
        # A part that failed to start: those already started (the store and this
        # instance's lease among them) are stopped again.
        await runner.cleanup()
        raise
    try:
        config = GuardConfig.from_settings(settings)
        config = dataclasses.replace(
            config, max_connections=ensure_fd_limit(settings.max_connections)
        )
        guard = ConnectionGuard(config)
        site = GuardedSite(runner, settings.host, settings.port, guard)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    port = settings.port
    for address in runner.addresses:  # the bound socket tells the real port when 0 was asked
        port = int(address[1])
        break
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "") else settings.host
    return ServiceHandle(runner, app, f"http://{host}:{port}")


def freeze_startup_heap() -> None:
    """Move everything alive after start-up out of the garbage collector's sight.

    For a process whose main job is serving: the app, its catalog, pydantic's
    schemas and the imported modules are some hundred thousand tracked objects that
    live as long as the process, and a full collection walks them all with the event
    loop standing still. One runs whenever enough objects have outlived the younger
    generations, which under load the 30 s dedup cache's entries do. Frozen, the
    start-up objects are never scanned again; what requests allocate is collected as
    before. (What it did to the paid call's p99: bench/README.md.)
    """
    gc.collect()
    gc.freeze()
