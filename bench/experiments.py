"""Server-side experiments: proposed satsgate changes, applied in the bench process only.

    python bench/run.py --experiment proposals
    python bench/run.py --experiment fast-macaroon --experiment inline-store

Each one stands for a concrete change proposed for satsgate; it is applied by
replacing one function or instance attribute here, never by editing satsgate.
``run.py`` then runs a second server with them next to the stock one and writes
results/compare-<names>.*, never latest.*.

Adopted into satsgate and so gone from here: the integer BOLT11 encoder
(``satsgate.invoices.sign_invoice``), the dev node's ``synchronous=NORMAL``, the
render-card pre-check cache, one-shot HMACs, one read for a known-length body,
V2 macaroons read and written directly (``satsgate.payments.macaroon_v2``) and the
store's point reads and one-statement writes on the event loop.

* ``precheck-pool`` (not in ``proposals``: no gain beyond noise in our runs, and
  +~3 ms on a paid render call, whose render then queues behind it): render-card's
  pre-payment layout check (``check_fits``) runs in the gate's CPU process pool
  instead of ``asyncio.to_thread`` (``proposals.precheck``).
* ``inline-devnode``: the dev node does the same as ``inline-store`` (signing + its
  INSERT on the loop); not in the ``proposals`` set.
* ``precheck-cache`` (a what-if, not in ``proposals``): a passed pre-check is
  remembered per request digest (LRU), so the paid repeat of a challenged request
  does not lay the card out again. With the bench's fixed 402 body every 402 after
  the first is a hit: that run shows the 402 path *without* the pre-check.

``proposals`` stands for every experiment not marked otherwise (none today).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from satsgate.app import BACKEND, GATE
from satsgate.errors import ErrorCode
from satsgate.lightning import LightningBackend

T = TypeVar("T")

NAMES = (
    "precheck-pool",
    "inline-devnode",
    "precheck-cache",
)
# The set measured in results/compare-proposals.*: ``--experiment proposals``.
PROPOSALS: tuple[str, ...] = ()

# ab.py runs the bench's own files against older satsgate trees too: these two steps
# find what moved since (the dev node's module, the handlers' CPU pool).


def dev_backend(data_dir: Path) -> LightningBackend:
    """The dev node, from satsgate.backends.dev (or satsgate.dev_backend in older trees)."""
    try:
        from satsgate.backends.dev import DevBackend
    except ImportError:
        from satsgate.dev_backend import DevBackend  # type: ignore[no-redef]
    return DevBackend(data_dir)


def pool_holder(app: web.Application) -> Any:
    """What holds the handlers' CPU pool: the handler resources' CPU runner, or in older
    trees the gate's runner (``_cpu``) or the gate itself (``_cpu_pool``)."""
    import satsgate.app

    handlers = getattr(satsgate.app, "HANDLERS", None)
    if handlers is not None:
        return app[handlers].cpu
    gate = app[GATE]
    return getattr(gate, "_cpu", gate)


def pool_attribute(holder: Any) -> str:
    return "_cpu_pool" if hasattr(holder, "_cpu_pool") else "pool"


async def _inline(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


async def _precheck_in_pool(app: web.Application) -> None:
    import asyncio

    from proposals.precheck import card_fit_error

    from satsgate.errors import ApiError

    gate = app[GATE]
    original = gate.prevalidate
    holder = pool_holder(app)
    pool = getattr(holder, pool_attribute(holder))

    async def prevalidate(spec: Any, params: Any) -> None:
        if spec.slug != "render-card":
            return await original(spec, params)
        loop = asyncio.get_running_loop()
        error = await loop.run_in_executor(pool, card_fit_error, params.to_request())
        if error is not None:
            raise ApiError(ErrorCode.L402_INVALID_PARAMS, error)
        return None

    gate.prevalidate = prevalidate  # type: ignore[method-assign]


CHOICES = (*NAMES, "proposals")


async def _precheck_cache(app: web.Application) -> None:
    from collections import OrderedDict

    from satsgate.services.base import request_digest

    gate = app[GATE]
    original = gate.prevalidate
    passed: OrderedDict[str, None] = OrderedDict()

    async def prevalidate(spec: Any, params: Any) -> None:
        key = request_digest(spec.slug, params)
        if key in passed:
            passed.move_to_end(key)
            return
        await original(spec, params)
        passed[key] = None
        if len(passed) > 4096:
            passed.popitem(last=False)

    gate.prevalidate = prevalidate  # type: ignore[method-assign]


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
    if "precheck-pool" in names:
        app.on_startup.append(_precheck_in_pool)  # after the gate exists (cleanup ctx first)
    if "precheck-cache" in names:
        app.on_startup.append(_precheck_cache)
    if "inline-devnode" in names:
        app[BACKEND]._run = _inline  # type: ignore[attr-defined]
