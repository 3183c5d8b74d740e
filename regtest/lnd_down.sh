#!/usr/bin/env bash
# Stop what lnd_up.sh started. --clean also deletes the chain and node state.
# shellcheck source=lnd_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lnd_lib.sh"
clean=false
[ "${1:-}" = "--clean" ] && clean=true

bash "$REGTEST_DIR/lnd_satsgate.sh" stop >/dev/null 2>&1 || true
for name in satsgate payer; do
  pid="$(cat "$STATE_DIR/lnd-$name.pid" 2>/dev/null || true)"
  [ -n "$pid" ] || continue
  lncli_of "$name" stop >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$STATE_DIR/lnd-$name.pid"
done
btc stop >/dev/null 2>&1 || true
for _ in $(seq 30); do btc getblockcount >/dev/null 2>&1 || break; sleep 1; done
if $clean; then rm -rf "$STATE_DIR"; else rm -f "$STATE_DIR/mode"; fi
say "down"
