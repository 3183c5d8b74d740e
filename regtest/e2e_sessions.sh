#!/usr/bin/env bash
# A payment session from the payer node (the Payment scheme's session intent):
# pay the deposit invoice of a 402's session challenge, open with an AMOUNTLESS
# return invoice of the payer node (the answer hands over the session token),
# make a bearer call with the token (one with the preimage alone, all a routing
# node of the deposit knows, is refused and moves nothing), close; the payer's
# return invoice is paid once, deposit minus what was charged; a second close
# pays nothing more. Another session naming the same return invoice is refused
# at open (a node pays an invoice once) and opens with a fresh one. A third
# session's return invoice, paid by the node's operator by hand before the close,
# is not paid again nor reported paid (refundStatus failed, for the operator).
# Prints "SESSION {json figures}" for tests.
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

slug=render-card
body='{"template":"headline","title":"session"}'
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# session_challenge < headers: the session challenge's auth-params as JSON, with
# its decoded request object under "decoded".
session_challenge() {
  python3 -c '
import base64, json, re, sys
for line in sys.stdin.read().replace("\r", "").splitlines():
    name, _, value = line.partition(":")
    value = value.strip()
    if name.lower() == "www-authenticate" and value.startswith("Payment ") \
            and "intent=\"session\"" in value:
        params = dict(re.findall(r"(\w+)=\"([^\"]*)\"", value))
        raw = params["request"]
        params["decoded"] = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        print(json.dumps(params))
        sys.exit(0)
sys.exit("no session challenge in the 402")'
}

# credential CHALLENGE_JSON PAYLOAD_JSON: the Authorization value (JCS JSON, base64url).
credential() {
  python3 -c '
import base64, json, sys
ch = json.loads(sys.argv[1])
echoed = {k: ch[k] for k in ("id", "realm", "method", "intent", "request", "expires")}
doc = {"challenge": echoed, "payload": json.loads(sys.argv[2])}
raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
print("Payment " + base64.urlsafe_b64encode(raw).rstrip(b"=").decode())' "$1" "$2"
}

# receipt < headers: the decoded Payment-Receipt header as JSON.
receipt() {
  python3 -c '
import base64, json, sys
for line in sys.stdin.read().replace("\r", "").splitlines():
    name, _, value = line.partition(":")
    if name.lower() == "payment-receipt":
        value = value.strip()
        print(json.dumps(json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))))
        sys.exit(0)
sys.exit("no Payment-Receipt header")'
}

# session_token < headers: the open's Payment-Session-Token header.
session_token() {
  python3 -c '
import sys
for line in sys.stdin.read().replace("\r", "").splitlines():
    name, _, value = line.partition(":")
    if name.lower() == "payment-session-token":
        print(value.strip())
        sys.exit(0)
sys.exit("no Payment-Session-Token header")'
}

# post AUTH: POST the call with that Authorization (none if empty); prints the status.
# Accept-Payment asks for the session intent: a 402 offers it only when asked.
post() {
  local auth=()
  [ -n "$1" ] && auth=(-H "Authorization: $1")
  curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' -H 'Accept-Payment: lightning/charge, lightning/session' \
    "${auth[@]}" -d "$body" "$SATSGATE_URL/api/l402/$slug"
}

say "POST $slug without credential: the 402 offers a session"
code="$(post "")"
[ "$code" = 402 ] || die "expected 402, got $code: $(cat "$work/body")"
challenge="$(session_challenge < "$work/headers")"
deposit_invoice="$(json_get decoded.depositInvoice <<<"$challenge")"
session_id="$(json_get decoded.paymentHash <<<"$challenge")"
deposit_msat=$(( $(json_get decoded.depositAmount <<<"$challenge") * 1000 ))
price_msat=$(( $(json_get decoded.amount <<<"$challenge") * 1000 ))

say "the payer pays the deposit ($deposit_msat msat)"
preimage="$(payer_ln pay "$deposit_invoice" | json_get payment_preimage)"

label="sg-return-$(date +%s)-$RANDOM"
say "the payer makes an amountless return invoice ($label)"
return_invoice="$(payer_ln invoice any "$label" "satsgate session refund" | json_get bolt11)"

