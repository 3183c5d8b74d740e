-- A receipt's swap attempts (issue 28): a token whose swap answer was lost may be swapped
-- again by a retry once the mint says its proofs are unspent. Every attempt sends the
-- same blinded outputs (saved with the receipt at its claim, kept while a swap of them
-- could be signed), so whichever attempt the mint signed, NUT-09 restore of those outputs
-- gives satsgate the value. op_id names the current attempt: a request settles only its
-- own attempt (a conditional write on receipt_id AND op_id), so a slow resolve never
-- undoes a newer retry's claim. status gains 'released': the mint said every proof
-- unspent; the receipt, its Ys and outputs stay, and the next presentation of the token
-- claims it again.
ALTER TABLE ecash_receipts ADD COLUMN op_id TEXT NOT NULL DEFAULT '';
UPDATE ecash_receipts SET op_id = receipt_id;
