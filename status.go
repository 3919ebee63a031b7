package coffer

import "time"

// Status is the operators' view of one service instance: which shard
// databases it reaches. A database that is down fails only its players'
// requests; the instance stays ready.
type Status struct {
	Version         string           `json:"version"`
	StartedAt       time.Time        `json:"started_at"`
	ShardCount      int32            `json:"shard_count"`
	ShardsAvailable int32            `json:"shards_available"`
	Databases       []DatabaseStatus `json:"databases"`
	// Moves are the shard moves in progress, and those whose new home
	// the instance's config does not list (their shards are unavailable
	// there); each database's Shards are where the shards are now.
	Moves []ShardMove `json:"moves"`
}

// ShardMove is a shard's latest move (coffer shard move) as an instance
// sees it.
type ShardMove struct {
	Shard  int32  `json:"shard"`
	Epoch  int64  `json:"epoch"`
	Source string `json:"source"`
	Target string `json:"target"`
	// State is copying (the source serves the shard), cut (nobody does:
	// its writes wait), done, verified, cleaned (the target serves it) or
	// aborted.
	State string `json:"state"`
}

// ShardRange is the shards Min … Max, inclusive.
type ShardRange struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// DatabaseStatus is one shard database as an instance sees it.
type DatabaseStatus struct {
	Name           string       `json:"name"`
	Shards         []ShardRange `json:"shards"`
	Up             bool         `json:"up"`
	SchemaVerified bool         `json:"schema_verified"`
	Error          string       `json:"error,omitempty"`
	CheckedAt      *time.Time   `json:"checked_at,omitempty"`
	ConnsTotal     int32        `json:"conns_total"`
	ConnsAcquired  int32        `json:"conns_acquired"`
	ConnsMax       int32        `json:"conns_max"`
	// BatchConns* are the group-commit batches' connections (writes and
	// reads), a pool of their own beside Conns*.
	BatchConnsTotal    int32 `json:"batch_conns_total"`
	BatchConnsAcquired int32 `json:"batch_conns_acquired"`
	BatchConnsMax      int32 `json:"batch_conns_max"`
	// Primary and SynchronousStandbys are set for a database with several
	// hosts: the host that accepts writes, and how many standbys stream
	// from it in sync (with none, an acknowledged write could be lost at
	// the next failover).
	Primary             string `json:"primary,omitempty"`
	SynchronousStandbys *int32 `json:"synchronous_standbys,omitempty"`
	// WritesRefused is true while writes fail with shard_unavailable for
	// lack of a synchronous standby (require_synchronous_standby).
	WritesRefused bool `json:"writes_refused,omitempty"`
}
