package shard

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cofferhq/coffer"
)

// ShardCountMax is the largest shard_count the jump hash supports.
const ShardCountMax = 1 << 31

// Map places players on shards and shards on databases: the config's
// placement, overlaid with the shards' moves (WithMoves). It is immutable
// and safe for concurrent use.
type Map struct {
	count     int
	databases []Database
	// dbOfShard[s] is the index in databases of the one holding shard s,
	// or -1 while no database of the config serves it (Unplaced says why).
	dbOfShard []int
	// configured[s] is dbOfShard[s] as the config places it.
	configured []int
	// moves are the latest move of each shard that has one.
	moves map[coffer.ShardID]Move
}

// Database is one database of the map and the shards it holds, ascending.
type Database struct {
	Index  int
	Config DatabaseConfig
	Shards []coffer.ShardID
}

// Label names the database in messages.
func (d Database) Label() string { return d.Config.Label(d.Index) }

// Name names the database in metrics and status: address(es)/dbname.
func (d Database) Name() string { return d.Server() + "/" + d.Config.Name }

// Server names the PostgreSQL server(s) holding the database: its
// address(es). Databases with the same Server share a WAL.
func (d Database) Server() string { return strings.Join(d.Config.addresses(), ",") }

// NewMap validates cfg and builds the map. Every shard must be on exactly one
// database; errors name the key at fault.
func NewMap(cfg Config) (*Map, error) {
	if cfg.ShardCount < 1 || cfg.ShardCount > ShardCountMax {
		return nil, fmt.Errorf("shard_count: must be between 1 and %d, got %d", ShardCountMax, cfg.ShardCount)
	}
	if len(cfg.Databases) == 0 {
		return nil, errors.New("databases: at least one database is required")
	}
	if cfg.ShardCount > 1<<20 {
		// One slice entry per shard below; a deployment with more shards
		// than this would have more tables than PostgreSQL can hold sanely.
		return nil, fmt.Errorf("shard_count: %d is more than coffer supports (%d)", cfg.ShardCount, 1<<20)
	}
	if err := checkDatabases(cfg.Databases); err != nil {
		return nil, err
	}
	var ranges [][]Range
	switch cfg.DistributionMode {
	case "auto":
		var err error
		if ranges, err = autoRanges(cfg); err != nil {
			return nil, err
		}
	case "manual":
		for i, db := range cfg.Databases {
			// An empty list (shards: []) is a database added to take
			// shards that move there (coffer shard move); none at all is
			// a mistake.
			if db.Shards == nil {
				return nil, fmt.Errorf("databases[%d].shards: manual mode needs the shard ranges of every database (shards: [] for one that holds none yet)", i)
			}
			ranges = append(ranges, db.Shards)
		}
	default:
		return nil, fmt.Errorf("shard_distribution_mode: must be auto or manual, got %q", cfg.DistributionMode)
	}
	m := &Map{count: cfg.ShardCount, dbOfShard: make([]int, cfg.ShardCount), moves: map[coffer.ShardID]Move{}}
	for s := range m.dbOfShard {
		m.dbOfShard[s] = -1
	}
	for i, db := range cfg.Databases {
		d := Database{Index: i, Config: db}
		for j, r := range ranges[i] {
			if r.Min < 0 || r.Max >= cfg.ShardCount || r.Min > r.Max {
				return nil, fmt.Errorf("databases[%d].shards[%d]: range %d…%d is not within 0…%d or min > max", i, j, r.Min, r.Max, cfg.ShardCount-1)
			}
			for s := r.Min; s <= r.Max; s++ {
				if other := m.dbOfShard[s]; other >= 0 {
					return nil, fmt.Errorf("databases[%d].shards[%d]: shard %d is already on databases[%d]", i, j, s, other)
				}
				m.dbOfShard[s] = i
				d.Shards = append(d.Shards, coffer.ShardID(s))
			}
		}
		m.databases = append(m.databases, d)
	}
	if missing := m.unplaced(); len(missing) > 0 {
		return nil, fmt.Errorf("databases: shards %s are on no database", missing)
	}
	for i := range m.databases {
		slices.Sort(m.databases[i].Shards)
	}
	m.configured = slices.Clone(m.dbOfShard)
	return m, nil
}

