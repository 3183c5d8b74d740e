"""Image re-encoding for the AI services, run in the process pool (ctx.run_cpu).

A module of its own, importing Pillow alone: a pool worker that runs these imports
nothing else of satsgate's (no PDF stack, whose import changes Pillow's global
truncated-image setting for the whole worker).
"""

from __future__ import annotations

import io

from PIL import Image


def to_png(data: bytes) -> bytes:
    """Any image Pillow reads, as PNG (first frame)."""
    with Image.open(io.BytesIO(data)) as img:
        out = io.BytesIO()
        converted = img if img.mode in ("RGB", "RGBA", "L", "LA", "P") else img.convert("RGBA")
        converted.save(out, "PNG")
        return out.getvalue()


def convert_image(data: bytes, fmt: str) -> bytes:
    """``data`` re-encoded as ``fmt`` (png, jpeg or webp)."""
    with Image.open(io.BytesIO(data)) as img:
        out = io.BytesIO()
        if fmt == "jpeg":
            img.convert("RGB").save(out, "JPEG", quality=92)
        elif fmt == "webp":
            img.save(out, "WEBP", quality=92)
        else:
            img.save(out, "PNG")
        return out.getvalue()
