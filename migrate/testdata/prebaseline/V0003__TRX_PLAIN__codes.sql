-- The codes of trx and op rows as enum types, one set per database: an enum
-- admits only its labels, as the CHECK constraints on text did, but takes 4
-- bytes instead of the text and costs nothing per insert, where PostgreSQL
-- re-reads each CHECK's expression for every statement (about 10 µs each,
-- docs/benchmarks.md). V0004 moves the shard tables onto them.
CREATE TYPE trx_kind AS ENUM ('change', 'hold', 'exchange', 'expire');
CREATE TYPE trx_status AS ENUM ('committed', 'pending', 'rolled_back', 'expired');
CREATE TYPE op_kind AS ENUM ('grant', 'consume', 'expire');
CREATE TYPE op_cause AS ENUM ('change', 'release', 'exchange');
