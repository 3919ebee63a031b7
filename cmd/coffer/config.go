package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/telemetry"
	"gopkg.in/yaml.v3"
)

// Config is coffer's configuration file. Its shard and env keys are those
// of an sdbmigrate config, so one file serves both tools; the rest is the
// service's (docs/configuration.md).
type Config struct {
	shard.Config `yaml:",inline"`
	Env          migrate.Env       `yaml:"env,omitempty"`
	Pool         shard.PoolConfig  `yaml:"pool"`
	Listen       ListenConfig      `yaml:"listen"`
	Limits       LimitsConfig      `yaml:"limits"`
	Timeouts     TimeoutsConfig    `yaml:"timeouts"`
	Batches      BatchesConfig     `yaml:"batches"`
	Holds        HoldsConfig       `yaml:"holds"`
	Sweep        SweepConfig       `yaml:"sweep"`
	Log          LogConfig         `yaml:"log"`
	Telemetry    TelemetryConfig   `yaml:"telemetry"`
	Currencies   []CurrencyConfig  `yaml:"currencies,omitempty"`
	Namespaces   []NamespaceConfig `yaml:"namespaces,omitempty"`
	Clients      []ClientConfig    `yaml:"clients,omitempty"`
	Feed         FeedConfig        `yaml:"feed"`
	// RequireSynchronousStandby refuses writes (shard_unavailable) to a
	// database whose primary has no synchronous standby in sync, since an
	// acknowledged write could then be lost at the next failover.
	RequireSynchronousStandby bool `yaml:"require_synchronous_standby,omitempty"`
}

// ListenConfig is where the service listens; an empty address turns that
// listener off. Ops is the operations listener: /metrics (which names the
// database hosts) and Go's profiler (/debug/pprof/), for operators only,
// never on the API's port; keep it on a private address. Pprof is its
// former name, refused with a pointer to ops. Console is the support
// console's (docs/console.md): its pages and, on their origin, the HTTP
// API; off unless set.
type ListenConfig struct {
	HTTP    string `yaml:"http"`
	GRPC    string `yaml:"grpc"`
	Ops     string `yaml:"ops"`
	Console string `yaml:"console,omitempty"`
	Pprof   string `yaml:"pprof,omitempty"`
}

// LimitsConfig bounds requests and what an instance serves at once.
type LimitsConfig struct {
	BodyBytesMax int64 `yaml:"body_bytes_max"`
	// BatchBodyBytesMax bounds a batch's body instead: up to 1000 changes.
	BatchBodyBytesMax int64 `yaml:"batch_body_bytes_max"`
	// HeaderBytesMax bounds a request's headers (gRPC: metadata).
	HeaderBytesMax int `yaml:"header_bytes_max"`
	// RequestsInFlightMax bounds the API calls served at once, HTTP and
	// gRPC together; one more is refused at once with overloaded.
	RequestsInFlightMax int `yaml:"requests_in_flight_max"`
	// RequestBytesInFlightMax bounds the bytes of the request bodies
	// (gRPC: messages) the calls in flight hold, both transports
	// together: an HTTP body's as they arrive, a gRPC message's once gRPC
	// has read it, before it is decoded. A body that would pass it is
	// refused at once with overloaded. Decoding takes up to about 65
	// times the bytes sent, so this, not the calls in flight, bounds what
	// requests take in memory.
	RequestBytesInFlightMax int64 `yaml:"request_bytes_in_flight_max"`
	// ReportsInFlightMax bounds the revenue reports computed at once (each
	// reads every shard); one more is overloaded.
	ReportsInFlightMax int `yaml:"reports_in_flight_max"`
	// GRPCStreamsMax bounds the calls one gRPC connection has open at once.
	GRPCStreamsMax int `yaml:"grpc_streams_max"`
}

// BatchesConfig tunes group commit: the writes (and balance reads) bound
// for one database are gathered into batches, each one transaction
// (docs/architecture.md).
type BatchesConfig struct {
	// Committers is the batches of writes in flight per database, each on
	// a connection of the batches' own (besides pool.conns_max: the
	// batches' settings come with their connections, postgres.Store).
	Committers int `yaml:"committers"`
	// Readers is the batches of balance reads in flight per database,
	// each on a connection of the batches' own as well.
	Readers int `yaml:"readers"`
	// SizeMax bounds the writes or reads of a batch (a batch call's
	// changes for one database go into one batch, whatever their number).
	SizeMax int `yaml:"size_max"`
	// QueueMax bounds the calls waiting per database; one more is refused
	// at once with overloaded.
	QueueMax int `yaml:"queue_max"`
}

