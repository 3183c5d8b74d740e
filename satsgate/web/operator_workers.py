"""The operator page's card of the CPU workers (satsgate.workers.status gives its figures)."""

from __future__ import annotations

from typing import Any

from satsgate.web.pages import table
from satsgate.workers.status import SILENT_AFTER_S


def workers_section(workers: dict[str, Any] | None) -> str:
    """The operator page's card: the workers, the queue's depth and its oldest job."""
    if workers is None:
        return (
            '<section class="card" id="workers"><h2>CPU workers</h2><p class="muted">'
            "CPU jobs run in this process's own pool. Set <code>[workers] mode = "
            '"queue"</code> and run <code>satsgate worker</code> to add machines.'
            "</p></section>"
        )
    oldest = workers["oldest_wait_s"]
    rows = (
        (
            w["name"],
            w["engines"],
            w["concurrency"],
            w["running"],
            w["done"],
            f"{w['heartbeat_age_s']:.1f} s ago"
            + (" (silent)" if w["heartbeat_age_s"] > SILENT_AFTER_S else ""),
        )
        for w in workers["workers"]
    )
    return (
        '<section class="card" id="workers"><h2>CPU workers</h2>'
        f'<p id="workers-queue">{workers["queued"]} waiting, {workers["running"]} running'
        + (f"; the oldest has waited {oldest:.1f} s" if oldest is not None else "")
        + "</p>"
        + table(
            ("worker", "engines", "slots", "running", "done", "last heartbeat"),
            rows,
            numeric={2, 3, 4},
            table_id="workers-table",
        )
        + "</section>"
    )
