"""Secrets kept in the data directory: made once, mode 0600, never replaced."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def read_or_create_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret in ``path`` (stripped), written from ``make()`` the first time.

    The file appears whole or not at all: it is written under a temporary name and
    linked into place, so of two processes starting at once one creates it, the other
    reads that one, and no reader sees a half-written file. An existing file is never
    replaced (the caller checks that what it holds is usable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fresh = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(make() + "\n")
            os.link(fresh, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the secret
        finally:
            fresh.unlink(missing_ok=True)
    return path.read_text().strip()
