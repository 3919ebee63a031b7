-- A refund or chargeback of a store order is a trx of its own kind,
-- `refund`, whose ops take the order's coins back with the cause `refund`:
-- not revenue (the money went back), so the revenue report tells them
-- from spending (docs/adr/0014-refunds.md). Adding a label to an enum
-- rewrites nothing; V0014 adds the refund's column and indexes.
ALTER TYPE trx_kind ADD VALUE IF NOT EXISTS 'refund';
ALTER TYPE op_cause ADD VALUE IF NOT EXISTS 'refund';
