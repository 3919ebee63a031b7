package shard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig bounds the connection pool of each database.
type PoolConfig struct {
	ConnsMax          int32         `yaml:"conns_max"`
	ConnsMin          int32         `yaml:"conns_min"`
	ConnectTimeout    time.Duration `yaml:"connect_timeout"`
	ConnLifetimeMax   time.Duration `yaml:"conn_lifetime_max"`
	ConnIdleMax       time.Duration `yaml:"conn_idle_max"`
	HealthCheckPeriod time.Duration `yaml:"health_check_period"`
	// Tracer, if set, sees every statement and batch the pools send (the
	// store's tests count round trips with it).
	Tracer pgx.QueryTracer `yaml:"-"`
}

// DefaultPoolConfig suits one service instance on a small server: enough
// connections to keep two cores of PostgreSQL busy per database, and
// timeouts short enough that a dead database fails requests fast.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{
		ConnsMax:          16,
		ConnsMin:          0,
		ConnectTimeout:    3 * time.Second,
		ConnLifetimeMax:   30 * time.Minute,
		ConnIdleMax:       5 * time.Minute,
		HealthCheckPeriod: 10 * time.Second,
	}
}

// Validate refuses settings the pools cannot run with: pgx would fail on
// a pool of no connection, and panic on a health check period of zero
// (its ticker) after the command had started its work.
func (p PoolConfig) Validate() error {
	switch {
	case p.ConnsMax < 1:
		return fmt.Errorf("pool.conns_max: must be at least 1")
	case p.ConnsMin < 0 || p.ConnsMin > p.ConnsMax:
		return fmt.Errorf("pool.conns_min: must be between 0 and pool.conns_max (%d)", p.ConnsMax)
	case p.ConnectTimeout <= 0 || p.ConnLifetimeMax <= 0 || p.ConnIdleMax <= 0 || p.HealthCheckPeriod <= 0:
		return fmt.Errorf("pool: connect_timeout, conn_lifetime_max, conn_idle_max and health_check_period must be > 0")
	}
	return nil
}

// DownCooldown is how long a database stays marked down after a
// connection failure: its requests fail at once (shard_unavailable) instead
// of each waiting for a connect timeout. The first request after it tries
// the database again.
const DownCooldown = time.Second

// Router holds one pool per database of a Map and routes players to them,
// by the map of the shards' moves it read last (Refresh). It is safe for
// concurrent use. Pools connect lazily, so a database that is down at
// start fails only its own shards' requests.
type Router struct {
	m           atomic.Pointer[Map]
	config      *Map
	moves       movesRead
	pools       []*pgxpool.Pool
	dbs         []dbState
	requireSync bool

	// healthMu guards health, by database index: the last Check of each,
	// for the service's status and logs.
	healthMu sync.Mutex
	health   []Health
}

// dbState is what the router knows of a database's health.
type dbState struct {
	downUntil  atomic.Int64 // unix nanoseconds
	unverified atomic.Bool  // schema not (yet) checked compatible
	unsynced   atomic.Bool  // no synchronous standby, and one is required
}

// Open creates the pools. It does not connect; Ping does.
func Open(m *Map, pc PoolConfig) (*Router, error) {
	r := &Router{config: m, dbs: make([]dbState, len(m.Databases())), health: make([]Health, len(m.Databases()))}
	r.m.Store(m)
	r.moves.byDB = make([][]Move, len(m.Databases()))
	for _, db := range m.Databases() {
		cfg, err := pgxpool.ParseConfig(db.Config.ConnString(int(max(1, pc.ConnectTimeout/time.Second))))
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("%s: %w", db.Label(), err)
		}
		cfg.MaxConns = pc.ConnsMax
		cfg.MinConns = pc.ConnsMin
		cfg.MaxConnLifetime = pc.ConnLifetimeMax
		cfg.MaxConnIdleTime = pc.ConnIdleMax
		cfg.HealthCheckPeriod = pc.HealthCheckPeriod
		cfg.ConnConfig.ConnectTimeout = pc.ConnectTimeout
		cfg.ConnConfig.Tracer = pc.Tracer
		cfg.AfterConnect = readTimesInUTC
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("%s: %w", db.Label(), err)
		}
		r.pools = append(r.pools, pool)
	}
	return r, nil
}

