-- The operator's routing-fee budget for payouts, per UTC day (issue 28: payout fee
-- farming). A payer names each payout invoice and may route it through a last hop of its
-- own, collecting the fee; however many refund links or sessions it cycles, the node
-- spends at most the day's budget on payout fees. committed_msat is what the day has
-- granted to payouts, less what came back unspent (the fee a payout did not use, all of
-- a failed payout's grant); last_grant_msat is the grant of the day's latest statement,
-- read back by the grant itself (see satsgate/store/payout_fees.py).
CREATE TABLE "payout_fee_days" (
    "day" INTEGER PRIMARY KEY,
    "committed_msat" INTEGER NOT NULL CHECK ("committed_msat" >= 0),
    "last_grant_msat" INTEGER NOT NULL
);
