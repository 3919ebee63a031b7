-- The op cause `refund_held`: a refund taking back, when a hold rolls
-- back, coins of its order the hold reserved when the order was refunded,
-- which the refund counted short (lot_N.owed, V0022). Like `refund`, not
-- revenue; the revenue report also takes it off the refunds' shortfall
-- (docs/ledger.md, Refunds). Adding a label to an enum rewrites nothing.
ALTER TYPE op_cause ADD VALUE IF NOT EXISTS 'refund_held';
