"""Schema-driven fuzzing.

1. schemathesis reads the live /api/openapi.json and finds no 5xx. One fresh
   server (its payments table is the fuzzer's to fill). Unavailable services are
   left out there: refusing them with 503 SERVICE_UNAVAILABLE, before the body is
   read, is their documented behaviour, not a server error.
2. Every service's params model, in process, whether or not the service is
   available here: a body is refused (ValidationError or L402_INVALID_PARAMS)
   or priced at no less than the service's declared minimum; nothing else.
3. The estimator of every /api/estimate-cost id, in process: a query is quoted
   or refused with L402_INVALID_PARAMS.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
import schemathesis
import schemathesis.generation.dictionaries  # imported early: see below
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from pydantic import ValidationError
from schemathesis.checks import not_a_server_error

from satsgate.errors import ApiError
from satsgate.services.base import PrecheckMemo, ServiceSpec, request_digest
from satsgate.services.catalog.pricing import estimate
from satsgate.services.catalog.rates import FALLBACK
from satsgate.services.registry import BY_SLUG, ESTIMATORS, SERVICES
from tests.conftest import ThreadedServer
from tests.services.test_services_quotes import PDF1, PDF2, VALID

# schemathesis imports that module lazily, deep inside hypothesis's recursion; being a
# pytest plugin, it is then assertion-rewritten, and Python 3.11's parser fails at that
# depth ("AST constructor recursion depth mismatch"). Imported here, at collection.

# Per operation. Over ~90 operations the run takes about a minute here without coverage
# and two to three times that under CI's coverage tracing: the timeout leaves room for it.
MAX_EXAMPLES = 15


@pytest.fixture
def api_schema(fresh_server: ThreadedServer) -> Any:
    return schemathesis.openapi.from_url(f"{fresh_server.url}/api/openapi.json")


def _unavailable(ctx: Any) -> bool:
    """An operation the document marks x-available: false (tests check the mark is true)."""
    return ctx.operation.definition.raw.get("x-available") is False


schema = schemathesis.pytest.from_fixture("api_schema").exclude(_unavailable)


@pytest.mark.slow
@pytest.mark.timeout(300)
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
    response = case.call()
    if response.status_code == 503 and response.headers.get("x-error-code") == [
        "SERVICE_UNAVAILABLE"
    ]:
        # A model this node does not serve (a local voice serves one TTS tier): refused
        # before any invoice, the documented answer, not a server error.
        event("model not offered here")
        return
    case.validate_response(response, checks=[not_a_server_error])


# -- the params models, in process --------------------------------------------------------
#
# The HTTP run above skips unavailable services (38 of 43 on a bare node): they answer 503
# before reading the body. Their validation code is reached here instead: every service's
# params model gets bodies drawn from its own JSON schema (hypothesis-jsonschema), bodies
# of the right field names with arbitrary JSON values (NaN and Infinity included, as
# json.loads accepts them), and a known valid body with one field replaced or left out. The
# gate's own order follows: validate, then the checks before any invoice, then the price.

PARAMS_EXAMPLES = 40  # per service
# What refusing a body may raise: a ValidationError, or an ApiError with one of these.
REFUSALS = {"L402_INVALID_PARAMS", "L402_CALLBACK_INVALID"}

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=24)
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@functools.cache
def _bodies(slug: str) -> st.SearchStrategy[Any]:
    """Schema-drawn bodies, arbitrary values under the schema's names, and a known valid
    body (tests/services/test_services_quotes.py) with one field replaced or left out: that last
    kind keeps real files, so the checks and prices that measure files run too."""
    spec = BY_SLUG[slug]
    schema = spec.params.model_json_schema()
    defs = {"$defs": schema["$defs"]} if "$defs" in schema else {}
    fields = sorted(schema["properties"])
    seeds = [body for s, body, _ in VALID if s == slug] or [dict(spec.example)]
    if slug == "merge-pdf":  # its example carries placeholders
        seeds = [{"documents": [PDF1, PDF2]}]
    valid = st.sampled_from(seeds)
    value_of = {
        name: st.one_of(from_schema({**schema["properties"][name], **defs}), JSON_VALUES)
        for name in fields
    }
    replaced = st.tuples(valid, st.sampled_from(fields)).flatmap(
        lambda seed: value_of[seed[1]].map(lambda value: {**seed[0], seed[1]: value})
    )
    dropped = st.tuples(valid, st.sampled_from(fields)).map(
        lambda seed: {k: v for k, v in seed[0].items() if k != seed[1]}
    )
    return st.one_of(
        from_schema(schema),
        st.dictionaries(st.sampled_from(fields), JSON_VALUES, max_size=len(fields)),
        replaced,
        dropped,
        valid,
    )


def _refused_or_priced(spec: ServiceSpec[Any], body: Any) -> str:
    """'invalid', 'refused' (before an invoice) or 'priced'; anything else fails the test."""
    try:
        params = spec.parse(body, FALLBACK)
    except ValidationError:
        return "invalid"
    except ApiError as exc:
        assert exc.code == "L402_INVALID_PARAMS", exc
        return "invalid"
    if spec.prevalidate is not None:
        try:
            asyncio.run(spec.prevalidate(params, PrecheckMemo()))
        except ApiError as exc:
            assert exc.code in REFUSALS, exc
            return "refused"
    amount_msat = spec.price_msat(params, FALLBACK)
    assert type(amount_msat) is int, amount_msat
    minimum_msat = spec.price_shape.minimum_msat(FALLBACK)
    assert amount_msat >= minimum_msat > 0, (amount_msat, minimum_msat)
    if spec.price_shape.model == "flat":
        assert amount_msat == minimum_msat
    request_digest(spec.slug, params)  # the 402 fingerprints the request
    return "priced"


@pytest.mark.slow
@pytest.mark.parametrize("slug", [spec.slug for spec in SERVICES])
@settings(
    max_examples=PARAMS_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_params_models_refuse_or_price_every_body(slug: str, data: st.DataObject) -> None:
    spec = BY_SLUG[slug]
    body = data.draw(_bodies(slug), label="body")
    event(_refused_or_priced(spec, body))


@pytest.mark.parametrize("slug", [spec.slug for spec in SERVICES])
def test_every_example_is_refused_or_priced(slug: str) -> None:
    # The examples with placeholders ("<base64 PDF>") are refused; the others are priced.
    spec = BY_SLUG[slug]
    outcome = _refused_or_priced(spec, dict(spec.example))
    assert outcome in ("priced", "refused"), (slug, outcome)


# -- /api/estimate-cost, in process ----------------------------------------------------------

ESTIMATE_EXAMPLES = 150


@st.composite
def _estimate_queries(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    service = draw(st.sampled_from(sorted(ESTIMATORS)))
    names = sorted(ESTIMATORS[service].params.model_fields)
    text = st.one_of(
        st.text(max_size=12),
        st.integers(min_value=-(10**7), max_value=10**7).map(str),
        st.floats().map(str),
        st.sampled_from(["1K", "2K", "4K", "768p", "best", "standard", "global", "es", "haw",
                         "+14155550123", "+99912345678", "true", "1e309"]),
    )  # fmt: skip
    query = draw(st.dictionaries(st.sampled_from([*names, "junk"]), text, max_size=4))
    return service, query


@pytest.mark.slow
@settings(
    max_examples=ESTIMATE_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(case=_estimate_queries())
def test_estimates_quote_or_refuse_every_query(case: tuple[str, dict[str, str]]) -> None:
    service, query = case
    try:
        quote = estimate(ESTIMATORS, service, query, FALLBACK)
    except ApiError as exc:
        assert exc.code == "L402_INVALID_PARAMS", exc
        event("refused")
        return
    assert type(quote["amountMsat"]) is int and quote["amountSats"] >= 1
    assert quote["unit"] == ESTIMATORS[service].unit
    event("quoted")
