-- A paid call is 'serving' from its spend until its answer or its refund is recorded
-- (then 'spent'): a crash leaves its unanswered calls 'serving', and the next start
-- refunds them. The partial index holds only the calls in flight, so the start-up
-- sweep reads a handful of rows, not the table.
CREATE INDEX idx_payments_serving ON payments (payment_id) WHERE status = 'serving';
