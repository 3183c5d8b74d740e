# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# Shared by the LND regtest scripts (sourced, not run): satsgate beside a real lnd.
# Native only: bitcoind, bitcoin-cli, lnd and lncli on PATH (or in LND_REGTEST_BIN),
# state in SATSGATE_REGTEST_DIR. Two lnds: "satsgate" (the node satsgate serves from,
# over gRPC) and "payer" (the customer's node, paying with lncli).
SATSGATE_REGTEST_MODE=native
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ -n "${LND_REGTEST_BIN:-}" ]; then PATH="$LND_REGTEST_BIN:$PATH"; fi
# satsgate and its Python: the README's `satsgate` command, from SATSGATE_PYTHON's venv.
SATSGATE_PYTHON_BIN="$(command -v "${SATSGATE_PYTHON:-python3}")"
PATH="$(dirname "$SATSGATE_PYTHON_BIN"):$PATH"

LND_SATSGATE_RPC_PORT="${REGTEST_LND_SATSGATE_RPC_PORT:-11009}"
LND_SATSGATE_P2P_PORT="${REGTEST_LND_SATSGATE_P2P_PORT:-19835}"
LND_PAYER_RPC_PORT="${REGTEST_LND_PAYER_RPC_PORT:-11010}"
LND_PAYER_P2P_PORT="${REGTEST_LND_PAYER_P2P_PORT:-19836}"
SATSGATE_DATA="$STATE_DIR/satsgate-data"
SATSGATE_MACAROON="$STATE_DIR/satsgate.macaroon"

lnd_rpc_port() {
  case "$1" in
    satsgate) echo "$LND_SATSGATE_RPC_PORT" ;;
    payer) echo "$LND_PAYER_RPC_PORT" ;;
    *) die "no lnd named $1" ;;
  esac
}

# lncli of one node with its admin macaroon: lncli_of satsgate getinfo
lncli_of() {
  local name="$1"
  shift
  lncli --network=regtest --lnddir="$STATE_DIR/lnd-$name" \
    --rpcserver="127.0.0.1:$(lnd_rpc_port "$name")" "$@"
}
sg_lncli() { lncli_of satsgate "$@"; }
payer_lncli() { lncli_of payer "$@"; }

lnd_tls_cert() { echo "$STATE_DIR/lnd-$1/tls.cert"; }

# The README's LND snippet, as written: the line that starts with the given words (and
# its continuation lines), from the fenced block under "**LND, as a sidecar".
readme_lnd_command() {
  python3 - "$REPO_DIR/README.md" "$1" <<'PY'
import sys
text = open(sys.argv[1]).read()
block = text.split("**LND, as a sidecar", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
lines, out, taking = block.splitlines(), [], False
for line in lines:
    if line.startswith(sys.argv[2]):
        taking = True
    if taking:
        out.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
if not out:
    sys.exit(f"README.md: no LND command starting with {sys.argv[2]!r}")
print(" ".join(out))
PY
}

satsgate_pid() { cat "$STATE_DIR/satsgate.pid" 2>/dev/null || true; }
satsgate_running() {
  local pid
  pid="$(satsgate_pid)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}
