#!/usr/bin/env bash
# Start or stop satsgate beside the satsgate lnd, with the README's serve line as
# written (its host:port, tls.cert, macaroon and network swapped for this chain's) plus
# --port and --data-dir. `start` waits for /api/health; a refusal at start (network,
# macaroon, permissions) is printed from satsgate's log and the script fails.
# Extra settings come from the environment (SATSGATE_HOLD_INVOICES=true, ...).
# Usage: regtest/lnd_satsgate.sh start|stop
# shellcheck source=lnd_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lnd_lib.sh"

start() {
  satsgate_running && die "satsgate is running already (pid $(satsgate_pid))"
  local line
  line="$(readme_lnd_command "satsgate serve")"
  for written in "127.0.0.1:10009" "~/.lnd/tls.cert" "~/satsgate.macaroon" "--network bitcoin"; do
    [[ "$line" == *"$written"* ]] || die "README's serve line no longer has '$written': $line"
  done
  line="${line/127.0.0.1:10009/127.0.0.1:$LND_SATSGATE_RPC_PORT}"
  line="${line/\~\/.lnd\/tls.cert/$(lnd_tls_cert satsgate)}"
  line="${line/\~\/satsgate.macaroon/${SATSGATE_MACAROON_OVERRIDE:-$SATSGATE_MACAROON}}"
  line="${line/--network bitcoin/--network ${SATSGATE_REGTEST_NETWORK:-regtest}}"
  local words
  read -ra words <<<"$line"
  say "${words[*]} --port $SATSGATE_PORT --data-dir $SATSGATE_DATA"
  mkdir -p "$SATSGATE_DATA"
  local log="$STATE_DIR/satsgate.log"
  : >"$log"
  "${words[@]}" --port "$SATSGATE_PORT" --data-dir "$SATSGATE_DATA" </dev/null >>"$log" 2>&1 &
  echo $! >"$STATE_DIR/satsgate.pid"
  for _ in $(seq 120); do
    if ! satsgate_running; then
      cat "$log" >&2
      rm -f "$STATE_DIR/satsgate.pid"
      die "satsgate exited at start (log above)"
    fi
    if curl -sf "$SATSGATE_URL/api/health" >/dev/null 2>&1; then
      say "satsgate at $SATSGATE_URL (pid $(satsgate_pid))"
      return 0
    fi
    sleep 1
  done
  die "satsgate did not answer at $SATSGATE_URL within 120s (log: $log)"
}

stop() {
  local pid
  pid="$(satsgate_pid)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && die "satsgate (pid $pid) did not stop within 30s"
  fi
  rm -f "$STATE_DIR/satsgate.pid"
  say "satsgate stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop" ;;
esac
