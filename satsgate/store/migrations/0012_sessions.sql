-- Payment sessions (the MPP "session" intent, lightning method): a prepaid balance that
-- bearer calls of any paid service draw on, paid back to the client's return invoice on
-- close. The session id is the payment hash of its opening deposit. Deposits themselves
-- are rows of payments (mode 'deposit'), settled like any invoice and consumed (paid ->
-- spent) exactly once by the open or topUp that proves them. held_msat: the part of
-- spent_msat debited for calls not answered yet (given back at start-up after a crash).
CREATE TABLE "sessions" (
   "session_id" TEXT PRIMARY KEY,
   "deposit_msat" INTEGER NOT NULL,
   "spent_msat" INTEGER NOT NULL DEFAULT 0,
   "held_msat" INTEGER NOT NULL DEFAULT 0,
   "return_invoice" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "created_at" INTEGER NOT NULL,
   "last_used_at" INTEGER NOT NULL,
   "closed_at" INTEGER,
   "close_reason" TEXT,
   "refund_msat" INTEGER,
   "payout_status" TEXT,
   "payout_hash" TEXT,
   "payout_fee_msat" INTEGER,
   "payout_error" TEXT,
   "payout_attempts" INTEGER NOT NULL DEFAULT 0,
   "payout_next_at" INTEGER,
   "updated_at" INTEGER NOT NULL,
   CHECK ("spent_msat" >= 0 AND "spent_msat" <= "deposit_msat"),
   CHECK ("held_msat" >= 0 AND "held_msat" <= "spent_msat")
);
CREATE INDEX "idx_sessions_status_last_used" ON "sessions" ("status", "last_used_at");
CREATE INDEX "idx_sessions_payout_status" ON "sessions" ("payout_status");
CREATE TABLE "session_deposits" (
   "payment_hash" TEXT PRIMARY KEY,
   "session_id" TEXT NOT NULL REFERENCES "sessions"("session_id"),
   "amount_msat" INTEGER NOT NULL,
   "kind" TEXT NOT NULL,
   "challenge_id" TEXT NOT NULL,
   "created_at" INTEGER NOT NULL
);
CREATE INDEX "idx_session_deposits_session" ON "session_deposits" ("session_id");
