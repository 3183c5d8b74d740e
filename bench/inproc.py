"""In-process timings that wrk cannot split out: render time alone, the gate's own share.

    python bench/inproc.py [--iterations 400] [--render-iterations 30]

Prints one JSON object on stdout (the bench runner reads it). Nothing listens on
a port: the app's start-up (store, dev node, gate) runs without a site.

* ``render``: ``satsgate.engines.local.cards.render_card`` called N times on
  the bench's render-card request, in this process (no pool, no IPC).
* ``gate_402``: ``Gate.challenge_for`` timed with ``perf_counter_ns``, minus the
  ``backend.create_invoice`` inside it (wrapped on the instance to time it), per
  iteration; the median is the gate's own share of the 402 path. The same difference
  in process CPU time (``process_time_ns``) is reported too: less sensitive to a
  busy machine, since time spent preempted does not count. The other steps
  of the 402 handler are timed too (schema validation, the render-card
  pre-check, building the 402 response) and so are the parts of the gate share
  (``store.payments.insert``, ``Gate.challenge_of``: macaroon + MPP challenge).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import experiments
from aiohttp import web
from satsgate_server import NOOP_PRICE_MSAT, NOOP_SPEC, NoopParams
from seed import insert_rows, make_rows, spec_for

from satsgate.backends.dev import DevBackend
from satsgate.config.settings import Settings
from satsgate.edge.http import result_response
from satsgate.engines.local import cards
from satsgate.payments.http import challenge_response
from satsgate.server.app import BACKEND, GATE, SETTINGS, STORE, create_app
from satsgate.services.documents.rendering import RENDER_CARD

RENDER_BODY: dict[str, Any] = {
    "template": "headline",
    "title": "Lightning is fast",
    "subtitle": "satsgate",
}

T = TypeVar("T")


def summary_ms(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) / 1e6, 4),
        "p90_ms": round(p90 / 1e6, 4),
        "min_ms": round(ordered[0] / 1e6, 4),
    }


def time_render(iterations: int, seconds: float = 0.0) -> dict[str, Any]:
    """Render the bench's card ``iterations`` times, and on until ``seconds`` have passed."""
    request = RENDER_CARD.params.model_validate(RENDER_BODY).to_request()
    for _ in range(3):  # fonts, caches
        cards.render_card(request)
    samples: list[int] = []
    size = 0
    until = time.perf_counter() + seconds
    while len(samples) < iterations or time.perf_counter() < until:
        t0 = time.perf_counter_ns()
        image = cards.render_card(request)
        samples.append(time.perf_counter_ns() - t0)
        size = len(image.data)
    return {**summary_ms(samples), "bytes": size, "format": request.fmt}


class _Timed:
    """Wrap an instance's coroutine method to record how long each call took.

    ``samples``: wall time (perf_counter_ns); ``cpu``: CPU time of the whole process
    over the same interval (all its threads: the store and dev-node threads work for it).
    """

    def __init__(self, fn: Callable[..., Awaitable[T]]) -> None:
        self.fn = fn
        self.samples: list[int] = []
        self.cpu: list[int] = []

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        c0, t0 = time.process_time_ns(), time.perf_counter_ns()
        try:
            return await self.fn(*args, **kwargs)
        finally:
            self.samples.append(time.perf_counter_ns() - t0)
            self.cpu.append(time.process_time_ns() - c0)


async def time_gate(iterations: int, data_dir: Path, names: list[str]) -> dict[str, Any]:
    settings = Settings(host="127.0.0.1", port=9, data_dir=data_dir)
    app = create_app(settings, DevBackend(data_dir))
    experiments.apply(app, names)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()  # start-up only: store, node, gate; no socket
    try:
        gate, backend, store = app[GATE], app[BACKEND], app[STORE]
        invoice_timer = _Timed(backend.create_invoice)
        insert_timer = _Timed(store.payments.insert)
        backend.create_invoice = invoice_timer  # type: ignore[method-assign]
        store.payments.insert = insert_timer  # type: ignore[method-assign]
        spec = RENDER_CARD
        base_url = settings.public_base_url
        validate, precheck, total, share, challenge_of, build = ([] for _ in range(6))
        share_cpu: list[int] = []
        for i in range(iterations + 20):
            warm = i < 20
            t0 = time.perf_counter_ns()
            params = gate.validate_params(spec, dict(RENDER_BODY))
            t1 = time.perf_counter_ns()
            await gate.prevalidate(spec, params)
            c2, t2 = time.process_time_ns(), time.perf_counter_ns()
            challenge = await gate.challenge_for(spec, params, via="http")
            t3, c3 = time.perf_counter_ns(), time.process_time_ns()
            challenge_response(challenge, base_url)
            t4 = time.perf_counter_ns()
            gate.challenge_of(challenge.payment)
            t5 = time.perf_counter_ns()
            if warm:
                continue
            validate.append(t1 - t0)
            precheck.append(t2 - t1)
            total.append(t3 - t2)
            share.append(t3 - t2 - invoice_timer.samples[-1])
            share_cpu.append(c3 - c2 - invoice_timer.cpu[-1])
            build.append(t4 - t3)
            challenge_of.append(t5 - t4)
        skip = 20
        paid = await time_paid_noop(app, iterations)
        return {
            "paid_noop": paid,
            "gate_share": summary_ms(share),
            "gate_share_cpu": summary_ms(share_cpu),
            "challenge_for": summary_ms(total),
            "create_invoice": summary_ms(invoice_timer.samples[skip:]),
            "insert_payment": summary_ms(insert_timer.samples[skip:]),
            "challenge_of": summary_ms(challenge_of),
            "validate_params": summary_ms(validate),
            "prevalidate": summary_ms(precheck),
            "challenge_response": summary_ms(build),
        }
    finally:
        await runner.cleanup()


async def time_paid_noop(app: web.Application, iterations: int) -> dict[str, Any]:
    """The paid no-op call's gate steps, in-process: verify, spend + dispatch, the response."""
    gate, store = app[GATE], app[STORE]
    params = NoopParams()
    spec = spec_for(NOOP_SPEC.slug, NOOP_SPEC.title, NOOP_PRICE_MSAT, params)
    rows = make_rows(spec, iterations + 20, app[SETTINGS])
    await insert_rows(store, rows)
    verify, execute, respond, total = [], [], [], []
    for i, row in enumerate(rows):
        auth = [f"L402 {row[-1]}"]
        t0 = time.perf_counter_ns()
        verified = await gate.verify_authorization(auth, NOOP_SPEC)
        t1 = time.perf_counter_ns()
        result, _ = await gate.execute_credential(verified, NOOP_SPEC, params, use_cache=False)
        t2 = time.perf_counter_ns()
        result_response(result)
        t3 = time.perf_counter_ns()
        if i >= 20:
            verify.append(t1 - t0)
            execute.append(t2 - t1)
            respond.append(t3 - t2)
            total.append(t3 - t0)
    return {
        "total": summary_ms(total),
        "verify_authorization": summary_ms(verify),
        "execute": summary_ms(execute),
        "result_response": summary_ms(respond),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--render-iterations", type=int, default=30, help="0: skip")
    parser.add_argument("--experiment", action="append", default=[], choices=experiments.CHOICES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="satsgate-bench-inproc-") as tmp:
        gate = asyncio.run(time_gate(args.iterations, Path(tmp) / "data", args.experiment))
    out: dict[str, Any] = {"gate_402": gate}
    if args.render_iterations > 0:
        out["render"] = time_render(args.render_iterations)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
