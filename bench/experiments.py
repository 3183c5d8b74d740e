"""Server-side experiments: proposed satsgate changes, applied in the bench process only.

    python bench/run.py --experiment proposals
    python bench/run.py --experiment fast-macaroon --experiment inline-store

Each one stands for a concrete change proposed for satsgate; it is applied by
replacing one function or instance attribute here, never by editing satsgate.
``run.py`` then runs a second server with them next to the stock one and writes
results/compare-<names>.*, never latest.*.

Adopted into satsgate and so gone from here: the integer BOLT11 encoder
(``satsgate.lightning.invoices.sign_invoice``), the dev node's ``synchronous=NORMAL``, the
render-card pre-check cache, one-shot HMACs, one read for a known-length body,
V2 macaroons read and written directly (``satsgate.payments.macaroon_v2``) and the
store's point reads and one-statement writes on the event loop.

* ``inline-devnode``: the dev node signs and INSERTs on the event loop instead of its
  thread (``_run``); not in the ``proposals`` set.

Measured and settled, so gone from here too: ``precheck-pool`` (render-card's
pre-payment layout check in the CPU process pool: no gain beyond noise, +~3 ms on a
paid render call) and ``precheck-cache`` (adopted: ``PrecheckMemo``, app[PRECHECKS]).

``proposals`` stands for every experiment not marked otherwise (none today).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

# satsgate.lightning.backend first: in a tree from before the root was grouped into
# packages (bench/ab.py runs older trees) satsgate.lightning is a module, so the import
# fails there at once, before satsgate.server could be looked up elsewhere.
try:
    from satsgate.lightning.backend import LightningBackend
    from satsgate.server import app as app_module
except ImportError:
    from satsgate import app as app_module  # type: ignore[no-redef]
    from satsgate.lightning import LightningBackend  # type: ignore[attr-defined,no-redef]

BACKEND, GATE = app_module.BACKEND, app_module.GATE

T = TypeVar("T")

NAMES = ("inline-devnode",)
# The set measured in results/compare-proposals.*: ``--experiment proposals``.
PROPOSALS: tuple[str, ...] = ()

# ab.py runs the bench's own files against older satsgate trees too: these two steps
# find what moved since (the dev node's module, the handlers' CPU pool).


def dev_backend(data_dir: Path) -> LightningBackend:
    """The dev node, from satsgate.backends.dev (or satsgate.dev_backend in older trees)."""
    try:
        from satsgate.backends.dev import DevBackend
    except ImportError:
        from satsgate.dev_backend import DevBackend  # type: ignore[import-not-found,no-redef]
    return DevBackend(data_dir)


def pool_holder(app: web.Application) -> Any:
    """What holds the handlers' CPU pool: the handler resources' CPU runner, or in older
    trees the gate's runner (``_cpu``) or the gate itself (``_cpu_pool``)."""
    handlers = getattr(app_module, "HANDLERS", None)
    if handlers is not None:
        return app[handlers].cpu
    gate = app[GATE]
    return getattr(gate, "_cpu", gate)


def pool_attribute(holder: Any) -> str:
    return "_cpu_pool" if hasattr(holder, "_cpu_pool") else "pool"


async def _inline(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


CHOICES = (*NAMES, "proposals")


def expand(names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        for item in PROPOSALS if name == "proposals" else (name,):
            if item not in out:
                out.append(item)
    return out


def apply(app: web.Application, names: list[str]) -> None:
    names = expand(names)
    unknown = set(names) - set(NAMES)
    if unknown:
        raise SystemExit(f"unknown experiment(s): {', '.join(sorted(unknown))}; know {NAMES}")
    if "inline-devnode" in names:
        app[BACKEND]._run = _inline  # type: ignore[attr-defined]
