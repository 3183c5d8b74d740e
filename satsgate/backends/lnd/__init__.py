"""LND backend (gRPC with TLS and macaroon).

Not part of this release: `satsgate serve --backend lnd` refuses to start and says so.
The PyPI package lndgrpc does not import with current protobuf; this package will
hold project-written minimal protos generated with grpcio-tools. Its gRPC libraries
are the ``lnd`` extra (``pip install satsgate[lnd]``), imported only here.
"""
