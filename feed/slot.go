package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs the relay tells apart.
const (
	// duplicateObject: a slot or publication made meanwhile by another relay.
	duplicateObject = "42710"
	// objectInUse: the slot is read by another relay.
	objectInUse = "55006"
	// objectNotInPrerequisiteState: a slot invalidated past
	// max_slot_wal_keep_size, which can no longer give its changes.
	objectNotInPrerequisiteState = "55000"
	// undefinedTable: shard_arrival on a database migrated before it.
	undefinedTable = "42P01"
)

// sqlState is err's SQLSTATE, "" for an error that is not PostgreSQL's.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// prepare checks that the database can be decoded, and makes its
// publication hold the trx and op tables of the shards it holds, and its
// slot exist. The shards are those the database records
// (_sdbmigrate_sharding_state, which coffer migrate writes and a shard
// move changes: coffer shard move adds a shard to its target as the copy
// begins, whose copied rows the relay skips, and takes it from its source
// at the cut-over), read at every session, so that a relay follows the
// moves. The publication comes first: pgoutput decodes each change with
// the catalog of its time, so a slot older than its publication would
// meet changes it cannot publish.
func prepare(ctx context.Context, conn *pgx.Conn, publication, slot string) error {
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return err
	}
	if walLevel != "logical" {
		return &fatalError{fmt.Errorf("wal_level is %s: the feed decodes the WAL, set wal_level = logical and restart PostgreSQL (docs/events.md)", walLevel)}
	}
	var shards []coffer.ShardID
	if err := conn.QueryRow(ctx, "SELECT shard_ids::text FROM _sdbmigrate_sharding_state WHERE id = 0").Scan(jsonShards{&shards}); err != nil {
		return fmt.Errorf("the shards the database holds (migrated with coffer migrate?): %w", err)
	}

	tables := make([]string, 0, 2*len(shards))
	for _, id := range shards {
		tables = append(tables, fmt.Sprintf("trx_%d", id), fmt.Sprintf("op_%d", id))
	}
	var have bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)", publication).Scan(&have); err != nil {
		return err
	}
	sql, err := publicationSQL(ctx, conn, publication, have, tables)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, sql); err != nil && sqlState(err) != duplicateObject {
		return fmt.Errorf("publication %s: %w", publication, err)
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)", slot).Scan(&have); err != nil {
		return err
	}
	if !have {
		_, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
		if err != nil && sqlState(err) != duplicateObject {
			return fmt.Errorf("slot %s: %w", slot, err)
		}
	}
	return nil
}

// publicationSQL makes publication hold tables, or, when there are none
// (a database that holds no shard: a new one, or one whose shards all
// moved away), none.
func publicationSQL(ctx context.Context, conn *pgx.Conn, publication string, have bool, tables []string) (string, error) {
	name := pgx.Identifier{publication}.Sanitize()
	switch {
	case !have && len(tables) == 0:
		return "CREATE PUBLICATION " + name + " WITH (publish = 'insert, update')", nil
	case !have:
		return "CREATE PUBLICATION " + name + " FOR TABLE " + strings.Join(tables, ", ") + " WITH (publish = 'insert, update')", nil
	case len(tables) > 0:
		return "ALTER PUBLICATION " + name + " SET TABLE " + strings.Join(tables, ", "), nil
	}
	rows, _ := conn.Query(ctx, "SELECT quote_ident(tablename) FROM pg_publication_tables WHERE pubname = $1", publication)
	members, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(members) == 0 {
		return "SELECT 1", err
	}
	return "ALTER PUBLICATION " + name + " DROP TABLE " + strings.Join(members, ", "), nil
}

// jsonShards scans the JSON array of shard ids sdbmigrate records.
type jsonShards struct{ ids *[]coffer.ShardID }

func (j jsonShards) Scan(src any) error {
	text, ok := src.(string)
	if !ok {
		return fmt.Errorf("shard_ids: %T is not text", src)
	}
	return json.Unmarshal([]byte(text), j.ids)
}

// SlotState is what the database says of a relay's slot.
type SlotState struct {
	// RetainedBytes is the WAL the slot keeps from removal: from the
	// oldest WAL it still needs to the server's current position.
	RetainedBytes int64
	// WALStatus is PostgreSQL's wal_status: reserved, extended,
	// unreserved (past max_wal_size, at risk), or lost (invalidated).
	WALStatus string
	// Active tells whether a relay reads the slot now.
	Active bool
}

// slotState reads the state of slot; found is false when it does not exist.
func slotState(ctx context.Context, conn *pgx.Conn, slot string) (st SlotState, found bool, err error) {
	err = conn.QueryRow(ctx, `SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, COALESCE(wal_status, ''), active
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&st.RetainedBytes, &st.WALStatus, &st.Active)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, false, nil
	}
	return st, err == nil, err
}

// SlotName is the slot of a relay for database name: slots are the
// server's, not a database's, so that several coffer databases on one
// server each have their own. Characters a slot name may not hold become _.
func SlotName(prefix, database string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, prefix+"_"+database)
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}
