-- trx and op codes become the enums of V0003, replacing their CHECK
-- constraints. This rewrites trx_<shard_id> and op_<shard_id> and their
-- indexes, under a lock (docs/migrations.md).
DROP INDEX trx_<shard_id>_pending_holds;
ALTER TABLE trx_<shard_id>
    DROP CONSTRAINT trx_<shard_id>_kind_check,
    DROP CONSTRAINT trx_<shard_id>_status_check,
    ALTER COLUMN kind TYPE trx_kind USING kind::trx_kind,
    ALTER COLUMN status TYPE trx_status USING status::trx_status;
CREATE INDEX trx_<shard_id>_pending_holds ON trx_<shard_id> (hold_expires_at) WHERE status = 'pending';

ALTER TABLE op_<shard_id>
    DROP CONSTRAINT op_<shard_id>_kind_check,
    DROP CONSTRAINT op_<shard_id>_cause_check,
    ALTER COLUMN kind TYPE op_kind USING kind::op_kind,
    ALTER COLUMN cause TYPE op_cause USING cause::op_cause;
