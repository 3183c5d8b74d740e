-- receive-fax: an inbound fax number leased to one payment for a period, and the faxes
-- received on it. A received fax's document is a file of the file store (file_name)
-- until retention deletes it; the row then keeps amounts and status only.
CREATE TABLE "fax_leases" (
   "inbox_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL UNIQUE,
   "number" TEXT NOT NULL,
   "forward_email" TEXT,
   "created_at" INTEGER NOT NULL,
   "expires_at" INTEGER NOT NULL
);
CREATE INDEX "idx_fax_leases_number"
    ON "fax_leases" ("number", "expires_at");
CREATE TABLE "fax_received" (
   "fax_id" TEXT PRIMARY KEY,
   "inbox_id" TEXT NOT NULL,
   "upstream_id" TEXT NOT NULL UNIQUE,
   "sender" TEXT,
   "pages" INTEGER,
   "file_name" TEXT,
   "status" TEXT NOT NULL,
   "received_at" INTEGER NOT NULL
);
CREATE INDEX "idx_fax_received_inbox"
    ON "fax_received" ("inbox_id", "received_at");
-- send-fax: one row per fax sent (fax_id is the payer's faxId), followed to delivered or
-- failed and settled once: charged when delivered, refunded in full when it failed.
CREATE TABLE "fax_sends" (
   "fax_id" TEXT PRIMARY KEY,
   "payment_id" TEXT NOT NULL UNIQUE,
   "provider" TEXT NOT NULL,
   "upstream_id" TEXT,
   "status" TEXT NOT NULL,
   "pages" INTEGER,
   "reason" TEXT,
   "paid_msat" INTEGER NOT NULL,
   "charged_msat" INTEGER,
   "created_at" INTEGER NOT NULL,
   "updated_at" INTEGER NOT NULL,
   "settled_at" INTEGER
);
CREATE INDEX "idx_fax_sends_unsettled"
    ON "fax_sends" ("settled_at");
