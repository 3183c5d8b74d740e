-- Payments (one invoice, one call), refunds (LNURL-withdraw links) and the node's
-- settlement cursors. The statements sqlite-utils generated for the first schema.
CREATE TABLE "payments" (
   "payment_id" TEXT PRIMARY KEY,
   "payment_hash" TEXT NOT NULL,
   "bolt11" TEXT NOT NULL,
   "service" TEXT NOT NULL,
   "amount_msat" INTEGER NOT NULL,
   "status" TEXT NOT NULL,
   "created_at" INTEGER NOT NULL,
   "expires_at" INTEGER NOT NULL,
   "paid_at" INTEGER,
   "spent_at" INTEGER,
   "root_key" TEXT NOT NULL,
   "token_id" TEXT NOT NULL,
   "request_digest" TEXT NOT NULL,
   "description" TEXT,
   "via" TEXT NOT NULL,
   "received_msat" INTEGER
);
CREATE UNIQUE INDEX "idx_payments_payment_hash"
    ON "payments" ("payment_hash");
CREATE INDEX "idx_payments_status_created_at"
    ON "payments" ("status", "created_at");
CREATE TABLE "refunds" (
   "refund_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL REFERENCES "payments"("payment_id"),
   "amount_msat" INTEGER NOT NULL,
   "k1" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "reason" TEXT,
   "created_at" INTEGER NOT NULL,
   "expires_at" INTEGER NOT NULL,
   "payout_bolt11" TEXT,
   "payout_hash" TEXT,
   "updated_at" INTEGER NOT NULL
);
CREATE UNIQUE INDEX "idx_refunds_k1"
    ON "refunds" ("k1");
CREATE INDEX "idx_refunds_payment_id"
    ON "refunds" ("payment_id");
CREATE INDEX "idx_refunds_status"
    ON "refunds" ("status");
CREATE TABLE "cursors" (
   "name" TEXT PRIMARY KEY,
   "value" INTEGER
);
