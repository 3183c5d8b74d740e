-- What a restart needs to take up a job whose work runs on a remote platform (the
-- service's params and the platform's prediction id), so that the paid job is
-- waited for again instead of being lost or run twice. NULL for other jobs.
ALTER TABLE "jobs" ADD COLUMN "resume_json" TEXT;
