"""This instance among those sharing the store: its lease, its duties, and the
recovery of the work of instances that are gone.

- **Lease.** The instance's row is renewed every ``lease_s / 6`` seconds. One whose
  heartbeat is older than ``lease_s`` is declared gone by whichever instance sees it
  first (one conditional UPDATE). An instance that finds itself declared gone (it could
  not reach the store for a whole lease while the others could) is *fenced*: its work
  is being taken up elsewhere, so it stops serving (``fenced`` is set; ``satsgate
  serve`` exits and its supervisor starts a new instance).
- **SQLite** is one process's store: the instance holds an exclusive lock on a file
  beside the database for its lifetime, so a second `satsgate serve` on the same file
  refuses to start, and every other instance recorded there is gone at once.
- **Recovery.** What a gone instance was serving (spent calls, jobs, held requests
  mid-release) is taken up by one instance, under a claim with its own deadline, each
  step conditional, then marked recovered. A restart recovers its own predecessor the
  same way (at once on SQLite; after the lease on PostgreSQL, by whichever instance is
  first).
- **Duties.** :meth:`Presence.holds_duty` claims a named duty for this instance (a row
  in ``duty_leases``); the heartbeat renews every duty it holds; another instance takes
  a duty once its holder's lease has run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

from satsgate.store import Store
from satsgate.store.instances import InstanceRow

log = logging.getLogger(__name__)

# (a gone instance's id) -> its work taken up, each step once
TakeUp = Callable[[str], Awaitable[None]]


def _pid_namespace() -> str:
    """This process's pid namespace (two containers may share a host name, never one);
    empty where it cannot be read: no pid is then looked up."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class StoreInUse(RuntimeError):
    """Another `satsgate serve` holds this SQLite store."""


class MisconfiguredInstance(RuntimeError):
    """This instance cannot serve beside the live ones (another server secret, or a
    files directory they do not share)."""


def secret_tag(server_secret: str) -> str:
    """What instances compare of their server secrets: a digest, never the secret."""
    return hashlib.sha256(b"satsgate-instance\0" + server_secret.encode()).hexdigest()[:16]


