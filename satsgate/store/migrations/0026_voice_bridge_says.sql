-- A say that reached another instance than the one holding the call's audio (several
-- instances on one store: docs/scale.md). Its mu-law audio waits here for the instance
-- that dialed the call, which takes it (one DELETE ... RETURNING) when notified, or at
-- its next look.
CREATE TABLE "voice_bridge_says" (
    "say_id" INTEGER PRIMARY KEY AUTOINCREMENT,
    "session_id" TEXT NOT NULL,
    "audio" BLOB NOT NULL,
    "label" TEXT NOT NULL,
    "created_at" INTEGER NOT NULL
);
CREATE INDEX "idx_voice_bridge_says_session" ON "voice_bridge_says" ("session_id");
