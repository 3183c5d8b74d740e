-- AI calls (satsgate/services/ai_call_runner.py): one row per paid call (its payment),
-- from pending_confirm (session_id, questions) or its first placement through at most
-- one redial to its end. The request, answers, transcript and results are cleared by the
-- retention sweep; status, amounts and times stay for the ledger.
CREATE TABLE "ai_calls" (
   "call_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL UNIQUE REFERENCES "payments"("payment_id"),
   "session_id" TEXT UNIQUE,
   "status" TEXT NOT NULL,
   "request_json" TEXT,
   "questions_json" TEXT,
   "answers_json" TEXT,
   "provider" TEXT,
   "attempt" INTEGER NOT NULL DEFAULT 0,
   "provider_call_id" TEXT,
   "attempts_json" TEXT,
   "deposit_msat" INTEGER NOT NULL,
   "minutes" INTEGER NOT NULL,
   "per_minute_msat" INTEGER NOT NULL,
   "next_at" INTEGER,
   "outcome" TEXT,
   "transcript" TEXT,
   "results_json" TEXT,
   "refund_address" TEXT,
   "created_at" INTEGER NOT NULL,
   "updated_at" INTEGER NOT NULL
);
CREATE INDEX "idx_ai_calls_status" ON "ai_calls" ("status");