// TimeoutsConfig bounds the work of a request, the phases of a
// connection and the drain at shutdown.
type TimeoutsConfig struct {
	Request time.Duration `yaml:"request"`
	// Lock bounds a batch's wait for its players' locks: past it, the
	// batch is split by player, so that a player locked elsewhere fails
	// only its own writes. At most request; 0 means a quarter of it.
	Lock time.Duration `yaml:"lock"`
	// ReadHeader bounds the reading of a request's headers (gRPC: a new
	// connection's handshake), so a client that trickles them is cut off.
	ReadHeader time.Duration `yaml:"read_header"`
	// Read bounds the reading of a whole HTTP request, its body too. A
	// call holds its slot in limits.requests_in_flight_max, and what has
	// arrived of its body in limits.request_bytes_in_flight_max, while its
	// body arrives, so a client that trickles bodies holds them this long.
	Read time.Duration `yaml:"read"`
	// Write bounds the sending of an answer once it is ready, so a client
	// that stops reading is cut off.
	Write time.Duration `yaml:"write"`
	// Idle closes a connection with no request for that long.
	Idle     time.Duration `yaml:"idle"`
	Shutdown time.Duration `yaml:"shutdown"`
}

// HoldsConfig bounds a hold's life.
type HoldsConfig struct {
	TTLDefault time.Duration `yaml:"ttl_default"`
	TTLMax     time.Duration `yaml:"ttl_max"`
}

// SweepConfig paces the background sweepers of expired holds and lots,
// and of the marks of committers gone.
type SweepConfig struct {
	Interval time.Duration `yaml:"interval"`
	// BatchMax bounds the holds (or players) one pass takes per shard,
	// and the marks per database.
	BatchMax int `yaml:"batch_max"`
}

// LogConfig sets the level of the JSON log: info has the start, the
// drain, database state and server-side failures; debug every request.
type LogConfig struct {
	Level string `yaml:"level"`
}

