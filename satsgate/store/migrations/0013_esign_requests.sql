-- E-signature requests (e-signature): one row per PDF sent for signature. The document
-- itself is never stored (it went to the signing provider); the caller's customer_email
-- is kept only until the signed copy is delivered or the request ends, then cleared.
-- status: pending (waiting for signers) -> signed (everyone signed, the copy is due at
-- next_check_at) -> delivering (claimed until claimed_until: one sender at a time) ->
-- done; or rejected | cancelled | expired (no signed copy) | undeliverable (the copy's
-- e-mail failed every attempt).
CREATE TABLE esign_requests (
    request_id TEXT PRIMARY KEY,
    payment_id TEXT NOT NULL,  -- the payment that paid for it (ctx.call_id)
    provider TEXT NOT NULL,
    envelope_id TEXT NOT NULL,
    status TEXT NOT NULL,
    customer_email TEXT,
    signers_total INTEGER NOT NULL,
    signers_signed INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_check_at INTEGER NOT NULL,
    claimed_until INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    completed_at INTEGER,
    delivered_at INTEGER,
    last_error TEXT
);
CREATE UNIQUE INDEX idx_esign_requests_envelope ON esign_requests (provider, envelope_id);
CREATE INDEX idx_esign_requests_due ON esign_requests (next_check_at)
    WHERE status IN ('pending', 'signed', 'delivering');
