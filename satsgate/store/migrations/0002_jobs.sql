-- Asynchronous jobs: one per spent payment of a job-mode service.
CREATE TABLE "jobs" (
   "job_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL REFERENCES "payments"("payment_id"),
   "service" TEXT NOT NULL,
   "job_type" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "result_json" TEXT,
   "error_json" TEXT,
   "created_at" INTEGER NOT NULL,
   "updated_at" INTEGER NOT NULL
);
CREATE INDEX "idx_jobs_status"
    ON "jobs" ("status");
