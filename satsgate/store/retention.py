"""The retention sweep's SQL: the table rules it runs (:class:`ClearColumns`,
:class:`DeleteRows`), listed in satsgate.outreach.retention_rules."""

from __future__ import annotations

import re
from dataclasses import dataclass

from satsgate.store.engine import Engine
from satsgate.store.sql import Connection, table_columns

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class ClearColumns:
    table: str
    time_column: str
    columns: tuple[str, ...]
    max_age_s: int
    what: str  # for the log: "SMS texts"
    # Only rows whose columns equal these values: (("job_type", "held"),).
    match: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DeleteRows:
    table: str
    time_column: str
    max_age_s: int
    what: str
    match: tuple[tuple[str, str], ...] = ()


class RetentionRepository:
    def __init__(self, db: Engine) -> None:
        self._db = db

    async def apply(self, rule: ClearColumns | DeleteRows, now: int) -> int:
        """Rows cleared or deleted; 0 for a rule whose table (or a column) is missing."""
        names = [rule.table, rule.time_column, *(c for c, _ in rule.match)]
        if isinstance(rule, ClearColumns):
            names += list(rule.columns)
        if not all(_NAME.match(n) for n in names):
            raise ValueError(f"retention rule names a bad identifier: {names}")
        cutoff = now - rule.max_age_s
        match = "".join(f' AND "{c}" = ?' for c, _ in rule.match)
        args = (cutoff, *(v for _, v in rule.match))

        def go(conn: Connection) -> int:
            present = table_columns(conn, rule.table)
            if not present or not set(names[1:]) <= present:
                return 0
            if isinstance(rule, DeleteRows):
                sql = f'DELETE FROM "{rule.table}" WHERE "{rule.time_column}" < ?{match}'
            else:
                sets = ", ".join(f'"{c}" = NULL' for c in rule.columns)
                some = " OR ".join(f'"{c}" IS NOT NULL' for c in rule.columns)
                sql = (
                    f'UPDATE "{rule.table}" SET {sets} WHERE "{rule.time_column}" < ?{match}'
                    f" AND ({some})"
                )
            return int(conn.execute(sql, args).rowcount)

        return await self._db.run_in_transaction(go)