// TelemetryConfig turns tracing on: the spans of the calls, their waits
// in the queues, the batches, the round trips and the commits, sent to an
// OpenTelemetry collector (docs/operations.md#tracing).
type TelemetryConfig struct {
	// OTLPEndpoint is the collector's OTLP/gRPC URL, http://host:4317 (or
	// https:// for TLS); empty, the default, is tracing off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of calls traced among those whose caller
	// sent no traceparent (0 … 1); a caller's traceparent decides for its
	// own calls.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// CurrencyConfig is one currency of the deployment.
type CurrencyConfig struct {
	ID         int32    `yaml:"id"`
	Code       string   `yaml:"code"`
	Paid       bool     `yaml:"paid"`
	SpendOrder []string `yaml:"spend_order,omitempty,flow"`
	// RefundPolicy is write_off (the default) or claw_back.
	RefundPolicy string `yaml:"refund_policy,omitempty"`
}

// NamespaceConfig is one namespace and its exchange pairs.
type NamespaceConfig struct {
	ID        int32            `yaml:"id"`
	Name      string           `yaml:"name,omitempty"`
	Exchanges []ExchangeConfig `yaml:"exchanges,omitempty"`
}

// ExchangeConfig is one exchange pair: Rate "A:B" gives B units of To for
// every A units of From, rounded down.
type ExchangeConfig struct {
	From string `yaml:"from"`
	To   string `yaml:"to"`
	Rate string `yaml:"rate"`
}

// ClientConfig is one calling backend. KeySHA256 lists the hex SHA-256 of
// its API keys (coffer keygen makes a key and its hash); more than one lets
// a key be rotated.
type ClientConfig struct {
	Name        string   `yaml:"name"`
	Emitter     int32    `yaml:"emitter"`
	KeySHA256   []string `yaml:"key_sha256"`
	Namespaces  []int32  `yaml:"namespaces,flow"`
	Permissions []string `yaml:"permissions,flow"`
}

// DefaultConfig is the config before the file is read: every key the file
// leaves out keeps these values.
func DefaultConfig() *Config {
	return &Config{
		Pool:   shard.DefaultPoolConfig(),
		Listen: ListenConfig{HTTP: "127.0.0.1:8080", GRPC: "127.0.0.1:9090", Ops: "127.0.0.1:8081"},
		Limits: LimitsConfig{BodyBytesMax: 64 << 10, BatchBodyBytesMax: 4 << 20, HeaderBytesMax: 16 << 10, RequestsInFlightMax: 1024,
			RequestBytesInFlightMax: 8 << 20, ReportsInFlightMax: 2, GRPCStreamsMax: 128},
		Timeouts: TimeoutsConfig{Request: 5 * time.Second, ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: 10 * time.Second,
			Idle: 2 * time.Minute, Shutdown: 20 * time.Second},
		Batches:   BatchesConfig{Committers: 1, Readers: 1, SizeMax: 100, QueueMax: 1024},
		Holds:     HoldsConfig{TTLDefault: 10 * time.Minute, TTLMax: 24 * time.Hour},
		Sweep:     SweepConfig{Interval: 5 * time.Second, BatchMax: 1000},
		Log:       LogConfig{Level: "info"},
		Telemetry: TelemetryConfig{SampleRatio: 1},
		Feed:      defaultFeed(),
	}
}

// loadConfig reads and validates a config file. Unknown keys are errors:
// a misspelt key silently ignored is a misconfigured money service.
func loadConfig(path string) (*Config, *shard.Map, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	if raw, err = expandEnv(raw); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("config %s: the file is empty", path)
		}
		return nil, nil, fmt.Errorf("config %s: %s", path, yamlMessage(err))
	}
	if err := dec.Decode(&yaml.Node{}); !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("config %s: more than one YAML document (a line ---): coffer reads one; join them", path)
	}
	if err := cfg.Env.Validate(); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	if err := cfg.Pool.Validate(); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	m, err := shard.NewMap(cfg.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, m, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${NAME} with the environment variable NAME, so that
// secrets (database passwords, say) need not be in the file. An unset
// variable is an error, not an empty password. In "${NAME}", the quoted
// form the docs show, YAML reads escapes (\t, \x41): the value is
// escaped there, so that it reads back as set.
func expandEnv(raw []byte) ([]byte, error) {
	var missing []string
	var out []byte
	last := 0
	for _, m := range envRef.FindAllSubmatchIndex(raw, -1) {
		name := string(raw[m[2]:m[3]])
		v, ok := os.LookupEnv(name)
		if !ok {
			missing = append(missing, name)
		}
		if m[0] > 0 && raw[m[0]-1] == '"' && m[1] < len(raw) && raw[m[1]] == '"' {
			q := strconv.Quote(v)
			v = q[1 : len(q)-1]
		}
		out = append(append(out, raw[last:m[0]]...), v...)
		last = m[1]
	}
	if missing != nil {
		return nil, fmt.Errorf("environment variable(s) %s not set", strings.Join(missing, ", "))
	}
	return append(out, raw[last:]...), nil
}

var notFound = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlMessage rewords the YAML decoder's errors for people.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = notFound.ReplaceAllString(msg, "unknown key $1")
	return strings.ReplaceAll(msg, "\n  ", "; ")
}