func checkDatabases(dbs []DatabaseConfig) error {
	seen := map[string]int{}
	for i, db := range dbs {
		switch {
		case db.Type == "mysql":
			return fmt.Errorf("databases[%d].type: mysql is not supported; coffer stores on PostgreSQL only (type: postgres)", i)
		case db.Type != "" && db.Type != "postgres":
			return fmt.Errorf("databases[%d].type: must be postgres, got %q", i, db.Type)
		case db.Name == "":
			return fmt.Errorf("databases[%d].name: the database name is required", i)
		case db.Host == "" && len(db.Hosts) == 0:
			return fmt.Errorf("databases[%d].host: a host (or hosts) is required", i)
		case db.Host != "" && len(db.Hosts) > 0:
			return fmt.Errorf("databases[%d]: give either host/port or hosts, not both", i)
		case db.Port < 0 || db.Port > 65535:
			return fmt.Errorf("databases[%d].port: %d is not a TCP port", i, db.Port)
		case db.User == "":
			return fmt.Errorf("databases[%d].user: the user is required", i)
		}
		key := strings.Join(db.addresses(), ",") + "/" + db.Name
		if j, dup := seen[key]; dup {
			return fmt.Errorf("databases[%d]: same database as databases[%d] (%s)", i, j, key)
		}
		seen[key] = i
	}
	return nil
}

func autoRanges(cfg Config) ([][]Range, error) {
	n := len(cfg.Databases)
	if cfg.ShardOnDB < 1 {
		return nil, errors.New("shard_on_db: auto mode needs shard_on_db ≥ 1")
	}
	if cfg.ShardOnDB*n != cfg.ShardCount {
		return nil, fmt.Errorf("shard_on_db: shard_count %d does not match shard_on_db × databases = %d × %d", cfg.ShardCount, cfg.ShardOnDB, n)
	}
	ranges := make([][]Range, n)
	for i, db := range cfg.Databases {
		if len(db.Shards) > 0 {
			return nil, fmt.Errorf("databases[%d].shards: shard ranges are for shard_distribution_mode: manual", i)
		}
		ranges[i] = []Range{{Min: i * cfg.ShardOnDB, Max: (i+1)*cfg.ShardOnDB - 1}}
	}
	return ranges, nil
}

func (m *Map) unplaced() string {
	var parts []string
	for s := 0; s < m.count && len(parts) < 5; s++ {
		if m.dbOfShard[s] < 0 {
			parts = append(parts, strconv.Itoa(s))
		}
	}
	return strings.Join(parts, ", ")
}

// ShardCount is the fixed number of shards.
func (m *Map) ShardCount() int { return m.count }

// ShardOf is the shard that holds the player's rows.
func (m *Map) ShardOf(p coffer.PlayerID) coffer.ShardID {
	return coffer.ShardID(Jump(uint64(p), int64(m.count)))
}

// ShardOfPurchase is the shard that holds the claim of store order k
// (coffer.PurchaseKey.Hash), whoever's player presents it. Shards, not
// databases, place claims: a shard keeps its claims when it moves to
// another database, as it keeps its players.
func (m *Map) ShardOfPurchase(k coffer.PurchaseKey) coffer.ShardID {
	return coffer.ShardID(Jump(k.Hash(), int64(m.count)))
}

// DatabaseIndex is the index of the database that holds shard s, or -1
// while none of the config's serves it (Unplaced says why).
func (m *Map) DatabaseIndex(s coffer.ShardID) int { return m.dbOfShard[s] }

// DatabaseOf is the database that holds shard s, or while none of the
// config's serves it (Unplaced), the one the config places it on: for
// tools and tests where no shard moves. Requests use DatabaseIndex.
func (m *Map) DatabaseOf(s coffer.ShardID) Database {
	if i := m.dbOfShard[s]; i >= 0 {
		return m.databases[i]
	}
	return m.databases[m.configured[s]]
}

// Databases lists the databases in config order.
func (m *Map) Databases() []Database { return m.databases }
