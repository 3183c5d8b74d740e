"""The paid-call flow: the gate and its four collaborators, and the credential formats.

- ``gate.py``: the Gate facade the faces call, and its wiring (``build_gate``);
- ``challenger.py``: quote, invoice, the L402 and MPP challenge (the 402);
- ``verifier.py``: a credential's checks before anything is spent (no writes);
- ``settlements.py``: the node's settlements into the store, by a persisted cursor;
- ``spender.py``: the spend rule, dispatch to the handler, refunds after the spend,
  dedup (``dedup.py``), jobs;
- ``l402.py``, ``macaroon_v2.py``, ``mpp.py``, ``hmac_sha256.py``: the credentials;
- ``http.py``: the HTTP face (``POST /api/l402/<slug>``); ``refund_request.py``: a
  refund on the payer's request, shared by HTTP and MCP.
"""
