#!/usr/bin/env bash
# Install the mounted satsgate checkout, give lightningd an executable plugin
# path, then hand over to Core Lightning's own entrypoint.
set -euo pipefail

# /satsgate is mounted read-only: build from a copy (pip writes build files
# next to the sources).
rm -rf /tmp/satsgate-src && mkdir -p /tmp/satsgate-src
tar -C /satsgate --exclude=.git --exclude=.venv --exclude=regtest/.state -cf - . \
    | tar -C /tmp/satsgate-src -xf -
/opt/satsgate/bin/pip install --quiet --disable-pip-version-check /tmp/satsgate-src

# lightningd runs plugin= paths directly; this one runs satsgate in its venv.
cat > /usr/local/bin/satsgate-plugin <<'PLUGIN'
#!/bin/sh
exec /opt/satsgate/bin/python -m satsgate.plugin
PLUGIN
chmod +x /usr/local/bin/satsgate-plugin

exec /entrypoint.sh "$@"
