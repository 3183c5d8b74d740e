"""LND backend: gRPC over TLS with a hex macaroon in the call metadata.

The stubs under ``proto/`` are generated from the project's own minimal ``.proto``
subset (LND's package, service, message and field names and numbers; only what satsgate
uses) by ``scripts/gen-lnd-protos.sh``. The PyPI package lndgrpc does not import with
current protobuf and lacks the router and invoices services. Its gRPC libraries are the
``lnd`` extra (``pip install satsgate[lnd]``), imported only here.

The backend is :class:`satsgate.backends.lnd.backend.LndBackend`. This package file
imports nothing: the stubs are its subpackage, and a package that imported its backend
would have the backend import the stubs through it (a loop).
"""
