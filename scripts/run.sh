#!/usr/bin/env bash
# Install and run satsgate on its embedded defaults: built-in dev node (regtest),
# SQLite under ./satsgate-data, local engines. Extra arguments go to `satsgate serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/satsgate serve --host 127.0.0.1 --port "${PORT:-8402}" --data-dir "${DATA_DIR:-./satsgate-data}" "$@"
