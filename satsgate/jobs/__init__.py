"""Paid calls that finish in the background: a job's life from its 202 to its one end
(``lifecycle``) and the signed callback that tells its caller (``callbacks``)."""
