#!/usr/bin/env bash
# Stop everything up.sh started. --clean also deletes the chain and node state.
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
clean=false
[ "${1:-}" = "--clean" ] && clean=true

if [ "$MODE" = docker ]; then
  if $clean; then dc down --volumes; else dc down; fi
else
  for node in satsgate_ln payer_ln; do "$node" stop >/dev/null 2>&1 || true; done
  btc stop >/dev/null 2>&1 || true
  # bitcoind exits a moment after answering stop.
  for _ in $(seq 30); do btc getblockcount >/dev/null 2>&1 || break; sleep 1; done
fi
if $clean; then rm -rf "$STATE_DIR"; else rm -f "$STATE_DIR/mode"; fi
say "down"
