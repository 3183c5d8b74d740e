#!/usr/bin/env bash
# A paid call that fails after payment, refunded through LNURL-withdraw to the
# payer node: extract-document on a blank page (it passes the checks made
# before the invoice; OCR finds no text after payment: INVALID_INPUT and a
# refund), then the payer decodes the lnurl, GETs the withdraw request and
# answers the callback with its own invoice; it is paid exactly once and a
# second claim is refused. Another refund claimed with that paid invoice is
# refused too (a node pays an invoice once), its link left open for a fresh one.
# Prints "REFUND {json figures}" for tests.
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

slug=extract-document
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A blank white page, 600x400 grey PNG, made with the standard library only.
python3 -c '
import base64, json, struct, zlib
w, h = 600, 400
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
raw = b"".join(b"\x00" + b"\xff" * w for _ in range(h))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
print(json.dumps({"imageBase64": base64.b64encode(png).decode()}))' > "$work/request.json"

post() {
  local auth=()
  [ -n "$1" ] && auth=(-H "Authorization: $1")
  curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' "${auth[@]}" -d "@$work/request.json" \
    "$SATSGATE_URL/api/l402/$slug"
}

# lnurl_decode LNURL: the URL inside (bech32, LUD-01), standard library only.
lnurl_decode() {
  python3 -c '
import sys
CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
text = sys.argv[1].lower()
data = [CHARSET.index(c) for c in text[text.rindex("1") + 1:]][:-6]
acc = bits = 0
out = bytearray()
for value in data:
    acc = (acc << 5) | value
    bits += 5
    while bits >= 8:
        bits -= 8
        out.append((acc >> bits) & 0xFF)
print(out.decode())' "$1"
}

