"""The instances sharing the store, for ``satsgate status`` and ``/operator``
(satsgate/web/operator_instances.py): each one's
host and process, its last heartbeat, the duties it holds, and for a gone one whether
its work was taken up (and by whom)."""

from __future__ import annotations

import time
from typing import Any

from satsgate.store import Store


async def instances_state(store: Store, now: float | None = None) -> dict[str, Any]:
    """The instances, newest first (live ones before gone ones), with their duties."""
    now = time.time() if now is None else now
    holders = await store.duty_leases.holders()
    duties: dict[str, list[str]] = {}
    for duty, (holder, expires_ms) in sorted(holders.items()):
        if expires_ms / 1000 > now:
            duties.setdefault(holder, []).append(duty)
    rows = []
    for row in await store.instances.all():
        if row.gone_at is None:
            state = "live"
        elif row.recovered_at is not None:
            state = "gone, its work taken up"
        else:
            state = f"gone, being taken up by {row.recovering_by}" if row.recovering_by else "gone"
        rows.append(
            {
                "instance": row.instance_id,
                "host": row.host,
                "pid": row.pid,
                "state": state,
                "started_at": row.started_at,
                "heartbeat_age_s": round(max(0.0, now - row.heartbeat_at), 1),
                "duties": duties.get(row.instance_id, []),
            }
        )
    return {"instances": rows}


def instances_text(state: dict[str, Any]) -> str:
    """The instances as ``satsgate status`` prints them."""
    live = [i for i in state["instances"] if i["state"] == "live"]
    lines = [f"instances: {len(live)} live, {len(state['instances']) - len(live)} gone"]
    for i in state["instances"]:
        duties = ", ".join(i["duties"]) or "none"
        lines.append(
            f"instance {i['instance']}  host {i['host']}  pid {i['pid']}  {i['state']}"
            f"  last heartbeat {i['heartbeat_age_s']:.1f} s ago  duties: {duties}"
        )
    return "\n".join(lines)
