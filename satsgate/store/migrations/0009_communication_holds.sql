-- Communications the screen held for review (issue 19), the do-not-contact list and the
-- de-identified record of every screened communication.
--
-- A held request keeps its payment 'serving' (received, neither earned nor refunded:
-- the ledger's held) and a job row of type 'held' (IN_PROGRESS) that the payer polls; a
-- release finishes that job with the call's result, a refund fails it with the refund.
-- status: held -> review_requested (appeal paid) -> releasing -> released | failed,
-- or held/review_requested -> refunding -> refunded (by the operator, or expired after
-- 24 hours). Every move is one conditional UPDATE from the states it leaves.
CREATE TABLE "held_requests" (
   "hold_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL UNIQUE REFERENCES "payments"("payment_id"),
   "job_id" TEXT NOT NULL,
   "service" TEXT NOT NULL,
   "channel" TEXT NOT NULL,
   "reasons" TEXT NOT NULL,          -- JSON list of the screen's labels
   "amount_msat" INTEGER NOT NULL,
   "status" TEXT NOT NULL,
   -- The request evidence, cleared by the retention sweep 30 days after the hold:
   "params_json" TEXT,               -- the validated request, to run it on release
   "outreach_text" TEXT,             -- what the screen saw
   "appeal_note" TEXT,               -- what the payer wrote with the appeal
   "appeal_payment_id" TEXT,         -- the 1-sat invoice of the appeal
   "appeal_paid_at" INTEGER,
   "created_at" INTEGER NOT NULL,
   "eligible_at" INTEGER NOT NULL,   -- refund-eligible from then on (created_at + 24 h)
   "resolved_at" INTEGER,
   "resolution" TEXT,                -- released | failed | refunded | expired
   "resolved_by" TEXT,               -- operator | schedule
   "updated_at" INTEGER NOT NULL
);
CREATE INDEX "idx_held_requests_status" ON "held_requests" ("status", "created_at");

CREATE TABLE "do_not_contact" (
   "address" TEXT PRIMARY KEY,       -- normalised: +E164 or a lower-case e-mail address
   "source" TEXT NOT NULL,           -- sms-stop, ai-call, operator, ...
   "created_at" INTEGER NOT NULL
);

-- One row per screened communication, kept: no text, no address (a keyed hash of each
-- recipient under the server secret), the verdict and the amount.
CREATE TABLE "screenings" (
   "id" INTEGER PRIMARY KEY AUTOINCREMENT,
   "created_at" INTEGER NOT NULL,
   "service" TEXT,
   "channel" TEXT NOT NULL,
   "verdict" TEXT NOT NULL,          -- passed | held | opted_out | released
   "reasons" TEXT NOT NULL,          -- JSON list
   "recipient_hashes" TEXT NOT NULL, -- JSON list of hex HMAC-SHA256
   "amount_msat" INTEGER,
   "llm" TEXT                        -- off | passed | flagged | error
);
CREATE INDEX "idx_screenings_created_at" ON "screenings" ("created_at");
