"""Schema-driven fuzzing: schemathesis reads the live /api/openapi.json and finds no 5xx.

One fresh server (its payments table is the fuzzer's to fill). Unavailable
services are left out: refusing them with 503 SERVICE_UNAVAILABLE is their
documented behaviour, not a server error.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error

from tests.conftest import ThreadedServer

MAX_EXAMPLES = 25  # per operation; the whole run stays well under a minute


@pytest.fixture
def api_schema(fresh_server: ThreadedServer) -> Any:
    return schemathesis.openapi.from_url(f"{fresh_server.url}/api/openapi.json")


def _unavailable(ctx: Any) -> bool:
    """An operation the document marks x-available: false (tests check the mark is true)."""
    return ctx.operation.definition.raw.get("x-available") is False


schema = schemathesis.pytest.from_fixture("api_schema").exclude(_unavailable)


@pytest.mark.slow
@pytest.mark.timeout(90)
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=[not_a_server_error])
