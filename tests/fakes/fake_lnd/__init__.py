"""A fake LND speaking the real wire: gRPC over TLS with a macaroon, the project's protos.

- :class:`FakeLndNode`: invoices (real signed BOLT11, plain and hold) and payments, with
  lnd's indexes, states and error codes.
- :class:`FakeLnd`: a FakeLndNode served by grpc.aio on 127.0.0.1 on its own thread.
"""

from .node import FakeLndNode, LndError
from .server import FakeLnd, make_tls_cert, running_lnd

__all__ = ["FakeLnd", "FakeLndNode", "LndError", "make_tls_cert", "running_lnd"]
