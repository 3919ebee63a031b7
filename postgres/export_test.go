package postgres

import "github.com/cofferhq/coffer"

// RevenueSQL is the revenue report's statement on shard id.
func RevenueSQL(id coffer.ShardID) string { return newQueries(id).revenue }

// Queued is how many jobs of writes wait for database db's committers.
func (s *Store) Queued(db int) int { return len(s.writers[db].queue) }
