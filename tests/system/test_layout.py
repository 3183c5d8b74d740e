"""The house rules the layout keeps: SQL only in the store, no face reaching through the
gate into its collaborators' resources, backends found by protocol, never by class."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "satsgate"


def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(PACKAGE.parent)): path.read_text(encoding="utf-8")
        for path in PACKAGE.rglob("*.py")
    }


def test_sqlite_is_used_only_by_the_store_and_the_dev_node() -> None:
    # The dev node keeps its own database (it plays a Lightning node's part).
    allowed = ("satsgate/store/", "satsgate/backends/dev.py")
    users = [
        name
        for name, text in _sources().items()
        if re.search(r"^\s*(import sqlite3|from sqlite3 )", text, re.M)
        and not name.startswith(allowed)
    ]
    assert users == []


def test_faces_do_not_reach_through_the_gate() -> None:
    reaching = re.compile(r"\bgate\.(store|settings|jobs|refunds|files|backend|engines)\b")
    found = [name for name, text in _sources().items() if reaching.search(text)]
    assert found == []


def test_no_backend_is_recognised_by_its_class_or_by_name() -> None:
    by_class = re.compile(r"isinstance\([^)]*,\s*(DevBackend|ClnBackend|LndBackend)\)")
    by_name = re.compile(r"getattr\([^)]*backend[^)]*\)")
    found = [
        name for name, text in _sources().items() if by_class.search(text) or by_name.search(text)
    ]
    assert found == []
