-- Deposit settlements (AI calls, the voice bridge): a deposit payment is billed for
-- what was used and the rest refunded, once. The row's primary key is the payment: a
-- second settlement of the same payment finds it and changes nothing. The refund itself
-- is a row of refunds (refund_id; the ledger counts it there); payout_state follows the
-- payout to the payer's Lightning address: none (nothing to refund), withdraw (an
-- LNURL-withdraw link to claim), pending -> paying -> paid, or fallback (the payout
-- failed: the link is the payer's to claim).
CREATE TABLE "deposit_settlements" (
   "payment_id" TEXT PRIMARY KEY REFERENCES "payments"("payment_id"),
   "service" TEXT NOT NULL,
   "deposit_msat" INTEGER NOT NULL,
   "used_msat" INTEGER NOT NULL,
   "refund_msat" INTEGER NOT NULL,
   "refund_id" TEXT,
   "refund_address" TEXT,
   "payout_state" TEXT NOT NULL,
   "payout_error" TEXT,
   "reason" TEXT NOT NULL,
   "created_at" INTEGER NOT NULL,
   "updated_at" INTEGER NOT NULL
);
CREATE INDEX "idx_deposit_settlements_payout_state"
    ON "deposit_settlements" ("payout_state");
