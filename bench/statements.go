package bench

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/cofferhq/coffer/shard"
)

// statementStats are one statement's pg_stat_statements counters, summed
// over every shard: the shard number in table names is replaced by N.
type statementStats struct {
	Query string
	// Nested statements ran inside a function (seen with
	// pg_stat_statements.track = all); the call's own counters include
	// theirs.
	Nested   bool
	Calls    int64
	ExecMs   float64
	WALBytes int64
}

// addStatement adds st's counters to its statement's entry in m.
func addStatement(m map[string]*statementStats, st statementStats) {
	key := st.Query
	if st.Nested {
		key = "nested " + key
	}
	sum, ok := m[key]
	if !ok {
		sum = &statementStats{Query: st.Query, Nested: st.Nested}
		m[key] = sum
	}
	sum.Calls += st.Calls
	sum.ExecMs += st.ExecMs
	sum.WALBytes += st.WALBytes
}

// statementsHint says what a server needs for the statement figures.
const statementsHint = "pg_stat_statements must be in the server's shared_preload_libraries and created in its databases (CREATE EXTENSION pg_stat_statements)"

// CreateStatementsExtension creates pg_stat_statements in every database
// of router. Its library must be in the servers' shared_preload_libraries.
func CreateStatementsExtension(ctx context.Context, router *shard.Router) error {
	for i := range router.Map().Databases() {
		if _, err := router.Database(i).Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			return fmt.Errorf("%s: %w", statementsHint, err)
		}
	}
	return nil
}

// resetStatements empties pg_stat_statements on every server of router.
func resetStatements(ctx context.Context, router *shard.Router) error {
	return eachServer(router, func(i int) error {
		if _, err := router.Database(i).Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return fmt.Errorf("%s: %w", statementsHint, err)
		}
		return nil
	})
}

// readStatements reads pg_stat_statements on every server of router. One
// database per server is enough: the view shows the statements of all.
func readStatements(ctx context.Context, router *shard.Router) (map[string]*statementStats, error) {
	out := map[string]*statementStats{}
	err := eachServer(router, func(i int) error {
		rows, err := router.Database(i).Query(ctx, `SELECT query, NOT toplevel, calls, total_exec_time, wal_bytes::bigint
			FROM pg_stat_statements`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s statementStats
			if err := rows.Scan(&s.Query, &s.Nested, &s.Calls, &s.ExecMs, &s.WALBytes); err != nil {
				return err
			}
			s.Query = statementText(s.Query, s.Nested)
			addStatement(out, s)
		}
		return rows.Err()
	})
	return out, err
}

func eachServer(router *shard.Router, fn func(database int) error) error {
	seen := map[string]bool{}
	for i, db := range router.Map().Databases() {
		if seen[db.Server()] {
			continue
		}
		seen[db.Server()] = true
		if err := fn(i); err != nil {
			return fmt.Errorf("%s: %w", db.Name(), err)
		}
	}
	return nil
}

var (
	shardSuffix = regexp.MustCompile(`\b([a-z]+(?:_[a-z]+)*)_[0-9]+\b`)
	spaces      = regexp.MustCompile(`\s+`)
	constants   = regexp.MustCompile(`'(?:[^']|'')*'|\$[0-9]+|\b[0-9]+\b`)
)

// statementText is a statement's text the same on every shard, on one
// line: trx_7 becomes trx_N. A statement run inside a function (nested)
// is kept with its constants or with them numbered, whichever its first
// call in each database left, so its constants become ?.
func statementText(query string, nested bool) string {
	query = strings.TrimSpace(spaces.ReplaceAllString(shardSuffix.ReplaceAllString(query, "${1}_N"), " "))
	if nested {
		query = constants.ReplaceAllString(query, "?")
	}
	return query
}
