-- What a refund payout cost and why the last one failed: the routing fee the node paid
-- (msat, set when the payout succeeded) and the node's own reason for the last failed
-- attempt (kept after the link went back to open, shown to the operator).
ALTER TABLE refunds ADD COLUMN payout_fee_msat INTEGER;
ALTER TABLE refunds ADD COLUMN payout_error TEXT;
