"""The gate's own checks of one paid generate-text call, in process, without the network,
the store or the SDK: what satsgate itself spends on a proxied call before and around
the provider request.

    python bench/gate_checks.py            # prints one JSON object

Timed per call (the best of 7 repeats of 500 calls, so a busy machine's preemption
counts as little as it can): both availability checks of ``_paid_call`` and
``Challenger.prevalidate`` (without, then with the params), the schema, the check before
payment of a text call, the price, the handler's reads of the chosen model, and the
rate limiter's client key. ``validate`` is the schema alone. Run it with another tree on
PYTHONPATH to compare two versions on one machine: the file itself uses only what both
have.
"""

from __future__ import annotations

import json
import timeit
from typing import Any

from satsgate.edge.ratelimit import client_key
from satsgate.engines.config import parse_providers
from satsgate.engines.registry import Binding, Engines
from satsgate.payments.challenger import validate_params
from satsgate.services.ai.text import GENERATE_TEXT
from satsgate.services.catalog.rates import FALLBACK

BODY = {"prompt": "Say hello.", "modelId": 31}  # bench/proxy_overhead.py's call
CONFIG = parse_providers(
    {
        "bench": {
            "kind": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key": "unused",
            "models": {"31": "bench-mini", "1": "bench-mini", "6": "bench-mini"},
        }
    }
)["bench"]
ENGINES = Engines({"text": (Binding(object(), "provider", "bench", provider=CONFIG),)}, {})


def gate_checks() -> None:
    spec = GENERATE_TEXT
    spec.unavailable_reason(ENGINES, None)
    params: Any = validate_params(spec, dict(BODY), FALLBACK)
    spec.unavailable_reason(ENGINES, params)
    params.checked()
    spec.quote_sats(params, FALLBACK)
    _ = (params.chosen_model, params.chosen_model)
    client_key("127.0.0.1", [], ())


def per_call_us(stmt: str, number: int = 500) -> float:
    best = min(timeit.repeat(stmt, globals=globals(), number=number, repeat=7))
    return round(best / number * 1e6, 1)


if __name__ == "__main__":
    print(
        json.dumps(
            {
                "gate_checks_us": per_call_us("gate_checks()"),
                "validate_us": per_call_us("validate_params(GENERATE_TEXT, dict(BODY), FALLBACK)"),
            }
        )
    )
