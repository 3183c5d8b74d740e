"""Running an external tool (espeak-ng, ffmpeg, ffprobe) for a paid call: off the event
loop as an asyncio subprocess, bounded in time (killed past it), bounded in number (a
semaphore per engine), its failure an EngineError the gate refunds.

The tools get their input through files or stdin, never through the shell: nothing a
caller sends is ever parsed as a command line option (text goes on stdin).
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
            proc = await asyncio.create_subprocess_exec(
                *_NICE,
                *args,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(stdin), limit)
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