// service checks the service part of the config and builds the catalog
// and the clients from it. Errors name the key at fault.
func (c *Config) service() (*coffer.Catalog, *coffer.Clients, error) {
	switch {
	case c.Listen.HTTP == "" && c.Listen.GRPC == "":
		return nil, nil, fmt.Errorf("listen: set http, grpc or both")
	case c.Listen.Pprof != "":
		return nil, nil, fmt.Errorf("listen.pprof: renamed listen.ops, which serves /debug/pprof/ and /metrics (no longer on the API port)")
	case c.Limits.BodyBytesMax < 1024:
		return nil, nil, fmt.Errorf("limits.body_bytes_max: must be at least 1024")
	case c.Limits.BatchBodyBytesMax < c.Limits.BodyBytesMax:
		return nil, nil, fmt.Errorf("limits.batch_body_bytes_max: must be at least limits.body_bytes_max, since a batch may hold one change of that size")
	case c.Limits.RequestBytesInFlightMax < c.Limits.BatchBodyBytesMax:
		return nil, nil, fmt.Errorf("limits.request_bytes_in_flight_max: must be at least limits.batch_body_bytes_max, or a batch of that size is never served")
	case c.Limits.HeaderBytesMax < 4096:
		return nil, nil, fmt.Errorf("limits.header_bytes_max: must be at least 4096")
	case c.Limits.RequestsInFlightMax <= 0 || c.Limits.ReportsInFlightMax <= 0 || c.Limits.GRPCStreamsMax <= 0:
		return nil, nil, fmt.Errorf("limits: requests_in_flight_max, reports_in_flight_max and grpc_streams_max must be > 0")
	case c.Timeouts.Request <= 0 || c.Timeouts.ReadHeader <= 0 || c.Timeouts.Write <= 0 || c.Timeouts.Idle <= 0 || c.Timeouts.Shutdown <= 0:
		return nil, nil, fmt.Errorf("timeouts: request, read_header, write, idle and shutdown must be > 0")
	case c.Timeouts.Read < c.Timeouts.ReadHeader:
		return nil, nil, fmt.Errorf("timeouts.read: must be at least timeouts.read_header, since it bounds the headers too")
	case c.Timeouts.Lock < 0 || c.Timeouts.Lock > c.Timeouts.Request:
		return nil, nil, fmt.Errorf("timeouts.lock: must be at most timeouts.request (0: a quarter of it)")
	case c.Batches.Committers <= 0 || c.Batches.Readers <= 0 || c.Batches.SizeMax <= 0 || c.Batches.QueueMax <= 0:
		return nil, nil, fmt.Errorf("batches: committers, readers, size_max and queue_max must be > 0")
	case c.Sweep.Interval <= 0 || c.Sweep.BatchMax <= 0:
		return nil, nil, fmt.Errorf("sweep: interval and batch_max must be > 0")
	case !(c.Telemetry.SampleRatio >= 0 && c.Telemetry.SampleRatio <= 1):
		return nil, nil, fmt.Errorf("telemetry.sample_ratio: must be between 0 and 1")
	case len(c.Currencies) == 0 || len(c.Namespaces) == 0 || len(c.Clients) == 0:
		return nil, nil, fmt.Errorf("currencies, namespaces and clients: the service needs at least one of each")
	}
	if c.Telemetry.OTLPEndpoint != "" {
		if err := telemetry.CheckEndpoint(c.Telemetry.OTLPEndpoint); err != nil {
			return nil, nil, fmt.Errorf("telemetry.otlp_endpoint: %w", err)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Log.Level)); err != nil {
		return nil, nil, fmt.Errorf("log.level: must be debug, info, warn or error")
	}
	var currencies []coffer.Currency
	for _, cc := range c.Currencies {
		cur := coffer.Currency{ID: coffer.CurrencyID(cc.ID), Code: cc.Code, Paid: cc.Paid, RefundPolicy: coffer.RefundPolicy(cc.RefundPolicy)}
		for _, k := range cc.SpendOrder {
			cur.SpendOrder = append(cur.SpendOrder, coffer.SpendKey(k))
		}
		currencies = append(currencies, cur)
	}
	catalog, err := coffer.NewCatalog(currencies, c.Holds.TTLDefault, c.Holds.TTLMax)
	if err != nil {
		return nil, nil, err
	}
	namespaces := map[int32]bool{}
	for i, ns := range c.Namespaces {
		if ns.ID <= 0 || namespaces[ns.ID] {
			return nil, nil, fmt.Errorf("namespaces[%d].id: must be > 0 and unique", i)
		}
		namespaces[ns.ID] = true
		for j, ex := range ns.Exchanges {
			rate, ok := coffer.ParseRate(ex.Rate)
			if !ok {
				return nil, nil, fmt.Errorf("namespaces[%d].exchanges[%d].rate: must be A:B with integers > 0, e.g. 1:100", i, j)
			}
			if err := catalog.AddRate(coffer.Namespace(ns.ID), ex.From, ex.To, rate); err != nil {
				return nil, nil, fmt.Errorf("namespaces[%d].exchanges[%d]: %w", i, j, err)
			}
		}
	}
	if err := catalog.CheckRates(); err != nil {
		return nil, nil, fmt.Errorf("namespaces: %w", err)
	}
	clients, err := c.clients(namespaces)
	return catalog, clients, err
}

func (c *Config) clients(namespaces map[int32]bool) (*coffer.Clients, error) {
	var list []coffer.Client
	for i, cc := range c.Clients {
		cl := coffer.Client{Name: cc.Name, Emitter: coffer.Emitter(cc.Emitter)}
		for _, h := range cc.KeySHA256 {
			kh, err := coffer.ParseKeyHash(h)
			if err != nil {
				return nil, fmt.Errorf("clients[%d].key_sha256: %w", i, err)
			}
			cl.KeyHashes = append(cl.KeyHashes, kh)
		}
		for _, ns := range cc.Namespaces {
			if !namespaces[ns] {
				return nil, fmt.Errorf("clients[%d].namespaces: %d is not a configured namespace", i, ns)
			}
			cl.Namespaces = append(cl.Namespaces, coffer.Namespace(ns))
		}
		for _, p := range cc.Permissions {
			cl.Permissions = append(cl.Permissions, coffer.Permission(p))
		}
		list = append(list, cl)
	}
	return coffer.NewClients(list)
}
