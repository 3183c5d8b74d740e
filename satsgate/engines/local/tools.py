"""Running an external tool (espeak-ng, ffmpeg, ffprobe) for a paid call: off the event
loop as an asyncio subprocess, bounded in time (killed past it), bounded in number (a
semaphore per engine), its failure an EngineError the gate refunds.

The tools get their input through files or stdin, never through the shell: nothing a
caller sends is ever parsed as a command line option (text goes on stdin). A tool's
stdin is an OS pipe (:func:`start_tool`), whatever the event loop: uvloop gives a child
a socket for asyncio's ``PIPE``, and a program that opens ``/dev/stdin`` by its path
(apertium's scripts do) cannot open a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)


# Tools run at a lower CPU priority than the server, so its free endpoints stay quick while
# they work (``nice`` is coreutils; without it they run as they are).
_NICE = ("nice", "-n", "10") if shutil.which("nice") else ()


class ToolRunner:
    """Runs tools with at most ``parallel`` at once, each within ``timeout_s``."""

    def __init__(self, timeout_s: float, parallel: int | None = None) -> None:
        self.timeout_s = timeout_s
        self._slots = asyncio.Semaphore(parallel or max(1, os.cpu_count() or 1))

    async def run(
        self,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        what: str = "the engine",
    ) -> bytes:
        """stdout of ``args``; EngineError TIMEOUT past the time limit, SERVICE_ERROR when
        the tool fails (its stderr goes to the log, never to the caller)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        async with self._slots:
            proc = await start_tool([*_NICE, *args], stdin)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), limit)
            except TimeoutError:
                await _kill(proc)
                raise EngineError(
                    ErrorCode.TIMEOUT, f"{what.capitalize()} did not finish within {limit:g} s."
                ) from None
            except asyncio.CancelledError:
                await _kill(proc)
                raise
        if proc.returncode != 0:
            log.warning(
                "%s exited %s: %s", args[0], proc.returncode, err.decode(errors="replace")[-800:]
            )
            raise EngineError(ErrorCode.SERVICE_ERROR, f"{what.capitalize()} failed on this input.")
        return out


async def start_tool(
    args: Sequence[str], stdin: bytes | None, *, start_new_session: bool = False
) -> asyncio.subprocess.Process:
    """``args`` started with stdout and stderr piped to this process, and ``stdin`` (None:
    nothing, /dev/null) on an OS pipe, written from a thread: the pipe holds 64 KiB, the
    rest goes as the tool reads, and the writing ends at the last byte or when the tool
    is gone (it holds the pipe's only read end)."""
    read_end, write_end = os.pipe() if stdin is not None else (None, None)
    try:
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL if read_end is None else read_end,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=start_new_session,
        )
    except BaseException:
        if write_end is not None:
            os.close(write_end)
        raise
    finally:
        if read_end is not None:  # the tool holds its own copy now
            os.close(read_end)
    if stdin is not None and write_end is not None:
        asyncio.get_running_loop().run_in_executor(None, _write_all, write_end, stdin)
    return proc


def _write_all(fd: int, data: bytes) -> None:
    """``data`` into the pipe ``fd``, then its end (closed); a tool gone before the last
    byte (EPIPE) ends the writing, quietly: its exit status tells what happened."""
    with contextlib.suppress(OSError), open(fd, "wb", buffering=0) as pipe:
        view = memoryview(data)
        while view:
            view = view[pipe.write(view) or 0 :]


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        await asyncio.shield(proc.wait())


async def probe_media(runner: ToolRunner, path: Path) -> dict[str, Any]:
    """ffprobe's format, streams and chapters of a file, as JSON."""
    out = await runner.run(
        [
            "ffprobe", "-v", "error", "-print_format", "json",
            "-show_format", "-show_streams", "-show_chapters", str(path),
        ],
        what="reading the audio",
    )  # fmt: skip
    doc: dict[str, Any] = json.loads(out)
    return doc


def wav_duration_s(data: bytes) -> float:
    """Duration of a PCM WAV from its fmt and data chunks (espeak-ng's own output)."""
    pos, byte_rate = 12, 0
    while pos + 8 <= len(data):
        chunk = data[pos : pos + 4]
        size = int.from_bytes(data[pos + 4 : pos + 8], "little")
        if chunk == b"fmt ":
            byte_rate = int.from_bytes(data[pos + 16 : pos + 20], "little")
        elif chunk == b"data":
            if not byte_rate:
                break
            return min(size, len(data) - pos - 8) / byte_rate
        pos += 8 + size + (size & 1)
    raise EngineError(ErrorCode.SERVICE_ERROR, "The engine produced no audio.")
