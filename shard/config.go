package shard

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Config is the shard layout of a deployment, with the keys and meaning of
// the sdbmigrate YAML config, so that one file serves both tools.
type Config struct {
	ShardCount       int    `yaml:"shard_count"`
	DistributionMode string `yaml:"shard_distribution_mode"`
	// ShardOnDB is the number of shards per database in auto mode: database
	// i (in file order) holds shards i*ShardOnDB … (i+1)*ShardOnDB-1.
	ShardOnDB int              `yaml:"shard_on_db"`
	Databases []DatabaseConfig `yaml:"databases"`
}

// DatabaseConfig is one entry of `databases`: a PostgreSQL database that
// holds a range of shards.
type DatabaseConfig struct {
	// Name is the PostgreSQL database name (dbname), as in sdbmigrate.
	Name string `yaml:"name"`
	Host string `yaml:"host"`
	Port int    `yaml:"port"`
	// Type must be postgres (or empty); sdbmigrate also knows mysql, which
	// coffer refuses.
	Type     string `yaml:"type"`
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Hosts lists several "host:port" servers (a primary and its standbys);
	// connections go to whichever accepts writes. Replaces host and port.
	Hosts []string `yaml:"hosts,omitempty"`
	// TargetSessionAttrs is libpq's target_session_attrs; it defaults to
	// read-write when Hosts has more than one entry.
	TargetSessionAttrs string `yaml:"target_session_attrs,omitempty"`
	// SSLMode is libpq's sslmode; empty means prefer.
	SSLMode string `yaml:"sslmode,omitempty"`
	// Shards lists the ranges held, in manual mode; an empty list (shards:
	// []) is a database that holds none yet, which shards are moved to
	// (coffer shard move). Written even when empty, so that such a
	// database's entry reads back.
	Shards []Range `yaml:"shards"`
}

// Range is an inclusive range of shard ids.
type Range struct {
	Min int `yaml:"min"`
	Max int `yaml:"max"`
}

// Label names the database in messages: its position, name and address.
func (d DatabaseConfig) Label(index int) string {
	return fmt.Sprintf("database #%d %q (%s)", index, d.Name, strings.Join(d.addresses(), ","))
}

func (d DatabaseConfig) addresses() []string {
	if len(d.Hosts) > 0 {
		return d.Hosts
	}
	port := d.Port
	if port == 0 {
		port = 5432
	}
	return []string{net.JoinHostPort(d.Host, strconv.Itoa(port))}
}

// ConnString is the libpq keyword/value connection string of the database.
// connectTimeoutS bounds each connection attempt.
func (d DatabaseConfig) ConnString(connectTimeoutS int) string {
	var hosts, ports []string
	for _, a := range d.addresses() {
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			h, p = a, "5432"
		}
		hosts, ports = append(hosts, h), append(ports, p)
	}
	kv := [][2]string{
		{"host", strings.Join(hosts, ",")},
		{"port", strings.Join(ports, ",")},
		{"dbname", d.Name},
		{"user", d.User},
		{"password", d.Password},
		{"connect_timeout", strconv.Itoa(connectTimeoutS)},
		{"application_name", "coffer"},
	}
	tsa := d.TargetSessionAttrs
	if tsa == "" && len(hosts) > 1 {
		tsa = "read-write"
	}
	if tsa != "" {
		kv = append(kv, [2]string{"target_session_attrs", tsa})
	}
	if d.SSLMode != "" {
		kv = append(kv, [2]string{"sslmode", d.SSLMode})
	}
	var b strings.Builder
	for _, p := range kv {
		if p[1] == "" {
			continue
		}
		fmt.Fprintf(&b, "%s='%s' ", p[0], strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p[1]))
	}
	return strings.TrimSpace(b.String())
}
