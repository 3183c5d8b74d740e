"""A secret made once in the data directory: one winner among concurrent starts, 0600."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from satsgate.config.secret_file import read_or_create_secret


def test_concurrent_creators_agree_on_one_secret_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "data" / "server_secret"
    start = threading.Barrier(8)
    seen: list[str] = []

    def create(n: int) -> None:
        start.wait()
        seen.append(read_or_create_secret(path, lambda: f"secret-{n}"))

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and len(set(seen)) == 1 and seen[0].startswith("secret-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["server_secret"]  # no temporary left
    assert read_or_create_secret(path, lambda: "another") == seen[0]
    path.write_text("kept as it is\n")
    assert read_or_create_secret(path, lambda: "another") == "kept as it is"
