#!/usr/bin/env bash
# Install everything the tests need, then run lint, types and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff" && ruff check . && ruff format --check .
echo "== mypy" && mypy
# The coverage floor of satsgate/ (line coverage of the test run; processes the tests
# spawn are not counted).
echo "== pytest" && pytest -q -p no:cacheprovider --cov=satsgate --cov-report=term:skip-covered \
  --cov-fail-under=85 "$@"
