#!/usr/bin/env bash
# One paid render-card call from the payer node: 402 with an L402 challenge,
# `lightning-cli pay` the invoice, repeat with the credential, expect 200.
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

body='{"template":"headline","title":"hi"}'
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say "POST $SATSGATE_URL/api/l402/render-card without credential"
code="$(curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' -X POST \
  -H 'Content-Type: application/json' -d "$body" "$SATSGATE_URL/api/l402/render-card")"
[ "$code" = 402 ] || die "expected 402, got $code: $(cat "$work/body")"
challenge="$(tr -d '\r' < "$work/headers" | grep -i '^www-authenticate: L402 ' | head -n 1)"
macaroon="$(sed -n 's/.*macaroon="\([^"]*\)".*/\1/p' <<<"$challenge")"
invoice="$(sed -n 's/.*invoice="\([^"]*\)".*/\1/p' <<<"$challenge")"
if [ -z "$macaroon" ] || [ -z "$invoice" ]; then
  die "no L402 challenge in: $(cat "$work/headers")"
fi

say "the payer pays $invoice"
preimage="$(payer_ln pay "$invoice" | json_get payment_preimage)"

say "POST again with Authorization: L402 <macaroon>:<preimage>"
code="$(curl -s -o "$work/body" -w '%{http_code}' -X POST \
  -H 'Content-Type: application/json' -H "Authorization: L402 $macaroon:$preimage" \
  -d "$body" "$SATSGATE_URL/api/l402/render-card")"
[ "$code" = 200 ] || die "expected 200, got $code: $(cat "$work/body")"

satsgate_ln satsgate-status
echo "OK: paid render-card call end to end ($MODE mode)"
