#!/usr/bin/env bash
# Start bitcoind, the Core Lightning node with satsgate as a plugin, the payer
# node (and LND with Docker). Then: regtest/fund.sh, regtest/e2e.sh.
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
mkdir -p "$STATE_DIR"
echo "$MODE" > "$STATE_DIR/mode"

if [ "$MODE" = docker ]; then
  say "starting the compose stack (first start builds the image and pip-installs satsgate)"
  dc up -d --build
else
  for bin in bitcoind bitcoin-cli lightningd lightning-cli; do
    command -v "$bin" >/dev/null || die "$bin is not on PATH"
  done
  python="$(command -v "${SATSGATE_PYTHON:-python3}")"
  "$python" -c "import satsgate.plugin" 2>/dev/null \
    || die "$python cannot import satsgate: pip install -e '$REPO_DIR' first (or set SATSGATE_PYTHON)"

  say "starting bitcoind (regtest, rpc port $BTC_RPC_PORT)"
  mkdir -p "$STATE_DIR/bitcoind" "$STATE_DIR/satsgate" "$STATE_DIR/payer"
  bitcoind -regtest -daemon -datadir="$STATE_DIR/bitcoind" -server=1 -listen=0 \
    -port="$BTC_P2P_PORT" -rpcport="$BTC_RPC_PORT" -rpcbind=127.0.0.1 -rpcallowip=127.0.0.1 \
    -rpcuser=satsgate -rpcpassword=satsgate -fallbackfee=0.0002 -txindex=1
  wait_until "bitcoind" 60 btc getblockchaininfo

  # lightningd runs plugin= paths directly: a wrapper running this Python.
  cat > "$STATE_DIR/satsgate-plugin" <<PLUGIN
#!/bin/sh
exec "$python" -m satsgate.plugin
PLUGIN
  chmod +x "$STATE_DIR/satsgate-plugin"

  start_cln() {
    local name="$1" port="$2"
    shift 2
    lightningd --network=regtest --lightning-dir="$STATE_DIR/$name" --alias="$name" \
      --bitcoin-rpcconnect=127.0.0.1 --bitcoin-rpcport="$BTC_RPC_PORT" \
      --bitcoin-rpcuser=satsgate --bitcoin-rpcpassword=satsgate \
      --addr="127.0.0.1:$port" --log-file="$STATE_DIR/$name/log" --daemon "$@" \
      </dev/null >>"$STATE_DIR/$name/stdio.log" 2>&1
    # --daemon leaves its plugins on the caller's stdio: redirected above, so a caller
    # that reads this script's output (| tee, capture_output) does not wait forever.
  }
  say "starting Core Lightning with satsgate (HTTP $SATSGATE_URL) and the payer node"
  start_cln satsgate "$SATSGATE_LN_PORT" --plugin="$STATE_DIR/satsgate-plugin" \
    --satsgate-port="$SATSGATE_PORT"
  start_cln payer "$PAYER_LN_PORT"
fi

# With Docker the first start pip-installs satsgate and its dependencies first.
patience=120
if [ "$MODE" = docker ]; then patience=900; fi
wait_until "the satsgate node" "$patience" satsgate_ln getinfo
wait_until "the payer node" 120 payer_ln getinfo
wait_until "satsgate's HTTP service at $SATSGATE_URL" 180 curl -sf "$SATSGATE_URL/api/health"
say "up: satsgate at $SATSGATE_URL ($MODE mode); next: regtest/fund.sh"
