"""Output files: written under the data dir, served by expiring signed URLs.

A URL is ``/api/files/<name>?exp=<unix s>&sig=<hmac>``; the signature covers
name and expiry, so a URL cannot be extended or pointed at another file.
Names are random, so one caller cannot guess another's output.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class StoredFile:
    name: str
    url: str
    size: int


class FileStore:
    def __init__(self, root: Path, base_url: str, secret: str, ttl_s: int) -> None:
        self.root = Path(root)
        self._base_url = base_url.rstrip("/")
        self._key = hashlib.sha256(b"satsgate-files\0" + secret.encode()).digest()
        self._ttl_s = ttl_s

    def _sign(self, name: str, exp: int) -> str:
        return hmac.new(self._key, f"{name}\n{exp}".encode(), hashlib.sha256).hexdigest()[:32]

    def url_for(self, name: str, ttl_s: int | None = None) -> str:
        exp = int(time.time()) + (self._ttl_s if ttl_s is None else ttl_s)
        return f"{self._base_url}/api/files/{name}?exp={exp}&sig={self._sign(name, exp)}"

    async def save(self, data: bytes, ext: str, ttl_s: int | None = None) -> StoredFile:
        """Store ``data``; its URL is valid for ``ttl_s`` seconds (default: the
        configured file URL lifetime)."""
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
        if exp_i < time.time() or not hmac.compare_digest(self._sign(name, exp_i), sig):
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
