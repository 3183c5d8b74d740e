-- The instance whose request is waiting on a receipt's swap (several instances on one
-- store: docs/scale.md). A swap left 'swapping' is settled with the mint at once when that
-- instance is gone, and otherwise only once its request has surely given up: another
-- instance never settles a swap whose answer a live one is still waiting for.
ALTER TABLE "ecash_receipts" ADD COLUMN "swapping_by" TEXT;
