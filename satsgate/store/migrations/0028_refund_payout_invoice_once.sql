-- A payout invoice pays one refund link: the node pays an invoice once, so two links
-- claimed with one invoice would both read as paid while one payment moved. Among the
-- links being paid no two share an invoice; a link already paid with it is checked by
-- the claim itself (store/refunds.py).
CREATE UNIQUE INDEX "idx_refunds_claiming_payout_hash" ON "refunds" ("payout_hash")
  WHERE "status" = 'claiming';
