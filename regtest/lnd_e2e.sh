#!/usr/bin/env bash
# One paid render-card call from the payer's lnd: 402 with an L402 challenge,
# `lncli payinvoice` the invoice, repeat with the credential, expect 200; the same
# credential again is 402 PAYMENT_ALREADY_USED (with a fresh challenge).
# shellcheck source=lnd_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lnd_lib.sh"

body='{"template":"headline","title":"hi"}'
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
post() {
  local auth=()
  [ -n "$1" ] && auth=(-H "Authorization: $1")
  curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' "${auth[@]}" -d "$2" "$SATSGATE_URL/api/l402/render-card"
}

say "POST $SATSGATE_URL/api/l402/render-card without credential"
code="$(post "" "$body")"
[ "$code" = 402 ] || die "expected 402, got $code: $(cat "$work/body")"
challenge="$(tr -d '\r' <"$work/headers" | grep -i '^www-authenticate: L402 ' | head -n 1)"
macaroon="$(sed -n 's/.*macaroon="\([^"]*\)".*/\1/p' <<<"$challenge")"
invoice="$(sed -n 's/.*invoice="\([^"]*\)".*/\1/p' <<<"$challenge")"
[ -n "$macaroon" ] && [ -n "$invoice" ] || die "no L402 challenge in: $(cat "$work/headers")"

say "the payer's lnd pays $invoice"
paid="$(payer_lncli payinvoice --force --json "$invoice")"
status="$(json_get status <<<"$paid")"
[ "$status" = SUCCEEDED ] || die "payment $status: $paid"
preimage="$(json_get payment_preimage <<<"$paid")"

say "POST again with Authorization: L402 <macaroon>:<preimage>"
code="$(post "L402 $macaroon:$preimage" "$body")"
[ "$code" = 200 ] || die "expected 200, got $code: $(cat "$work/body")"
code="$(post "L402 $macaroon:$preimage" '{"template":"headline","title":"again"}')"
[ "$code" = 402 ] && json_true "d['error_code'] == 'PAYMENT_ALREADY_USED'" <"$work/body" \
  || die "the credential served twice: $code $(cat "$work/body")"
echo "OK: paid render-card call end to end beside lnd"
