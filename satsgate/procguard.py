"""Process hygiene: private files, and pool workers that die with the server.

- :func:`private_umask` (called once by the ``satsgate`` and plugin entry points): every
  file satsgate creates is 0600 and every directory 0700 (the SQLite database and its
  WAL/SHM, the dev node's database, server_secret, output files).
- :func:`secure_data_dir` (at every start): the data dir is 0700, and what an earlier
  version left readable to others in it is made private.
- :func:`die_with_parent` (the process pool's worker initializer): a worker exits when
  the server that spawned it dies, even by SIGKILL, instead of lingering as an orphan.
  On Linux the kernel sends it SIGKILL (``PR_SET_PDEATHSIG``); everywhere a watchdog
  thread also checks once a second that its parent is still the server.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
_PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 1.0


def private_umask() -> int:
    """Files created from now on are readable by their owner only; returns the old mask."""
    return os.umask(PRIVATE_UMASK)


def secure_data_dir(path: Path) -> None:
    """Create ``path`` 0700 if needed, make it 0700, and take group/other access away
    from everything inside (a data dir an older version created 0755/0644)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    items = [str(path)]
    for root, dirs, files in os.walk(path):
        items.extend(os.path.join(root, name) for name in dirs + files)
    for item in items:
        try:
            mode = os.lstat(item).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                os.chmod(item, stat.S_IMODE(mode) & 0o700)
        except FileNotFoundError:
            continue  # removed meanwhile (an expiring output file)
        except PermissionError:  # not ours: say so, do not refuse to start
            log.warning("cannot make %s private (not owned by this user)", item)


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: exit when the process ``parent_pid`` is gone."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still covers it
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent_pid,), name="parent-watchdog", daemon=True
    ).start()


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if os.getppid() != parent_pid:  # reparented: the server is gone
            os._exit(1)
