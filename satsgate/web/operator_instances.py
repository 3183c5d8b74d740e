"""The operator page's card of the instances sharing the store
(satsgate/cluster/status.py gives their state)."""

from __future__ import annotations

from typing import Any

from satsgate.web.pages import table


def instances_section(state: dict[str, Any] | None) -> str:
    """The operator page's card: the instances sharing this store."""
    if state is None:
        return ""
    rows = (
        (
            i["instance"],
            i["host"],
            i["pid"],
            i["state"],
            f"{i['heartbeat_age_s']:.1f} s ago",
            ", ".join(i["duties"]) or "-",
        )
        for i in state["instances"]
    )
    return (
        '<section class="card" id="instances"><h2>Instances</h2>'
        + table(
            ("instance", "host", "pid", "state", "last heartbeat", "duties"),
            rows,
            numeric={2},
            table_id="instances-table",
        )
        + "</section>"
    )
