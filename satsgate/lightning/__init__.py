"""What satsgate needs from a Lightning node (``backend``: the seam the dev node, Core
Lightning and LND implement) and what it reads in an invoice (``invoices``)."""
