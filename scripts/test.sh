#!/usr/bin/env bash
# Install everything the tests need, then run lint, types and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"
# One command a line: under `set -e` a failure inside an `a && b` list (but the last
# command's) does not stop the script, and a lint error must fail the run.
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy"
mypy
# The coverage floor of satsgate/ (line coverage of the test run, both workers combined;
# processes the tests spawn are not counted). Two workers (pytest-xdist): much of the
# suite waits on subprocesses, real-time audio and loopback servers, so the second core
# is used; arguments after ours win (`scripts/test.sh -n 0` runs in one process). Each
# test file runs whole on one worker, in its order (`--dist loadfile`): a module's servers
# start once, and no test runs apart from the ones before it in its file.
echo "== pytest" && pytest -q -p no:cacheprovider -n 2 --dist loadfile --cov=satsgate \
  --cov-report=term:skip-covered --cov-fail-under=85 "$@"
# The money tests again with every server they start keeping its store on PostgreSQL (a
# throwaway cluster the run starts; tests/conftest.py): the paid path, payouts, Cashu,
# jobs, held requests, MCP and the crash tests. The tests parametrized over both engines
# already ran on each above, and are left out here.
echo "== pytest, money tests on PostgreSQL" && SATSGATE_TEST_STORE=postgres pytest -q \
  -p no:cacheprovider -n 2 --dist loadfile -k "not sqlite and not postgres" \
  tests/payments tests/payouts tests/faults tests/jobs tests/mcp tests/outreach
