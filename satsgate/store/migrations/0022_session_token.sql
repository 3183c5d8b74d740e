-- A session is bound at open to a token the Lightning route never sees (issue 28): the
-- sha256 (hex) of the session token handed to the payer in the open's answer only. The
-- token itself is never stored. bearer, topUp and close (and an MCP session paymentId)
-- must present it. Sessions opened before this migration have none (NULL): no
-- credential can spend or close them; the idle sweep closes them and pays the balance
-- to their return invoice, as for any idle session.
ALTER TABLE "sessions" ADD COLUMN "token_sha256" TEXT;
