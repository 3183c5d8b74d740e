"""LND backend: gRPC over TLS with a hex macaroon in the call metadata.

The stubs under ``proto/`` are generated from the project's own minimal ``.proto``
subset (LND's package, service, message and field names and numbers; only what satsgate
uses) by ``scripts/gen-lnd-protos.sh``. The PyPI package lndgrpc does not import with
current protobuf and lacks the router and invoices services. Its gRPC libraries are the
``lnd`` extra (``pip install satsgate[lnd]``), imported only here.
"""

from .backend import LndBackend, normalize_network

__all__ = ["LndBackend", "normalize_network"]
