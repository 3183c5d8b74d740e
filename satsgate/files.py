"""Output files: written under the data dir, served by expiring signed URLs.

A URL is ``/api/files/<name>?exp=<unix s>&sig=<hmac>``; the signature covers
name and expiry, so a URL cannot be extended or pointed at another file.
Names are random, so one caller cannot guess another's output.

A paid call stores its outputs through its own view of the store
(:meth:`FileStore.for_call`), which bounds what one call may store: the bytes of all
its outputs together stay within the cap of its service (``output_caps_by_service``),
else the cap of each output's kind (image, audio, video, document:
``max_output_<kind>_bytes``). An output past the cap is not written; the call fails
with ``INVALID_INPUT`` and, like every failure after payment, is refunded in full.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from satsgate.constant_time import texts_equal
from satsgate.errors import ApiError, ErrorCode

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}\.[a-z0-9]{1,8}$")

CONTENT_TYPES = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "jpg": "image/jpeg",
    "webp": "image/webp",
    "pdf": "application/pdf",
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "ogg": "audio/ogg",
    "mp4": "video/mp4",
    "glb": "model/gltf-binary",
    "epub": "application/epub+zip",
    "m4b": "audio/mp4",
    "txt": "text/plain; charset=utf-8",
    "json": "application/json",
    "pkpass": "application/vnd.apple.pkpass",
    "pkpasses": "application/vnd.apple.pkpasses",
    "srt": "text/plain; charset=utf-8",
    "vtt": "text/vtt",
    "gif": "image/gif",
    "bmp": "image/bmp",
    "tiff": "image/tiff",
    "tif": "image/tiff",
    "svg": "image/svg+xml",
    "html": "text/html; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    # convert-file's office, archive and media outputs
    "zip": "application/zip",
    "rtf": "application/rtf",
    "flac": "audio/flac",
    "opus": "audio/ogg",
    "m4a": "audio/mp4",
    "webm": "video/webm",
    "mkv": "video/x-matroska",
    "mov": "video/quicktime",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "odt": "application/vnd.oasis.opendocument.text",
    "ods": "application/vnd.oasis.opendocument.spreadsheet",
    "odp": "application/vnd.oasis.opendocument.presentation",
}


MiB = 1024 * 1024

# The kind of an output by its extension; anything else is a document.
OUTPUT_KINDS = {
    **dict.fromkeys(("png", "jpeg", "jpg", "webp", "gif", "bmp", "tiff", "tif", "svg"), "image"),
    **dict.fromkeys(("mp3", "wav", "ogg", "m4b", "flac", "opus", "m4a"), "audio"),
    **dict.fromkeys(("mp4", "webm", "mkv", "mov"), "video"),
}
# The default caps (Settings.max_output_<kind>_bytes): an image past 64 MiB is no output
# any image service is priced for (a 4096x4096 RGB bitmap is 48 MiB); a day of narration
# at 32 kbit/s is 330 MiB; a converted 5-minute 1080p clip fits in 512 MiB.
DEFAULT_OUTPUT_CAPS = {
    "image": 64 * MiB,
    "audio": 512 * MiB,
    "video": 512 * MiB,
    "document": 256 * MiB,
}


def output_kind(ext: str) -> str:
    return OUTPUT_KINDS.get(ext.lower(), "document")


@dataclass(frozen=True)
class OutputCaps:
    """The most bytes one paid call may store: per service, else per kind of output."""

    by_kind: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_OUTPUT_CAPS))
    by_service: Mapping[str, int] = field(default_factory=dict)

    def cap_for(self, service: str, ext: str) -> int:
        cap = self.by_service.get(service)
        if cap is not None:
            return cap
        kind = output_kind(ext)
        return self.by_kind.get(kind, DEFAULT_OUTPUT_CAPS[kind])


def output_too_large(service: str, size: int, cap: int) -> ApiError:
    """A paid call's outputs came to more than its cap: nothing more is stored."""
    return ApiError(
        ErrorCode.INVALID_INPUT,
        f"The output of {service} would be {size:,} bytes, more than the {cap:,} bytes "
        "this node stores for one call; send a smaller input (or a smaller scale or "
        "format).",
        extra={"output_bytes": size, "max_output_bytes": cap},
    )


@dataclass(frozen=True)
class StoredFile:
    name: str
    url: str
    size: int


class FileStore:
    def __init__(
        self,
        root: Path,
        base_url: str,
        secret: str,
        ttl_s: int,
        caps: OutputCaps | None = None,
    ) -> None:
        self.root = Path(root)
        self._base_url = base_url.rstrip("/")
        self._key = hashlib.sha256(b"satsgate-files\0" + secret.encode()).digest()
        self._ttl_s = ttl_s
        self.caps = caps or OutputCaps()
        self._service: str | None = None  # set on a paid call's view (for_call)
        self._stored = 0  # bytes that view has stored

    def for_call(self, service: str) -> FileStore:
        """The store as one paid call of ``service`` sees it: the same files and URLs,
        and :meth:`save` refuses what would take the call's outputs past its cap."""
        view = FileStore.__new__(FileStore)  # a shallow copy, without copy's protocol
        view.__dict__.update(self.__dict__)
        view._service, view._stored = service, 0
        return view

    def _sign(self, name: str, exp: int) -> str:
        return hmac.new(self._key, f"{name}\n{exp}".encode(), hashlib.sha256).hexdigest()[:32]

    def url_for(self, name: str, ttl_s: int | None = None) -> str:
        exp = int(time.time()) + (self._ttl_s if ttl_s is None else ttl_s)
        return f"{self._base_url}/api/files/{name}?exp={exp}&sig={self._sign(name, exp)}"

    async def save(self, data: bytes, ext: str, ttl_s: int | None = None) -> StoredFile:
        """Store ``data``; its URL is valid for ``ttl_s`` seconds (default: the
        configured file URL lifetime). On a paid call's view, ApiError INVALID_INPUT
        (nothing written) when the call's outputs would pass its cap."""
        if self._service is not None:
            cap = self.caps.cap_for(self._service, ext)
            if self._stored + len(data) > cap:
                raise output_too_large(self._service, self._stored + len(data), cap)
            self._stored += len(data)
        name = f"{secrets.token_urlsafe(18)}.{ext}"
        path = self.root / name
        await asyncio.to_thread(self._write, path, data)
        return StoredFile(name, self.url_for(name, ttl_s), len(data))

    def _write(self, path: Path, data: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)

    def resolve(self, name: str, exp: str, sig: str) -> Path | None:
        """The file's path if the URL is valid and unexpired, else None."""
        if not _NAME_RE.match(name):
            return None
        try:
            exp_i = int(exp)
        except ValueError:
            return None
        if exp_i < time.time() or not texts_equal(sig, self._sign(name, exp_i)):
            return None
        path = self.root / name
        return path if path.is_file() else None

    def remove_older_than(self, max_age_s: int) -> int:
        """Delete outputs older than max_age_s (scheduled); returns how many."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - max_age_s
        removed = 0
        for path in self.root.iterdir():
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    @staticmethod
    def content_type(name: str) -> str:
        return CONTENT_TYPES.get(name.rsplit(".", 1)[-1], "application/octet-stream")
