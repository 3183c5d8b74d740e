#!/usr/bin/env bash
# satsgate beside a real lnd on regtest: bitcoind (RPC polling, no ZMQ), two lnds
# (satsgate's and the payer's, wallets made with --noseedbackup), 1 BTC to the payer,
# a 2M sat channel payer -> satsgate with 500k pushed (satsgate pays refunds and
# session payouts from it), satsgate's macaroon baked with the README's command as
# written, and satsgate started with the README's serve line (regtest/lnd_satsgate.sh).
# Then: regtest/lnd_e2e.sh; regtest/lnd_down.sh [--clean].
# shellcheck source=lnd_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lnd_lib.sh"

for bin in bitcoind bitcoin-cli lnd lncli; do
  command -v "$bin" >/dev/null || die "$bin is not on PATH (or in LND_REGTEST_BIN)"
done
"$SATSGATE_PYTHON_BIN" -c "import satsgate.backends.lnd.backend" 2>/dev/null \
  || die "$SATSGATE_PYTHON_BIN cannot import satsgate's LND backend: pip install -e '$REPO_DIR[lnd]'"
mkdir -p "$STATE_DIR"
echo native >"$STATE_DIR/mode"

say "bitcoind (regtest, rpc port $BTC_RPC_PORT)"
mkdir -p "$STATE_DIR/bitcoind"
bitcoind -regtest -daemon -datadir="$STATE_DIR/bitcoind" -server=1 -listen=0 \
  -port="$BTC_P2P_PORT" -rpcport="$BTC_RPC_PORT" -rpcbind=127.0.0.1 -rpcallowip=127.0.0.1 \
  -rpcuser=satsgate -rpcpassword=satsgate -fallbackfee=0.0002 >/dev/null
wait_until "bitcoind" 60 btc getblockchaininfo
btc -named createwallet wallet_name=miner >/dev/null 2>&1 || btc loadwallet miner >/dev/null 2>&1 || true
miner="$(btc getnewaddress)"
mine() { btc generatetoaddress "$1" "$miner" >/dev/null; }
mine 101

start_lnd() {
  local name="$1" rpc="$2" p2p="$3" dir="$STATE_DIR/lnd-$1"
  mkdir -p "$dir"
  lnd --lnddir="$dir" --noseedbackup --alias="$name" --norest --debuglevel=info \
    --rpclisten="127.0.0.1:$rpc" --listen="127.0.0.1:$p2p" \
    --bitcoin.regtest --bitcoin.node=bitcoind --bitcoind.rpchost="127.0.0.1:$BTC_RPC_PORT" \
    --bitcoind.rpcuser=satsgate --bitcoind.rpcpass=satsgate --bitcoind.rpcpolling \
    --bitcoind.blockpollinginterval=1s --bitcoind.txpollinginterval=1s \
    </dev/null >>"$dir/stdout.log" 2>&1 &
  echo $! >"$STATE_DIR/lnd-$name.pid"
}
say "lnd satsgate (gRPC 127.0.0.1:$LND_SATSGATE_RPC_PORT) and lnd payer (127.0.0.1:$LND_PAYER_RPC_PORT)"
start_lnd satsgate "$LND_SATSGATE_RPC_PORT" "$LND_SATSGATE_P2P_PORT"
start_lnd payer "$LND_PAYER_RPC_PORT" "$LND_PAYER_P2P_PORT"
synced() { lncli_of "$1" getinfo | json_true "d['synced_to_chain'] and d['block_height'] >= $(btc getblockcount)"; }
wait_until "the satsgate lnd to sync" 180 synced satsgate
wait_until "the payer lnd to sync" 180 synced payer
# getinfo answers (and says synced) before lnd's server is up; until then connect and
# openchannel are refused with "server is still in the process of starting".
serving() { lncli_of "$1" state | json_true "d['state'] == 'SERVER_ACTIVE'"; }
wait_until "the satsgate lnd's server" 120 serving satsgate
wait_until "the payer lnd's server" 120 serving payer

say "1 BTC to the payer"
btc sendtoaddress "$(payer_lncli newaddress p2wkh | json_get address)" 1 >/dev/null
mine 6
confirmed() { payer_lncli walletbalance | json_true "int(d['confirmed_balance']) > 0"; }
wait_until "the payer's confirmed funds" 120 confirmed
# lnd refuses to open a channel until its wallet has seen the chain tip.
wait_until "the payer lnd to sync" 120 synced payer

satsgate_id="$(sg_lncli getinfo | json_get identity_pubkey)"
say "channel payer -> satsgate (2M sat, 500k pushed)"
payer_lncli connect "$satsgate_id@127.0.0.1:$LND_SATSGATE_P2P_PORT" >/dev/null
payer_lncli openchannel --node_key "$satsgate_id" --local_amt 2000000 --push_amt 500000 >/dev/null
mine 6
active() { lncli_of "$1" listchannels --active_only | json_true "len(d['channels']) == 1"; }
wait_until "the channel to be active at satsgate's lnd" 120 active satsgate
wait_until "the channel to be active at the payer's lnd" 120 active payer

say "satsgate's macaroon: the README's bake command as written"
bake="$(readme_lnd_command "lncli bakemacaroon")"
[[ "$bake" == *"~/satsgate.macaroon"* ]] || die "README's bake command no longer saves to ~/satsgate.macaroon: $bake"
bake="${bake/\~\/satsgate.macaroon/$SATSGATE_MACAROON}"
read -ra words <<<"$bake"
say "$bake"
rm -f "$SATSGATE_MACAROON"
sg_lncli "${words[@]:1}" >/dev/null
[ -s "$SATSGATE_MACAROON" ] || die "lncli bakemacaroon wrote no $SATSGATE_MACAROON"

bash "$REGTEST_DIR/lnd_satsgate.sh" start
say "up: satsgate at $SATSGATE_URL beside lnd; next: regtest/lnd_e2e.sh"