// readTimesInUTC makes conn read every timestamptz, alone or in an array,
// in UTC, the zone coffer writes and answers in, whatever the host's: pgx
// reads them in time.Local, so on a host not in UTC the answers mixed
// zones (a lot's expiry in local time beside its creation in UTC).
func readTimesInUTC(_ context.Context, conn *pgx.Conn) error {
	tz := &pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID, Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}}
	conn.TypeMap().RegisterType(tz)
	conn.TypeMap().RegisterType(&pgtype.Type{Name: "_timestamptz", OID: pgtype.TimestamptzArrayOID, Codec: &pgtype.ArrayCodec{ElementType: tz}})
	return nil
}

// Map is the shard map the router routes by now.
func (r *Router) Map() *Map { return r.m.Load() }

// Pool returns the pool of the database holding shard s, or an error
// while none of the config's serves it (Map.Unplaced).
func (r *Router) Pool(s coffer.ShardID) (*pgxpool.Pool, error) {
	m := r.Map()
	if err := m.Unplaced(s); err != nil {
		return nil, err
	}
	return r.pools[m.dbOfShard[s]], nil
}

// Shard returns the pool of the database holding shard s, or while none
// of the config's serves it, of the one the config places it on, whose
// copy, if it moved, is fenced: for tools that run where no shard moves
// (the benchmark's own stack). Requests use Pool.
func (r *Router) Shard(s coffer.ShardID) *pgxpool.Pool {
	return r.pools[r.Map().DatabaseOf(s).Index]
}

// Database returns the pool of the database at index i of the map.
func (r *Router) Database(i int) *pgxpool.Pool { return r.pools[i] }

// DatabaseIndex is the index in the map of the database holding shard s,
// or -1 while none of the config's serves it (Map.Unplaced).
func (r *Router) DatabaseIndex(s coffer.ShardID) int { return r.Map().dbOfShard[s] }

// Available returns nil if requests may go to database i, or why not: its
// schema is not verified, or a connection to it failed within DownCooldown.
func (r *Router) Available(i int) error {
	switch {
	case r.dbs[i].unverified.Load():
		return fmt.Errorf("%s: schema not verified yet", r.config.databases[i].Label())
	case time.Now().UnixNano() < r.dbs[i].downUntil.Load():
		return fmt.Errorf("%s: down (a connection failed less than %s ago)", r.config.databases[i].Label(), DownCooldown)
	}
	return nil
}

// Writable returns nil if writes may go to database i, or why not: it is
// not Available, or a synchronous standby is required and the last probe
// found none in sync (an acknowledged write could then be lost at the next
// failover).
func (r *Router) Writable(i int) error {
	if err := r.Available(i); err != nil {
		return err
	}
	if r.dbs[i].unsynced.Load() {
		return fmt.Errorf("%s: no synchronous standby in sync, and require_synchronous_standby is set", r.config.databases[i].Label())
	}
	return nil
}

// MarkDown records a connection failure of database i.
func (r *Router) MarkDown(i int) {
	r.dbs[i].downUntil.Store(time.Now().Add(DownCooldown).UnixNano())
}

// MarkUp records that database i answered, ending any cooldown.
func (r *Router) MarkUp(i int) { r.dbs[i].downUntil.Store(0) }

// SetVerified records whether database i's schema was found compatible.
// Databases start verified; a server sets them unverified until it has
// checked them.
func (r *Router) SetVerified(i int, ok bool) { r.dbs[i].unverified.Store(!ok) }

// Ping checks every database, in order, and returns the first failure,
// naming the database.
func (r *Router) Ping(ctx context.Context) error {
	for i, pool := range r.pools {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("%s: %w", r.config.databases[i].Label(), err)
		}
	}
	return nil
}

// Close closes every pool.
func (r *Router) Close() {
	for _, p := range r.pools {
		p.Close()
	}
}
