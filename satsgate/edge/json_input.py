"""Parse JSON from a client: every way it can fail is one ValueError, never a crash.

``json.loads`` raises RecursionError on deeply nested input and a plain ValueError (not
JSONDecodeError) for an integer of more than 4300 digits; both escaped the readers as
500s. Input nested deeper than :data:`MAX_DEPTH` is refused too, so that what parses
can still be validated, stored and echoed without hitting the recursion limit later.
A string holding a lone UTF-16 surrogate (``"\\ud800"`` without its pair; JSON's grammar
allows it, Unicode text does not) is refused too: such a string cannot be encoded, so
every later ``.encode()`` of it (a token's hash, a stored row) would raise. So is one
holding a NUL character (``"\\u0000"``): no field takes one, and PostgreSQL's text
cannot hold it (a lookup by such an id failed there).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


class JsonInputError(ValueError):
    """The text is not JSON this service accepts; the message says why, for the client."""


def loads(raw: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    try:
        value = json.loads(raw)
    except RecursionError:
        raise JsonInputError(f"it is nested more than {max_depth} levels deep") from None
    except UnicodeDecodeError:
        raise JsonInputError("it is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise JsonInputError(str(exc)) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise JsonInputError(str(exc).split(";")[0]) from None
    if _openings(raw) > max_depth and depth_exceeds(value, max_depth):
        raise JsonInputError(f"it is nested more than {max_depth} levels deep")
    if _may_hold_unstorable_text(raw):
        flaw = _unstorable_text(value)
        if flaw is not None:
            raise JsonInputError(f"a string in it holds {flaw}")
    return value


def _may_hold_unstorable_text(raw: str | bytes) -> bool:
    """False when no string of the text can hold a NUL or a lone surrogate: it has no
    ``\\u0000`` or ``\\uD...`` escape (JSON allows neither character unescaped in a
    string), and (bytes) no 0xED byte, the lead byte of a surrogate's UTF-8-like form that
    ``json.loads`` lets through, or (str) no character beyond ASCII."""
    # A backslash first: searching one byte is several times faster than searching the
    # escapes, and a body of base64 holds none.
    if isinstance(raw, bytes):
        escaped = b"\\" in raw and (b"\\u0000" in raw or b"\\ud" in raw or b"\\uD" in raw)
        return escaped or b"\xed" in raw
    escaped = "\\" in raw and ("\\u0000" in raw or "\\ud" in raw or "\\uD" in raw)
    return escaped or not raw.isascii()


def _unstorable_text(value: Any) -> str | None:
    """What makes a string (a value or a key) anywhere in ``value`` unstorable, or None."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a NUL character (\\u0000)"
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return "a lone UTF-16 surrogate (\\ud800-\\udfff)"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _openings(raw: str | bytes) -> int:
    """How many ``{`` and ``[`` the text holds: no value nests deeper than that (those in
    strings only add to it), so a text with at most ``max_depth`` of them is not walked."""
    if isinstance(raw, str):
        return raw.count("{") + raw.count("[")
    return raw.count(b"{") + raw.count(b"[")


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether containers nest deeper than ``max_depth`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
