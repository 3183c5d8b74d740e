-- Delivery records of sent SMS, automated calls and faxes: what the payer polls and the
-- provider's status webhooks update. No message text and no phone number is kept (the
-- destination's country only); a call's billing (paid, charged) is settled once.
CREATE TABLE "deliveries" (
   "delivery_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL,
   "channel" TEXT NOT NULL,
   "provider" TEXT NOT NULL,
   "provider_ref" TEXT,
   "country" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "status_rank" INTEGER NOT NULL,
   "final" INTEGER NOT NULL DEFAULT 0,
   "error" TEXT,
   "answered_by" TEXT,
   "duration_s" INTEGER,
   "paid_msat" INTEGER NOT NULL,
   "rate_msat" INTEGER,
   "charged_msat" INTEGER,
   "settled_at" INTEGER,
   "created_at" INTEGER NOT NULL,
   "updated_at" INTEGER NOT NULL,
   "final_at" INTEGER
);
CREATE UNIQUE INDEX "idx_deliveries_provider_ref"
    ON "deliveries" ("provider", "provider_ref");
CREATE INDEX "idx_deliveries_payment"
    ON "deliveries" ("payment_id");
CREATE INDEX "idx_deliveries_open"
    ON "deliveries" ("final", "settled_at");
