-- Several gateway instances on one store (issue 29: past one process). Each running
-- `satsgate serve` has a row here, renewed by its heartbeat; an instance whose heartbeat
-- is older than the lease is gone, and what it was serving is taken up once, by one
-- instance (recovering_by until recovering_until, then recovered_at). Times are unix s.
CREATE TABLE "instances" (
    "instance_id" TEXT PRIMARY KEY,
    "host" TEXT NOT NULL,
    "pid" INTEGER NOT NULL,
    -- The process-id namespace the pid is in (its inode): a pid is looked up only from
    -- the same host and namespace.
    "pid_ns" TEXT NOT NULL DEFAULT '',
    -- A digest of the instance's server secret: instances that share a store must share
    -- it (a credential one issued is verified by another).
    "secret_tag" TEXT NOT NULL DEFAULT '',
    "started_at" INTEGER NOT NULL,
    "heartbeat_at" INTEGER NOT NULL,
    "gone_at" INTEGER,
    "recovering_by" TEXT,
    "recovering_until" INTEGER,
    "recovered_at" INTEGER
);

-- Duties that must run on one instance at a time (the sweeps, payout retries, callback
-- deliveries, ...): held by one instance until expires_at (unix ms), renewed by its holder
-- at each run, taken by another once expired.
CREATE TABLE "duty_leases" (
    "duty" TEXT PRIMARY KEY,
    "holder" TEXT NOT NULL,
    "expires_at" INTEGER NOT NULL
);

-- Which instance is serving a spent call ('serving'): the one whose crash refunds it.
ALTER TABLE "payments" ADD COLUMN "served_by" TEXT;

-- Which instance is releasing or refunding a held request ('releasing', 'refunding').
ALTER TABLE "held_requests" ADD COLUMN "claimed_by" TEXT;

-- Which instance is paying a deposit's refund to its Lightning address ('paying').
ALTER TABLE "deposit_settlements" ADD COLUMN "paying_by" TEXT;

-- What each instance's calls in flight hold of a session's balance (sessions.held_msat is
-- their sum): a gone instance's part goes back to the balance, the others' stay held.
CREATE TABLE "session_holds" (
    "session_id" TEXT NOT NULL,
    "instance_id" TEXT NOT NULL,
    "held_msat" INTEGER NOT NULL CHECK ("held_msat" >= 0),
    PRIMARY KEY ("session_id", "instance_id")
);

-- Work left in flight by a release before instances were recorded belongs to a
-- placeholder instance that is gone from the start: the first start takes it up.
INSERT INTO "instances" ("instance_id", "host", "pid", "started_at", "heartbeat_at", "gone_at")
VALUES ('before-instances', '', 0, 0, 0, 0);
UPDATE "payments" SET "served_by" = 'before-instances' WHERE "status" = 'serving'
OR "payment_id" IN (SELECT "payment_id" FROM "voice_bridge_sessions"
    WHERE "state" != 'ended' OR "settled" = 0)
OR "payment_id" IN (SELECT "payment_id" FROM "ai_calls"
    WHERE "status" IN ('placing', 'calling', 'redial_scheduled'));
UPDATE "held_requests" SET "claimed_by" = 'before-instances'
WHERE "status" IN ('releasing', 'refunding');
UPDATE "deposit_settlements" SET "paying_by" = 'before-instances'
WHERE "payout_state" = 'paying';
INSERT INTO "session_holds" ("session_id", "instance_id", "held_msat")
SELECT "session_id", 'before-instances', "held_msat" FROM "sessions" WHERE "held_msat" > 0;
