"""What the local image engines (images.py, on the server) and their work in the pool
workers (image_ops.py) share: the refusal of an input and finding a file a package ships.
Imports nothing heavy, so the server side stays light and the workers' module depends on
nothing above it."""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ImageOpError(ValueError):
    """The input cannot be processed: the service answers INVALID_INPUT (refunded)."""


def package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder).joinpath(*parts)
        if path.is_file():
            return path
    return None
