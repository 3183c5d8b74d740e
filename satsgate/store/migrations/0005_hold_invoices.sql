-- Charge only on success (LND hold invoices, the paymentId flow). Each payment records
-- the mode it was paid with: 'invoice' (settled when paid) or 'hold' (accepted when
-- paid, settled after the call succeeded, canceled otherwise). A hold invoice's
-- preimage stays here until it is settled; decision: NULL (undecided), 'settling',
-- 'canceling' (recorded before the node is told, so a restart finishes it), 'settled',
-- 'canceled', or 'expired' (never paid).
ALTER TABLE payments ADD COLUMN mode TEXT NOT NULL DEFAULT 'invoice';
CREATE TABLE holds (
    payment_hash TEXT PRIMARY KEY,
    preimage TEXT NOT NULL,
    decision TEXT,
    decided_at INTEGER
);
CREATE INDEX idx_holds_open ON holds (payment_hash)
    WHERE decision IS NULL OR decision IN ('settling', 'canceling');
