#!/usr/bin/env bash
# Regenerate the LND gRPC stubs (satsgate/backends/lnd/proto/*_pb2*.py) from the
# project's own minimal .proto subset. The generated files are committed; run this
# only after editing a .proto. grpcio-tools is pinned here together with the
# protobuf floor in pyproject.toml's `lnd` extra: the generated code needs a
# protobuf runtime at least as new as the protoc inside this grpcio-tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
GRPCIO_TOOLS_VERSION="1.85.1"
if ! "$PY" -c "import grpc_tools, importlib.metadata as m; assert m.version('grpcio_tools') == '$GRPCIO_TOOLS_VERSION'" 2>/dev/null; then
  echo "needs grpcio-tools==$GRPCIO_TOOLS_VERSION: $PY -m pip install grpcio-tools==$GRPCIO_TOOLS_VERSION" >&2
  exit 1
fi
PROTO_DIR=satsgate/backends/lnd/proto
"$PY" -m grpc_tools.protoc -I . \
  --python_out=. --grpc_python_out=. --pyi_out=. \
  "$PROTO_DIR/lightning.proto" "$PROTO_DIR/invoices.proto" "$PROTO_DIR/router.proto"
echo "regenerated: $(ls "$PROTO_DIR"/*_pb2*.py* | tr '\n' ' ')"