say "open: the deposit's preimage and the return invoice; the call is served"
payload="$(python3 -c 'import json, sys; print(json.dumps({"action": "open", "preimage": sys.argv[1], "returnInvoice": sys.argv[2]}))' "$preimage" "$return_invoice")"
code="$(post "$(credential "$challenge" "$payload")")"
[ "$code" = 200 ] || die "open: expected 200, got $code: $(cat "$work/body")"
opened="$(receipt < "$work/headers")"
[ "$(json_get reference <<<"$opened")" = "$session_id" ] || die "open: receipt for another session: $opened"
charged_open="$(json_get chargedMsat <<<"$opened")"
token="$(session_token < "$work/headers")"
[ "$(json_get sessionToken <<<"$opened")" = "$token" ] || die "open: the receipt's token is not the header's"

say "bearer with the preimage alone (what a hop on the deposit's route knows) is refused"
code="$(post "$(credential "$challenge" "{\"action\":\"bearer\",\"sessionId\":\"$session_id\",\"preimage\":\"$preimage\"}")")"
[ "$code" = 402 ] || die "preimage-only bearer: expected 402, got $code: $(cat "$work/body")"
[ "$(json_get error_code < "$work/body")" = SESSION_BINDING_REQUIRED ] \
  || die "preimage-only bearer: $(cat "$work/body")"

say "bearer call on the balance, with the session token"
bearer="$(credential "$challenge" "{\"action\":\"bearer\",\"sessionId\":\"$session_id\",\"preimage\":\"$preimage\",\"token\":\"$token\"}")"
code="$(post "$bearer")"
[ "$code" = 200 ] || die "bearer: expected 200, got $code: $(cat "$work/body")"
served="$(receipt < "$work/headers")"
charged_bearer="$(json_get chargedMsat <<<"$served")"
balance_msat="$(json_get balanceMsat <<<"$served")"
charged_msat=$(( charged_open + charged_bearer ))
[ "$balance_msat" = $(( deposit_msat - charged_msat )) ] \
  || die "balance $balance_msat after charges of $charged_msat on $deposit_msat"

say "close: the balance ($balance_msat msat) goes to the return invoice"
close="$(credential "$challenge" "{\"action\":\"close\",\"sessionId\":\"$session_id\",\"preimage\":\"$preimage\",\"token\":\"$token\"}")"
started="$(date +%s.%N)"
code="$(post "$close")"
[ "$code" = 200 ] || die "close: expected 200, got $code: $(cat "$work/body")"
closed="$(cat "$work/body")"
close_s="$(python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 2))' "$started")"
json_true "d['status'] == 'closed' and d['refundStatus'] == 'succeeded'" <<<"$closed" \
  || die "close: $closed"

invoice_paid() {
  payer_ln listinvoices "$label" | json_true "d['invoices'][0]['status'] == 'paid'"
}
wait_until "the payer's return invoice to be paid" 30 invoice_paid
received_msat="$(payer_ln listinvoices "$label" | json_get invoices.0.amount_received_msat)"
[ "$received_msat" = "$balance_msat" ] \
  || die "the payer received $received_msat msat, the balance was $balance_msat"

say "close again: the same answer, nothing more paid"
code="$(post "$close")"
[ "$code" = 200 ] || die "second close: expected 200, got $code: $(cat "$work/body")"
closed_again="$(cat "$work/body")"
[ "$closed_again" = "$closed" ] || die "second close answered $closed_again, first $closed"
return_hash="$(payer_ln listinvoices "$label" | json_get invoices.0.payment_hash)"
sleep 2
[ "$(payer_ln listinvoices "$label" | json_get invoices.0.amount_received_msat)" = "$received_msat" ] \
  || die "the return invoice received more after the second close"
pays="$(satsgate_ln listpays bolt11="$return_invoice")"
python3 -c '
import json, sys
pays = json.loads(sys.argv[1])["pays"]
assert len(pays) == 1 and pays[0]["status"] == "complete", pays' "$pays" \
  || die "the satsgate node paid the return invoice other than once: $pays"
sent_msat="$(json_get pays.0.amount_sent_msat <<<"$pays")"
fee_msat=$(( sent_msat - received_msat ))

