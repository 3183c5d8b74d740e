#!/usr/bin/env bash
# Install everything the tests need, then run lint, types and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff" && ruff check .
echo "== mypy" && mypy
echo "== pytest" && pytest -q -p no:cacheprovider "$@"
