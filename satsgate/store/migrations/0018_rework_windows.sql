-- The free-retry window after an upstream content refusal (CONTENT_FILTERED_RETRY).
--
-- While a window is open its payment stays 'serving' (received, neither earned nor
-- refunded: the ledger's held); the start-up sweep of unanswered calls leaves it alone.
-- state: open -> running (one retry claimed it: a conditional UPDATE) -> open again (the
-- retry was refused too, below the cap) | closed (answered, failed and refunded, or the
-- cap reached and refunded); open -> declined (POST /api/decline-retry) | expired (the
-- deadline passed): both refunded in full. Every move is one conditional UPDATE from the
-- state it leaves, so of a retry, a decline and the expiry exactly one wins.
CREATE TABLE "rework_windows" (
   "payment_id" TEXT PRIMARY KEY REFERENCES "payments"("payment_id"),
   "service" TEXT NOT NULL,
   "token_hash" TEXT NOT NULL,        -- sha256 of the current rework_token (hex)
   "state" TEXT NOT NULL,
   "attempts" INTEGER NOT NULL,       -- calls made on this payment, the refused ones included
   "rework_until" REAL NOT NULL,      -- unix s: retries accepted until then
   "created_at" INTEGER NOT NULL,
   "updated_at" INTEGER NOT NULL
);
CREATE INDEX "idx_rework_windows_state_until" ON "rework_windows" ("state", "rework_until");