# failed_call: a paid extract-document call on the blank page; sets error, lnurl,
# refund_sats, paid_msat.
failed_call() {
  say "POST $slug (a blank page) without credential"
  local code challenge macaroon invoice paid preimage
  code="$(post "")"
  [ "$code" = 402 ] || die "expected 402, got $code: $(cat "$work/body")"
  challenge="$(tr -d '\r' < "$work/headers" | grep -i '^www-authenticate: L402 ' | head -n 1)"
  macaroon="$(sed -n 's/.*macaroon="\([^"]*\)".*/\1/p' <<<"$challenge")"
  invoice="$(sed -n 's/.*invoice="\([^"]*\)".*/\1/p' <<<"$challenge")"
  [ -n "$macaroon" ] && [ -n "$invoice" ] || die "no L402 challenge in: $(cat "$work/headers")"
  say "the payer pays $invoice"
  paid="$(payer_ln pay "$invoice")"
  preimage="$(json_get payment_preimage <<<"$paid")"
  paid_msat="$(json_get amount_msat <<<"$paid")"
  say "POST again with the credential: no text on the page, refunded"
  code="$(post "L402 $macaroon:$preimage")"
  [ "$code" = 400 ] || die "expected 400, got $code: $(cat "$work/body")"
  error="$(cat "$work/body")"
  json_true "d['error_code'] == 'INVALID_INPUT' and d['refund']['status'] == 'open'" <<<"$error" \
    || die "no refund in: $error"
  lnurl="$(json_get refund.lnurl_withdraw <<<"$error")"
  refund_sats="$(json_get refund.amount_sats <<<"$error")"
}

failed_call
say "the payer decodes the lnurl and GETs the withdraw request"
url="$(lnurl_decode "$lnurl")"
withdraw="$(curl -sf "$url")" || die "GET $url failed"
json_true "d['tag'] == 'withdrawRequest' and d['minWithdrawable'] == d['maxWithdrawable']" \
  <<<"$withdraw" || die "not a withdraw request: $withdraw"
callback="$(json_get callback <<<"$withdraw")"
k1="$(json_get k1 <<<"$withdraw")"
amount_msat="$(json_get maxWithdrawable <<<"$withdraw")"

label="sg-refund-$(date +%s)-$RANDOM"
say "the payer claims $amount_msat msat with its own invoice ($label)"
bolt11="$(payer_ln invoice "$amount_msat" "$label" "satsgate refund" | json_get bolt11)"
started="$(date +%s.%N)"
answer="$(curl -s -G --data-urlencode "k1=$k1" --data-urlencode "pr=$bolt11" "$callback")"
json_true "d['status'] == 'OK'" <<<"$answer" || die "the claim was refused: $answer"
invoice_paid() {
  payer_ln listinvoices "$label" | json_true "d['invoices'][0]['status'] == 'paid'"
}
wait_until "the refund to reach the payer" 60 invoice_paid
claim_s="$(python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$started")"
received_msat="$(payer_ln listinvoices "$label" | json_get invoices.0.amount_received_msat)"
[ "$received_msat" = "$amount_msat" ] || die "the payer received $received_msat msat of $amount_msat"

say "a second claim (another invoice) is refused"
label2="$label-again"
bolt11_2="$(payer_ln invoice "$amount_msat" "$label2" "satsgate refund again" | json_get bolt11)"
again="$(curl -s -G --data-urlencode "k1=$k1" --data-urlencode "pr=$bolt11_2" "$callback")"
json_true "d['status'] == 'ERROR'" <<<"$again" || die "a second claim was accepted: $again"
sleep 2
payer_ln listinvoices "$label2" | json_true "d['invoices'][0]['status'] == 'unpaid'" \
  || die "the second claim's invoice was paid"
pays="$(satsgate_ln listpays bolt11="$bolt11")"
json_true "len(d['pays']) == 1 and d['pays'][0]['status'] == 'complete'" <<<"$pays" \
  || die "the satsgate node paid the refund other than once: $pays"
sent_msat="$(json_get pays.0.amount_sent_msat <<<"$pays")"

say "another refund claimed with the invoice paid already is refused (a node pays it once)"
failed_call
withdraw2="$(curl -sf "$(lnurl_decode "$lnurl")")" || die "GET the second withdraw request failed"
callback2="$(json_get callback <<<"$withdraw2")"
k1_2="$(json_get k1 <<<"$withdraw2")"
reused="$(curl -s -G --data-urlencode "k1=$k1_2" --data-urlencode "pr=$bolt11" "$callback2")"
json_true "d['status'] == 'ERROR'" <<<"$reused" || die "a paid invoice was accepted: $reused"
label3="$label-3"
bolt11_3="$(payer_ln invoice "$amount_msat" "$label3" "satsgate refund 3" | json_get bolt11)"
fresh="$(curl -s -G --data-urlencode "k1=$k1_2" --data-urlencode "pr=$bolt11_3" "$callback2")"
json_true "d['status'] == 'OK'" <<<"$fresh" || die "the link was consumed by the refused claim: $fresh"
third_paid() { payer_ln listinvoices "$label3" | json_true "d['invoices'][0]['status'] == 'paid'"; }
wait_until "the second refund to reach the payer" 60 third_paid
[ "$(payer_ln listinvoices "$label" | json_get invoices.0.amount_received_msat)" = "$received_msat" ] \
  || die "the first refund invoice received more"

python3 -c '
import json, sys
keys = ("paid_msat", "refund_sats", "amount_msat", "received_msat", "sent_msat", "claim_s")
vals = sys.argv[3:]
figures = {k: float(v) if k == "claim_s" else int(v) for k, v in zip(keys, vals)}
figures["second_claim"] = json.loads(sys.argv[1])
figures["paid_invoice_claim"] = json.loads(sys.argv[2])
print("REFUND " + json.dumps(figures))' \
  "$again" "$reused" "$paid_msat" "$refund_sats" "$amount_msat" "$received_msat" "$sent_msat" "$claim_s"
echo "OK: failed call refunded once through LNURL-withdraw ($MODE mode)"
