#!/usr/bin/env bash
# Mine, fund every node, open channels towards (and pushing liquidity to) the
# satsgate node, and wait until they are usable.
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

say "wallet and 101 blocks"
btc -named createwallet wallet_name=satsgate >/dev/null 2>&1 \
  || btc loadwallet satsgate >/dev/null 2>&1 || true
miner="$(btc getnewaddress)"
mine() { btc generatetoaddress "$1" "$miner" >/dev/null; }
mine 101

say "1 BTC to each node"
btc sendtoaddress "$(satsgate_ln newaddr | json_get bech32)" 1 >/dev/null
btc sendtoaddress "$(payer_ln newaddr | json_get bech32)" 1 >/dev/null
if has_lnd; then
  btc sendtoaddress "$(lnd_cli newaddress p2wkh | json_get address)" 1 >/dev/null
fi
mine 6

synced() {
  local height
  height="$(btc getblockcount)"
  "$1" getinfo | json_true "d['blockheight'] >= $height and not any(k.startswith('warning') for k in d)"
}
funded() { "$1" listfunds | json_true "any(o['status'] == 'confirmed' for o in d['outputs'])"; }
wait_until "the satsgate node to sync" 120 synced satsgate_ln
wait_until "the payer node to sync" 120 synced payer_ln
wait_until "the payer's funds" 120 funded payer_ln

satsgate_id="$(satsgate_ln getinfo | json_get id)"
say "channel payer -> satsgate (2M sat, 500k pushed so satsgate can pay refunds)"
payer_ln connect "$satsgate_id@$(satsgate_peer_addr)" >/dev/null
payer_ln -k fundchannel id="$satsgate_id" amount=2000000 push_msat=500000000 >/dev/null
if has_lnd; then
  say "channel lnd -> satsgate"
  lnd_synced() { lnd_cli getinfo | json_true "d['synced_to_chain']"; }
  wait_until "LND to sync" 120 lnd_synced
  lnd_cli connect "$satsgate_id@$(satsgate_peer_addr)" >/dev/null
  lnd_cli openchannel --node_key "$satsgate_id" --local_amt 2000000 --push_amt 500000 >/dev/null
fi
mine 6

normal() {
  satsgate_ln listpeerchannels \
    | json_true "len(d['channels']) >= $1 and all(c['state'] == 'CHANNELD_NORMAL' for c in d['channels'])"
}
expected=1
if has_lnd; then expected=2; fi
wait_until "channels to be usable" 120 normal "$expected"
say "funded: $expected channel(s) into satsgate; next: regtest/e2e.sh"
