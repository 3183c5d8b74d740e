-- One session per return invoice, kept by the database: the payment hash of the return
-- invoice, under a unique index, so two opens racing with one invoice cannot both pass
-- the open check (the node pays an invoice once; the second payout would move nothing).
-- Sessions opened before this migration have no hash (NULL, which a unique index never
-- counts as a duplicate): two of them that an older release let share an invoice stay
-- as they are and cannot make this migration fail. The open check still compares the
-- invoice text, so a new session never shares an invoice with one of them either.
ALTER TABLE "sessions" ADD COLUMN "return_hash" TEXT;
CREATE UNIQUE INDEX "idx_sessions_return_hash"
    ON "sessions" ("return_hash") WHERE "return_hash" IS NOT NULL;
