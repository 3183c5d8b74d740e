"""What crosses the queue: a CPU function by name, its arguments and its outcome as bytes.

A job names its function as ``module:qualname`` (never pickled code), and only a
top-level function of a satsgate module is run (:func:`resolve`). Arguments and outcomes
are pickled, as the process pool pickles them, and read back with an unpickler that
builds nothing but plain values, satsgate's own classes and exceptions
(:class:`_SafeUnpickler`): whoever can write the queue's table can make a worker run a
satsgate engine function on input of their choosing, not arbitrary code.

Inputs travel as values (bytes, text, satsgate's dataclasses): no CPU function takes a
path that only the gateway's machine has (:func:`check_portable` refuses one).
"""

from __future__ import annotations

import builtins
import importlib
import io
import pickle
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from satsgate.engines.errors import EngineError
from satsgate.errors import ErrorCode

# The engine name a worker's ``--engines`` selects, by the module a CPU function lives in;
# a module not listed here is named by its last component.
ENGINE_OF_MODULE: dict[str, str] = {
    "satsgate.engines.local.ocr_worker": "ocr",
    "satsgate.engines.local.espeak": "tts",
    "satsgate.engines.local.pdf": "pdf",
    "satsgate.services.comms.faxes": "pdf",
    "satsgate.engines.local.cards": "cards",
    "satsgate.engines.local.convert": "convert",
    "satsgate.engines.local.libreoffice": "convert",
    "satsgate.engines.local.image_ops": "images",
    "satsgate.engines.image_codec": "images",
    "satsgate.engines.local.pkpass": "passes",
    "satsgate.engines.local.whisper": "transcription",
    "satsgate.engines.local.book": "books",
    "satsgate.services.ai.epub_translation": "translation",
}
ENGINE_NAMES = frozenset(ENGINE_OF_MODULE.values())


class UnknownFunction(ValueError):
    """A job names something that is not a top-level function of a satsgate module."""


def function_ref(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a top-level function (ValueError for anything else: a
    lambda, a method, a function defined inside another cannot be named to a worker)."""
    module, name = getattr(fn, "__module__", ""), getattr(fn, "__qualname__", "")
    if not module or not name or "." in name or "<" in name:
        raise ValueError(f"{fn!r} is not a top-level function: it cannot go to a worker")
    return f"{module}:{name}"


def engine_of(ref: str) -> str:
    """The engine name of a function reference (see ENGINE_OF_MODULE)."""
    module = ref.split(":", 1)[0]
    return ENGINE_OF_MODULE.get(module, module.rsplit(".", 1)[-1])


def resolve(ref: str) -> Callable[..., Any]:
    """The function ``ref`` names; UnknownFunction unless it is a top-level function of a
    satsgate module."""
    module_name, _, name = ref.partition(":")
    if not module_name.startswith("satsgate.") or not name.isidentifier():
        raise UnknownFunction(f"not a satsgate function: {ref!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownFunction(f"cannot import {module_name}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn) or isinstance(fn, type) or getattr(fn, "__module__", "") != module_name:
        raise UnknownFunction(f"not a function of {module_name}: {name!r}")
    return fn  # type: ignore[no-any-return]


def check_portable(args: tuple[Any, ...]) -> None:
    """TypeError when an argument is a path (it names a file on this machine only)."""
    for arg in args:
        if isinstance(arg, PurePath):
            raise TypeError("a CPU job for a worker takes bytes, not a path on this machine")


# Builtins an argument or an outcome may be made of (no eval, getattr, __import__ ...).
_BUILTIN_TYPES = frozenset(
    {
        "bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int",
        "list", "object", "range", "set", "slice", "str", "tuple",
    }
)  # fmt: skip
_OTHER_MODULES = {
    "collections": frozenset({"OrderedDict", "deque", "defaultdict", "Counter"}),
    "copyreg": frozenset({"_reconstructor"}),
    "datetime": frozenset({"date", "datetime", "time", "timedelta", "timezone"}),
    "decimal": frozenset({"Decimal"}),
    "enum": frozenset({"Enum", "IntEnum", "StrEnum"}),
    "fractions": frozenset({"Fraction"}),
}


class _SafeUnpickler(pickle.Unpickler):
    """Builds plain values, exceptions, and classes defined in satsgate; nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins":
            found = getattr(builtins, name, None)
            if name in _BUILTIN_TYPES or (
                isinstance(found, type) and issubclass(found, BaseException)
            ):
                return found
        elif name in _OTHER_MODULES.get(module, ()):
            return super().find_class(module, name)
        elif module == "satsgate" or module.startswith("satsgate."):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} may not cross the queue")


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """A value :func:`dumps` made, read with the restricted unpickler."""
    return _SafeUnpickler(io.BytesIO(data)).load()


# -- outcomes ----------------------------------------------------------------------------


def value_outcome(value: Any) -> bytes:
    return dumps(("value", value))


def error_outcome(exc: BaseException) -> bytes:
    """The exception a CPU function raised, so that the gateway raises it again as the
    pool would: an EngineError by its fields (its constructor takes more than its
    message), another exception as itself when it crosses intact, else as a
    RuntimeError naming it."""
    if isinstance(exc, EngineError):
        fields = (str(exc.code), exc.message, exc.retry_after_s, exc.may_fall_back, exc.extra)
        try:
            return dumps(("engine_error", fields))
        except Exception:  # an extra that does not pickle
            return dumps(("engine_error", (str(exc.code), exc.message, None, None, {})))
    try:
        data = dumps(("raise", exc))
        loads(data)
        return data
    except Exception:
        return dumps(("raise", RuntimeError(f"{type(exc).__name__}: {exc}")))


def open_outcome(data: bytes) -> Any:
    """The value of an outcome; raises the exception it carries."""
    kind, payload = loads(data)
    if kind == "value":
        return payload
    if kind == "engine_error":
        code, message, retry_after_s, may_fall_back, extra = payload
        raise EngineError(
            ErrorCode(code),
            message,
            retry_after_s=retry_after_s,
            may_fall_back=may_fall_back,
            extra=extra,
        )
    if kind == "raise" and isinstance(payload, BaseException):
        raise payload
    raise ValueError(f"not an outcome: {kind!r}")