say "another session naming the same return invoice is refused (a node pays it once)"
code="$(post "")"
[ "$code" = 402 ] || die "expected 402, got $code: $(cat "$work/body")"
challenge2="$(session_challenge < "$work/headers")"
preimage2="$(payer_ln pay "$(json_get decoded.depositInvoice <<<"$challenge2")" | json_get payment_preimage)"
session2="$(json_get decoded.paymentHash <<<"$challenge2")"
open2() {
  credential "$challenge2" "$(python3 -c 'import json, sys; print(json.dumps({"action": "open", "preimage": sys.argv[1], "returnInvoice": sys.argv[2]}))' "$preimage2" "$1")"
}
code="$(post "$(open2 "$return_invoice")")"
[ "$code" = 402 ] || die "reused return invoice: expected 402, got $code: $(cat "$work/body")"
reused="$(json_get type < "$work/body")"
[ "${reused##*/}" = invalid-return-invoice ] || die "reused return invoice: $(cat "$work/body")"
label2="$label-2"
return2="$(payer_ln invoice any "$label2" "satsgate session refund 2" | json_get bolt11)"
code="$(post "$(open2 "$return2")")"
[ "$code" = 200 ] || die "the same deposit with a fresh return invoice: got $code: $(cat "$work/body")"
balance2="$(receipt < "$work/headers" | json_get balanceMsat)"
token2="$(session_token < "$work/headers")"
code="$(post "$(credential "$challenge2" "{\"action\":\"close\",\"sessionId\":\"$session2\",\"preimage\":\"$preimage2\",\"token\":\"$token2\"}")")"
[ "$code" = 200 ] || die "second session close: got $code: $(cat "$work/body")"
json_true "d['refundStatus'] == 'succeeded'" < "$work/body" || die "second close: $(cat "$work/body")"
second_paid() { payer_ln listinvoices "$label2" | json_true "d['invoices'][0]['status'] == 'paid'"; }
wait_until "the second session's return invoice to be paid" 30 second_paid
received2="$(payer_ln listinvoices "$label2" | json_get invoices.0.amount_received_msat)"
[ "$received2" = "$balance2" ] || die "second session: received $received2 msat of $balance2"
[ "$(payer_ln listinvoices "$label" | json_get invoices.0.amount_received_msat)" = "$received_msat" ] \
  || die "the first return invoice received more"

say "a return invoice the node paid already (the operator, by hand) is not reported paid"
code="$(post "")"
[ "$code" = 402 ] || die "expected 402, got $code: $(cat "$work/body")"
challenge3="$(session_challenge < "$work/headers")"
preimage3="$(payer_ln pay "$(json_get decoded.depositInvoice <<<"$challenge3")" | json_get payment_preimage)"
session3="$(json_get decoded.paymentHash <<<"$challenge3")"
label3="$label-3"
return3="$(payer_ln invoice any "$label3" "satsgate session refund 3" | json_get bolt11)"
code="$(post "$(credential "$challenge3" "$(python3 -c 'import json, sys; print(json.dumps({"action": "open", "preimage": sys.argv[1], "returnInvoice": sys.argv[2]}))' "$preimage3" "$return3")")")"
[ "$code" = 200 ] || die "third session open: got $code: $(cat "$work/body")"
token3="$(session_token < "$work/headers")"
satsgate_ln -k xpay invstring="$return3" amount_msat=1000 >/dev/null
code="$(post "$(credential "$challenge3" "{\"action\":\"close\",\"sessionId\":\"$session3\",\"preimage\":\"$preimage3\",\"token\":\"$token3\"}")")"
[ "$code" = 200 ] || die "third session close: got $code: $(cat "$work/body")"
third_status="$(json_get refundStatus < "$work/body")"
[ "$third_status" = failed ] || die "third close: $(cat "$work/body")"
sleep 1
received3="$(payer_ln listinvoices "$label3" | json_get invoices.0.amount_received_msat)"
[ "$received3" = 1000 ] || die "the third return invoice received $received3 msat, not the operator's 1000"
satsgate_ln listpays bolt11="$return3" | json_true "len(d['pays']) == 1" \
  || die "the node paid the third return invoice more than once"

python3 -c '
import json, sys
keys = ("session_id", "deposit_msat", "price_msat", "charged_msat", "balance_msat",
        "received_msat", "sent_msat", "fee_msat", "close_s", "return_hash",
        "reused_return_invoice", "second_balance_msat", "second_received_msat",
        "third_refund_status", "third_received_msat")
vals = sys.argv[1:]
texts = ("session_id", "return_hash", "reused_return_invoice", "third_refund_status")
print("SESSION " + json.dumps({k: (v if k in texts else float(v) if k == "close_s" else int(v)) for k, v in zip(keys, vals)}))' \
  "$session_id" "$deposit_msat" "$price_msat" "$charged_msat" "$balance_msat" \
  "$received_msat" "$sent_msat" "$fee_msat" "$close_s" "$return_hash" \
  "${reused##*/}" "$balance2" "$received2" "$third_status" "$received3"
echo "OK: session paid out once on close ($MODE mode)"