class Presence:
    def __init__(
        self,
        store: Store,
        *,
        lease_s: float,
        sqlite_lock: Path | None,
        server_secret: str,
        files_dir: Path,
    ) -> None:
        self.instance_id = store.instance_id
        self.lease_s = max(1.0, lease_s)
        # Set when another instance declared this one gone: stop serving.
        self.fenced = asyncio.Event()
        # At join: no other instance was live (a single instance, or the whole group
        # restarting): what only such a start may settle is settled then.
        self.alone = True
        self._store = store
        self._lock_path = sqlite_lock
        self._lock_file: IO[str] | None = None
        self._duties: set[str] = set()
        # When this instance's heartbeats last got through, and since when they have got
        # through without a gap: an instance judges the others only after a whole lease
        # of its own access to the store (after an outage that cut off every instance,
        # no instance declares the others gone for the heartbeats the outage kept out).
        self._last_beat = time.time()
        self._reachable_since = time.time()
        self._secret_tag = secret_tag(server_secret)
        # Each instance leaves a mark in the files directory: a live instance whose mark
        # is missing here writes its files elsewhere (the directory is not shared).
        self._marks = files_dir / ".instances"

    @property
    def heartbeat_s(self) -> float:
        return self.lease_s / 6

    async def join(self) -> None:
        """Record this instance; on SQLite, take the store's lock and declare every other
        instance gone; on PostgreSQL, declare gone a predecessor on this host whose
        process is not running (the others whose lease ran out are declared by the
        heartbeat, once this instance has had a lease of access to the store)."""
        now = int(time.time())
        instances = self._store.instances
        if self._lock_path is not None:
            self._take_lock(self._lock_path)
        self._last_beat = self._reachable_since = time.time()
        host, tag = socket.gethostname(), self._secret_tag
        pid_ns = _pid_namespace()
        await instances.register(self.instance_id, host, (os.getpid(), pid_ns), tag, now)
        await asyncio.to_thread(self._mark_files_dir)
        if self._lock_path is not None:  # the lock proves every other instance gone
            gone = await instances.expire(now + 1, now, but=self.instance_id)
            await self._free_duties(gone)
            if gone:
                log.info("instance(s) gone since their last heartbeat: %s", ", ".join(gone))
        others = []
        for row in await instances.all():
            if row.gone_at is not None or row.instance_id == self.instance_id:
                continue
            if row.heartbeat_at < now - self.lease_s:
                continue  # silent for a lease: declared gone by a heartbeat (run) soon

            if row.host == host and pid_ns and row.pid_ns == pid_ns and not _process_alive(row.pid):
                # A predecessor on this host (and pid namespace) that died (kill -9, a
                # crash): gone now, not after its lease.
                await instances.declare_gone(row.instance_id, now)
                await self._free_duties([row.instance_id])
                log.info("instance %s (pid %d on this host) is not running", row.instance_id,
                         row.pid)  # fmt: skip
                continue
            others.append(row)
        self.alone = not others
        await self._check_beside(others)
        log.info("instance %s joined the store (%s)", self.instance_id,
                 "alone" if self.alone else "beside live instances")  # fmt: skip

    def _mark_files_dir(self) -> None:
        self._marks.mkdir(parents=True, exist_ok=True)
        (self._marks / self.instance_id).touch()

    async def _check_beside(self, others: list[InstanceRow]) -> None:
        """Refuse to serve beside live instances this one cannot stand in for."""
        for row in others:
            if row.secret_tag != self._secret_tag:
                await self.leave()
                raise MisconfiguredInstance(
                    f"instance {row.instance_id} on this store has another server secret:"
                    " credentials it issued would be refused here. Give every instance the"
                    " same server_secret (docs/scale.md)"
                )
            if not (self._marks / row.instance_id).exists():
                await self.leave()
                raise MisconfiguredInstance(
                    f"instance {row.instance_id} on this store does not write its files to"
                    f" {self._marks.parent}: a file URL it issues would not be found here."
                    " Give every instance one shared files directory ([files] dir,"
                    " docs/scale.md)"
                )

    def _take_lock(self, path: Path) -> None:
        lock = path.open("a+")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StoreInUse(
                f"another satsgate serve is running on the SQLite store beside {path};"
                " several instances need the PostgreSQL store (docs/scale.md)"
            ) from None
        self._lock_file = lock

    async def recover_gone(self, take_up: TakeUp) -> int:
        """Take up the work of every gone instance not recovered yet (another instance
        may be doing it: each is claimed); how many were recovered here."""
        instances, count = self._store.instances, 0
        for gone in await instances.unrecovered():
            now = int(time.time())
            until = now + max(300, int(self.lease_s * 10))
            if not await instances.claim_recovery(gone, self.instance_id, now, until):
                continue
            await take_up(gone)
            await instances.recovered(gone, self.instance_id, int(time.time()))
            with contextlib.suppress(OSError):
                (self._marks / gone).unlink(missing_ok=True)
            log.info("took up the work of instance %s", gone)
            count += 1
        return count

    async def run(self, take_up: TakeUp) -> None:
        """The heartbeat, forever: renew the lease and the duties held, declare gone the
        instances whose lease ran out, and take up their work. A store that cannot be
        reached is retried at the next beat."""
        while not self.fenced.is_set():
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.beat(take_up)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store away: the next beat tries again
                log.warning("instance heartbeat failed: %s", exc)

    async def beat(self, take_up: TakeUp) -> None:
        now = time.time()
        instances = self._store.instances
        if not await instances.heartbeat(self.instance_id, int(now)):
            log.critical(
                "instance %s was declared gone by another instance (no heartbeat for %g s):"
                " its work is taken up there; it stops serving",
                self.instance_id,
                self.lease_s,
            )
            self.fenced.set()
            return
        beat_at = time.time()
        if beat_at - self._last_beat > self.lease_s / 2:
            # This instance was cut off from the store (an outage, a stall): the others
            # may have been too, so none is judged until they have had a lease to beat.
            self._reachable_since = beat_at
        self._last_beat = beat_at
        if self._duties:
            await self._store.duty_leases.renew(self.instance_id, self._lease_end_ms(now))
        if beat_at - self._reachable_since < self.lease_s:
            return
        gone = await instances.expire(int(now - self.lease_s), int(now), but=self.instance_id)
        await self._free_duties(gone)
        if gone:
            log.warning("instance(s) stopped heartbeating: %s", ", ".join(gone))
        await self.recover_gone(take_up)

    async def _free_duties(self, gone: list[str]) -> None:
        """The duties of instances just declared gone are free at once (not after their
        leases): the next instance to run one takes it."""
        for instance_id in gone:
            await self._store.duty_leases.release(instance_id)

    async def holds_duty(self, duty: str) -> bool:
        """Claim ``duty`` for this instance (or keep it): whether this instance runs it."""
        if self.fenced.is_set():
            return False
        now = time.time()
        held = await self._store.duty_leases.claim(
            duty, self.instance_id, int(now * 1000), self._lease_end_ms(now)
        )
        if held:
            self._duties.add(duty)
        else:
            self._duties.discard(duty)
        return held

    def _lease_end_ms(self, now: float) -> int:
        return int((now + self.lease_s) * 1000)

    async def leave(self) -> None:
        """A clean stop: the duties are free and the instance gone at once."""
        with contextlib.suppress(Exception):  # a store away: the lease runs out instead
            await self._store.duty_leases.release(self.instance_id)
            await self._store.instances.leave(self.instance_id, int(time.time()))
        with contextlib.suppress(OSError):
            (self._marks / self.instance_id).unlink(missing_ok=True)
        self.release_lock()

    def release_lock(self) -> None:
        """Let go of the SQLite store's lock: at a clean stop, and what the operating
        system does when the process dies (a test that plays a crash inside its own
        process calls it)."""
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file releases the lock
            self._lock_file = None
