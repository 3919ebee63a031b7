-- grant_trx_<shard_id> goes: it was a second copy of the grant's rules, in
-- PL/pgSQL, beside the service's (coffer.Book). Every write is now planned
-- by the service and written in batches (docs/adr/0012-group-commit.md),
-- which cost fewer round trips per write than the function did.
DROP FUNCTION IF EXISTS grant_trx_<shard_id>(integer, bigint, integer, text, bytea, text, text, integer, bigint, boolean,
    timestamptz, integer, jsonb, bigint, integer);
