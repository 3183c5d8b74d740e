-- The appeal invoices of a held request, found by their hold: an appeal payment's
-- request_digest is its hold id. A hold may have had several (the page replaces an
-- invoice in the last minute of its life), and every one that is paid must either count
-- for its hold or be refunded, so they are read by hold (the appeal page) and the paid
-- ones all together (the scheduler). Partial: no other payment's write touches it.
CREATE INDEX "idx_payments_appeals"
    ON "payments" ("request_digest", "status") WHERE "service" = 'appeal';
