-- One vote per paid call (call_id = payment id): a replayed call never counts twice.
CREATE TABLE "votes" (
   "call_id" TEXT PRIMARY KEY,
   "slug" TEXT NOT NULL,
   "created_at" INTEGER NOT NULL
);
CREATE INDEX "idx_votes_slug"
    ON "votes" ("slug");
