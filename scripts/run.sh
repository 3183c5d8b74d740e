#!/usr/bin/env bash
# Install and run satsgate on its embedded defaults: built-in dev node (regtest),
# SQLite under ./satsgate-data, local engines. Extra arguments go to `satsgate serve`.
# The set-up runs again only when pyproject.toml or scripts/setup.sh changed since the
# last one that finished (the stamp in .venv), so a second start takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.satsgate-setup
wanted=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/satsgate ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  scripts/setup.sh
  echo "$wanted" > "$stamp"
fi
exec .venv/bin/satsgate serve --host 127.0.0.1 --port "${PORT:-8402}" --data-dir "${DATA_DIR:-./satsgate-data}" "$@"
