"""Decoding caller-supplied base64 files (data URI or raw), with size limits."""

from __future__ import annotations

import base64
import binascii
import re

_DATA_URI = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(;[\w-]+=[\w.-]+)*;base64,", re.IGNORECASE)


class BadBase64(ValueError):
    pass


def decode_base64_file(value: str, *, max_bytes: int) -> bytes:
    """Decode a data URI or raw base64 (standard or url-safe, padding optional)."""
    text = _DATA_URI.sub("", value.strip(), count=1)
    text = "".join(text.split())  # line breaks in pasted base64
    # 4 base64 characters carry 3 bytes: refuse oversize before decoding anything.
    if len(text) * 3 // 4 > max_bytes + 3:
        raise BadBase64(f"the file is larger than {max_bytes} bytes")
    if "-" in text or "_" in text:
        text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadBase64("not valid base64") from exc
    if not data:
        raise BadBase64("the file is empty")
    if len(data) > max_bytes:
        raise BadBase64(f"the file is larger than {max_bytes} bytes")
    return data
