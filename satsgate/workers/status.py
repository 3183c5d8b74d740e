"""The queue's state for ``satsgate status`` and ``/operator``: the workers with their
last heartbeat, the jobs waiting and running, and the oldest waiting job's age."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from satsgate.config.settings import Settings
from satsgate.store.cpu_queue import CpuQueueRepository, QueueState

# The queue's state, for /operator: set on an app whose CPU jobs go to the workers.
WORKERS_STATE: web.AppKey[Callable[[], Awaitable[QueueState]]] = web.AppKey("workers_state")

# A worker whose heartbeat is older than this is shown as silent (stopped or cut off).
SILENT_AFTER_S = 10.0


def queue_text(state: QueueState, mode: str) -> str:
    """The state as ``satsgate status`` prints it."""
    lines = [
        f"CPU jobs: {mode} mode; {state.queued} waiting, {state.running} running"
        + (
            f"; oldest waiting {state.oldest_wait_s:.1f} s"
            if state.oldest_wait_s is not None
            else ""
        )
    ]
    if not state.workers:
        lines.append("workers: none")
    for w in state.workers:
        silent = " SILENT" if w.heartbeat_age_s > SILENT_AFTER_S else ""
        lines.append(
            f"worker {w.name}  engines {w.engines}  slots {w.concurrency}  running {w.running}"
            f"  done {w.done}  last heartbeat {w.heartbeat_age_s:.1f} s ago{silent}"
        )
    return "\n".join(lines)


async def status_report(settings: Settings, as_json: bool) -> str:
    """What ``satsgate status`` prints: the queue's state, read from the store."""
    if not settings.store_url:
        note = "CPU jobs run in the gateway's own pool (workers need the store in PostgreSQL)"
        return json.dumps({"mode": "pool", "note": note}) if as_json else note
    from satsgate.store.postgres import PostgresDatabase

    db = PostgresDatabase(settings.store_url, pool_size=1)
    await db.open()
    try:
        state = await CpuQueueRepository(db).state()
    finally:
        await db.close()
    if as_json:
        body: dict[str, Any] = {"mode": settings.workers_mode, **state.as_dict()}
        return json.dumps(body, indent=2)
    return queue_text(state, settings.workers_mode)


async def operator_workers(app: web.Application) -> dict[str, Any] | None:
    """The queue's state for the operator's report; None in pool mode."""
    state = app.get(WORKERS_STATE)
    return (await state()).as_dict() if state is not None else None
