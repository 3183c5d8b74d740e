"""The hourly retention sweep: the rules of :mod:`satsgate.outreach.retention_rules`.

Run by the scheduler every hour with the wall clock; tests pass their own ``now``. What
is kept for the ledger is amounts and status only; the de-identified record of screened
communications (``screenings``) is kept.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from satsgate.outreach.retention_rules import RULES, DeleteFiles, RetentionRule
from satsgate.store.retention import RetentionRepository

log = logging.getLogger(__name__)


async def sweep(
    repo: RetentionRepository,
    data_dir: Path,
    now: int | None = None,
    rules: tuple[RetentionRule, ...] = RULES,
) -> dict[str, int]:
    """Apply every rule; how many rows (or files) each one cleared, by ``what``."""
    when = int(time.time()) if now is None else now
    done: dict[str, int] = {}
    for rule in rules:
        try:
            if isinstance(rule, DeleteFiles):
                count = _delete_files(data_dir / rule.subdir, when - rule.max_age_s)
            else:
                count = await repo.apply(rule, when)
        except Exception:
            log.exception("retention rule %r failed", rule)
            continue
        done[rule.what] = done.get(rule.what, 0) + count
        if count:
            log.info("retention: %d %s cleared", count, rule.what)
    return done


def _delete_files(directory: Path, cutoff: float) -> int:
    if not directory.is_dir():
        return 0
    count = 0
    for path in directory.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_mtime < cutoff:
                path.unlink()
                count += 1
        except FileNotFoundError:
            continue
    return count
