-- The queue of CPU engine jobs that `satsgate worker` processes take ([workers] mode =
-- "queue", issue 30; PostgreSQL only: on SQLite the tables exist and stay empty).
--
-- A job's status: queued -> running -> done (the function returned) | error (it raised:
-- the exception is the outcome) | failed (past its time, lost by its worker once too
-- often, or no worker took it in time) | cancelled (the gateway stopped waiting). Every
-- change is a conditional UPDATE on the status (a worker's own writes also on its name
-- and attempt), so a result that comes back after the job was failed and refunded, or
-- after another worker took it over, changes nothing (satsgate/store/cpu_queue.py).
-- Times are the database's clock, in ms (created_us and claimed_us in microseconds: the
-- order of fairness between payers), so workers on other machines need no synchronised
-- clocks.
CREATE TABLE "cpu_jobs" (
    "id" INTEGER PRIMARY KEY AUTOINCREMENT,
    "engine" TEXT NOT NULL,
    "payer" TEXT NOT NULL,
    "quick" INTEGER NOT NULL,
    "fn" TEXT NOT NULL,
    "args" BLOB,
    "limit_s" REAL NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'queued',
    "created_us" INTEGER NOT NULL,
    "claim_by_ms" INTEGER NOT NULL,
    "deadline_ms" INTEGER NOT NULL,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "worker" TEXT,
    "claimed_us" INTEGER,
    "lease_until_ms" INTEGER,
    "outcome" BLOB,
    "error" TEXT,
    "finished_ms" INTEGER
);

CREATE INDEX "cpu_jobs_active" ON "cpu_jobs" ("payer", "id") WHERE "status" IN ('queued', 'running');

CREATE INDEX "cpu_jobs_finished" ON "cpu_jobs" ("finished_ms") WHERE "finished_ms" IS NOT NULL;

-- The workers, as each reports itself every heartbeat; a row whose heartbeat is old is a
-- worker that stopped without saying so (shown as such, removed after an hour).
CREATE TABLE "cpu_workers" (
    "name" TEXT PRIMARY KEY,
    "host" TEXT NOT NULL,
    "pid" INTEGER NOT NULL,
    "engines" TEXT NOT NULL,
    "concurrency" INTEGER NOT NULL,
    "started_ms" INTEGER NOT NULL,
    "heartbeat_ms" INTEGER NOT NULL,
    "running" INTEGER NOT NULL DEFAULT 0,
    "done" INTEGER NOT NULL DEFAULT 0
);
