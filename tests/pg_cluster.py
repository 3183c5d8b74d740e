"""A throwaway PostgreSQL cluster for the tests: initdb and pg_ctl in a temporary
directory, listening on a free loopback port, removed after.

PostgreSQL refuses to run as root: as root (CI, the dev machines) the cluster belongs
to the ``postgres`` user Debian's package makes, and its programs run as that user
(``runuser``), as Debian's ``pg_ctlcluster`` does. scripts/setup.sh --test installs the
``postgresql`` package; without its programs the PostgreSQL tests skip, except in CI.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

_names = itertools.count(1)


def postgres_bindir() -> Path | None:
    """Where initdb and pg_ctl are (Debian keeps them out of PATH), newest version first."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(found).resolve().parent
    for candidate in sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2])
    )[::-1]:
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    return None


class PgCluster:
    """A running cluster; :meth:`new_database` makes an empty database for one test."""

    def __init__(self, bindir: Path, port: int) -> None:
        self.bindir = bindir
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix="satsgate-pg-"))
        self._user = None if os.geteuid() != 0 else pwd.getpwnam("postgres")

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._user is not None:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(
            command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60
        )

    def start(self) -> None:
        if self._user is not None:
            os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
        data = self.dir / "data"
        self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.resume()

    def resume(self) -> None:
        """Start the server on the cluster's data (after :meth:`start` made it, or after
        :meth:`pause`)."""
        # A test database: durability traded for speed (the tests check logic, not
        # crash safety of PostgreSQL itself); the socket in the cluster's directory.
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c max_connections=200"
        )
        data = self.dir / "data"
        self._run(
            "pg_ctl", "-D", str(data), "-l", str(self.dir / "log"), "-o", options, "-w", "start"
        )

    def pause(self) -> None:
        """Stop the server, keeping its data (as an operator's restart does)."""
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"t{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextlib.contextmanager
def running_cluster(bindir: Path, port: int) -> Iterator[PgCluster]:
    cluster = PgCluster(bindir, port)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
