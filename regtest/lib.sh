# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# Shared by the regtest scripts (sourced, not run): the mode, the ports, and
# one function per node's command line, so the scripts read the same in both modes.
#
# Modes (SATSGATE_REGTEST_MODE, chosen once by up.sh and remembered):
#   docker  the docker-compose.yml stack
#   native  bitcoind + lightningd binaries from PATH, state in SATSGATE_REGTEST_DIR
set -euo pipefail

REGTEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$REGTEST_DIR")"
STATE_DIR="${SATSGATE_REGTEST_DIR:-$REGTEST_DIR/.state}"

die() { echo "regtest: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }

if [ -z "${SATSGATE_REGTEST_MODE:-}" ]; then
  if [ -f "$STATE_DIR/mode" ]; then
    SATSGATE_REGTEST_MODE="$(cat "$STATE_DIR/mode")"
  elif docker compose version >/dev/null 2>&1; then
    SATSGATE_REGTEST_MODE=docker
  elif command -v bitcoind >/dev/null && command -v lightningd >/dev/null; then
    SATSGATE_REGTEST_MODE=native
  else
    die "needs Docker with the compose plugin, or bitcoind and lightningd on PATH"
  fi
fi
MODE="$SATSGATE_REGTEST_MODE"
case "$MODE" in docker|native) ;; *) die "SATSGATE_REGTEST_MODE must be docker or native" ;; esac

# Native mode stays off the regtest default ports, so a developer's own
# bitcoind or lightningd on this machine is left alone.
BTC_RPC_PORT="${REGTEST_BTC_RPC_PORT:-18543}"
BTC_P2P_PORT="${REGTEST_BTC_P2P_PORT:-18544}"
SATSGATE_LN_PORT="${REGTEST_SATSGATE_LN_PORT:-19846}"
PAYER_LN_PORT="${REGTEST_PAYER_LN_PORT:-19847}"
if [ "$MODE" = docker ]; then
  SATSGATE_PORT=8402  # published by docker-compose.yml
else
  SATSGATE_PORT="${SATSGATE_PORT:-18402}"
fi
SATSGATE_URL="http://127.0.0.1:$SATSGATE_PORT"

dc() { docker compose -f "$REGTEST_DIR/docker-compose.yml" "$@"; }

btc() {
  if [ "$MODE" = docker ]; then
    dc exec -T bitcoind bitcoin-cli -regtest -rpcport=18443 \
      -rpcuser=satsgate -rpcpassword=satsgate "$@"
  else
    bitcoin-cli -regtest -datadir="$STATE_DIR/bitcoind" -rpcport="$BTC_RPC_PORT" \
      -rpcuser=satsgate -rpcpassword=satsgate "$@"
  fi
}

# The node satsgate runs in, and the customer's node.
satsgate_ln() {
  if [ "$MODE" = docker ]; then dc exec -T satsgate lightning-cli -N none --network=regtest "$@"
  else lightning-cli -N none --network=regtest --lightning-dir="$STATE_DIR/satsgate" "$@"; fi
}
payer_ln() {
  if [ "$MODE" = docker ]; then dc exec -T payer lightning-cli -N none --network=regtest "$@"
  else lightning-cli -N none --network=regtest --lightning-dir="$STATE_DIR/payer" "$@"; fi
}
lnd_cli() { dc exec -T lnd lncli --network=regtest "$@"; }
has_lnd() { [ "$MODE" = docker ]; }

# Where the payer and LND reach the satsgate node's peer port.
satsgate_peer_addr() {
  if [ "$MODE" = docker ]; then echo "satsgate:9735"; else echo "127.0.0.1:$SATSGATE_LN_PORT"; fi
}

# json_get a.b.0.c < json: one field (lists by index).
json_get() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    d = d[int(k)] if isinstance(d, list) else d[k]
print(json.dumps(d) if isinstance(d, (dict, list)) else d)' "$1"
}

# json_true EXPR < json: succeeds when the Python expression over `d` is true.
json_true() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if eval(sys.argv[1], {"d": d}) else 1)' "$1"
}

# wait_until DESCRIPTION SECONDS COMMAND...: retry once a second.
wait_until() {
  local what="$1" seconds="$2"
  shift 2
  for _ in $(seq "$seconds"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "timed out after ${seconds}s waiting for $what"
}
