-- Voice-bridge sessions (services/bridge_sessions.py): one row per paid open_voice_bridge,
-- its events (transcripts and call progress) polled by seq. state: dialing -> ringing ->
-- open -> ended (one conditional UPDATE from a live state, so a session ends once);
-- settled: the deposit's settlement (deposit_settlements) is recorded, so a restart
-- settles an ended session whose settlement a crash interrupted. The media WebSocket's
-- token is kept as its SHA-256 only. No phone number is kept. Events (transcripts) are
-- deleted 24 hours after they were made (at_s: unix seconds; outreach.retention_rules).
CREATE TABLE voice_bridge_sessions (
    session_id TEXT PRIMARY KEY,
    payment_id TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    call_id TEXT,
    language TEXT NOT NULL,
    stt_enabled INTEGER NOT NULL,
    tts_enabled INTEGER NOT NULL,
    refund_address TEXT,
    deposit_msat INTEGER NOT NULL,
    per_minute_msat INTEGER NOT NULL,
    max_duration_s INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    answered_at_ms INTEGER,
    alive_at_ms INTEGER,
    ended_at_ms INTEGER,
    end_reason TEXT,
    elapsed_s INTEGER,
    used_msat INTEGER,
    settled INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX idx_voice_bridge_live ON voice_bridge_sessions (state)
    WHERE state != 'ended' OR settled = 0;
CREATE TABLE voice_bridge_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    text TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    at_s INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
