// Package coffer is the domain of the coffer service: the types, invariants,
// error codes and service interfaces that every adapter (postgres, shard,
// http, grpc) implements or calls. It imports nothing of ours.
package coffer

// PlayerID identifies a player, the owner of balances and the shard key.
// Valid ids are > 0.
type PlayerID int64

// ShardID is the number of a shard: the suffix of its tables (trx_7, op_7).
type ShardID int
