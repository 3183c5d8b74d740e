-- Cashu ecash (NUT-24): tokens taken as payment, the proofs the node holds, the change and
-- refund tokens given back, and the melts of held ecash into the node's Lightning balance.
--
-- A receipt is one token presented with a call. Its proofs' Ys (hash_to_curve of each
-- secret, NUT-00) are inserted into ecash_inputs with the receipt, in one transaction,
-- BEFORE the mint is asked to swap them: a token presented twice (at once or later) finds
-- its Ys taken and is refused without a second swap. status: 'swapping' (outputs saved,
-- the mint asked), 'redeemed' (swapped; payment_id is the call's payment), 'unknown' (the
-- mint's answer was lost: the recovery job asks the mint, NUT-07/NUT-09), 'rejected' (the
-- mint refused: spent before, or not valid). Amounts are in the unit (sat). service and
-- request_digest: the call it pays for (a receipt redeemed late becomes its payment).
CREATE TABLE ecash_receipts (
    receipt_id TEXT PRIMARY KEY,
    service TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    mint TEXT NOT NULL,
    unit TEXT NOT NULL,
    amount INTEGER NOT NULL,
    fee INTEGER NOT NULL,
    price INTEGER NOT NULL,
    change INTEGER NOT NULL,
    status TEXT NOT NULL,
    payment_id TEXT,
    change_token TEXT,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE ecash_inputs (
    y TEXT PRIMARY KEY,
    receipt_id TEXT NOT NULL REFERENCES ecash_receipts (receipt_id)
);
CREATE INDEX idx_ecash_inputs_receipt ON ecash_inputs (receipt_id);
-- Blinded outputs of a swap or a melt, saved with their secret and blinding factor before
-- the mint sees them, so a lost answer can be restored (NUT-09). op_id: the receipt, refund
-- or melt; role: 'keep', 'change', 'refund', 'melt_change'.
CREATE TABLE ecash_outputs (
    b_ TEXT PRIMARY KEY,
    op_id TEXT NOT NULL,
    keyset_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    secret TEXT NOT NULL,
    r TEXT NOT NULL,
    role TEXT NOT NULL,
    position INTEGER NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s', 'now') AS INTEGER))
);
CREATE INDEX idx_ecash_outputs_op ON ecash_outputs (op_id);
-- Proofs satsgate made (unblinded from its own outputs). state: 'held' (the node's),
-- 'change' (given to the payer as change), 'refunded' (given back in a refund token),
-- 'melting' (inputs of a melt under way), 'melted', 'swapped' (inputs of a refund's swap),
-- 'swap_restored' (inputs of a refund swap whose answer was lost, its outputs restored).
-- payment_id: the call it was kept for (NULL: a melt's returned fee reserve).
CREATE TABLE ecash_proofs (
    y TEXT PRIMARY KEY,
    mint TEXT NOT NULL,
    keyset_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    secret TEXT NOT NULL,
    c TEXT NOT NULL,
    payment_id TEXT,
    state TEXT NOT NULL,
    op_id TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX idx_ecash_proofs_state ON ecash_proofs (state, mint);
CREATE INDEX idx_ecash_proofs_payment ON ecash_proofs (payment_id);
-- A refund paid in ecash: the token handed back (its row in refunds, status 'paid', carries
-- the amount for the ledger).
CREATE TABLE ecash_refunds (
    refund_id TEXT PRIMARY KEY,
    payment_id TEXT NOT NULL,
    mint TEXT NOT NULL,
    amount INTEGER NOT NULL,
    fee INTEGER NOT NULL,
    token TEXT NOT NULL
);
CREATE INDEX idx_ecash_refunds_payment ON ecash_refunds (payment_id);
-- Melts (NUT-05): held proofs spent at their mint to pay an invoice of the node's own.
-- state: 'pending' (proofs marked melting, the mint asked), 'paid', 'failed' (proofs held
-- again), 'unknown' (answer lost: asked again by the next run). amount: the invoice;
-- inputs: what the proofs were worth; change: the fee reserve given back (NUT-08).
CREATE TABLE ecash_melts (
    melt_id TEXT PRIMARY KEY,
    mint TEXT NOT NULL,
    quote TEXT NOT NULL,
    bolt11 TEXT NOT NULL,
    payment_hash TEXT NOT NULL,
    amount INTEGER NOT NULL,
    fee_reserve INTEGER NOT NULL,
    inputs INTEGER NOT NULL,
    input_fee INTEGER NOT NULL,
    change INTEGER,
    state TEXT NOT NULL,
    node_settled INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
