-- Signed callbacks to callers (callback_url / callback_id of an async job). The job
-- keeps where and how to call back: callback_secret is the HMAC key the 202 answer
-- handed the caller. callback_deliveries is the outbox: a row is written in the same
-- transaction as the job's end, so a finished job's callback survives a crash; the
-- sender claims due rows by moving next_at (a lease), so one delivery runs at a time.
ALTER TABLE "jobs" ADD COLUMN "callback_url" TEXT;
ALTER TABLE "jobs" ADD COLUMN "callback_id" TEXT;
ALTER TABLE "jobs" ADD COLUMN "callback_secret" TEXT;
CREATE TABLE callback_deliveries (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id),
    url TEXT NOT NULL,
    secret TEXT NOT NULL,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at INTEGER NOT NULL,
    delivered_at INTEGER,
    given_up_at INTEGER,
    last_error TEXT
);
CREATE INDEX idx_callback_deliveries_due ON callback_deliveries (next_at)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;
