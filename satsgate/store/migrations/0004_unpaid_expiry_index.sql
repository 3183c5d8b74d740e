-- No query reads payments by (status, created_at), and the index cost every spend
-- a second page write. Unpaid rows are found by expiry for pruning, through a
-- partial index that a paid or spent row never touches.
DROP INDEX IF EXISTS idx_payments_status_created_at;
CREATE INDEX idx_payments_unpaid_expiry ON payments (expires_at) WHERE status = 'unpaid';
