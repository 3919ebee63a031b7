package main

import (
	"math"
	"strings"
	"testing"
)

func TestServiceConfigErrors(t *testing.T) {
	for name, c := range map[string]struct {
		tweak func(*Config)
		want  string
	}{
		"no listen":         {func(c *Config) { c.Listen = ListenConfig{} }, "listen"},
		"tiny body limit":   {func(c *Config) { c.Limits.BodyBytesMax = 10 }, "limits.body_bytes_max"},
		"tiny batch limit":  {func(c *Config) { c.Limits.BatchBodyBytesMax = 4096 }, "limits.batch_body_bytes_max"},
		"bytes under batch": {func(c *Config) { c.Limits.RequestBytesInFlightMax = c.Limits.BatchBodyBytesMax - 1 }, "limits.request_bytes_in_flight_max"},
		"bad rate":          {func(c *Config) { c.Namespaces[0].Exchanges[0].Rate = "1/100" }, "namespaces[0].exchanges[0].rate"},
		"unknown currency":  {func(c *Config) { c.Namespaces[0].Exchanges[0].From = "mana" }, "unknown currency"},
		"duplicate ns":      {func(c *Config) { c.Namespaces[1].ID = 1 }, "namespaces[1].id"},
		"client foreign ns": {func(c *Config) { c.Clients[0].Namespaces = []int32{9} }, "clients[0].namespaces"},
		"bad key hash":      {func(c *Config) { c.Clients[0].KeySHA256 = []string{"secret"} }, "clients[0].key_sha256"},
		"bad permission":    {func(c *Config) { c.Clients[0].Permissions = []string{"all"} }, "clients[0].permissions"},
		"bad log level":     {func(c *Config) { c.Log.Level = "loud" }, "log.level"},
		"ttl default > max": {func(c *Config) { c.Holds.TTLDefault = 2 * c.Holds.TTLMax }, "holds: ttl_default"},
		"no clients":        {func(c *Config) { c.Clients = nil }, "clients"},
		"read under header": {func(c *Config) { c.Timeouts.Read = c.Timeouts.ReadHeader / 2 }, "timeouts.read"},
		"lock past request": {func(c *Config) { c.Timeouts.Lock = 2 * c.Timeouts.Request }, "timeouts.lock"},
		"no committers":     {func(c *Config) { c.Batches.Committers = 0 }, "batches"},
		"no readers":        {func(c *Config) { c.Batches.Readers = 0 }, "batches"},
		"pair twice": {func(c *Config) {
			c.Namespaces[0].Exchanges = append(c.Namespaces[0].Exchanges, ExchangeConfig{From: "gold", To: "silver", Rate: "1:50"})
		}, "namespaces[0].exchanges[2]: exchange gold→silver: listed twice"},
		"minting loop": {func(c *Config) {
			c.Namespaces[1].Exchanges = append(c.Namespaces[1].Exchanges, ExchangeConfig{From: "credits", To: "gold", Rate: "1:1"})
		}, "would let players create currency"},
		"bad refund policy": {func(c *Config) { c.Currencies[0].RefundPolicy = "clawback" }, "currencies[0].refund_policy"},
		"sample ratio > 1":  {func(c *Config) { c.Telemetry.SampleRatio = 1.5 }, "telemetry.sample_ratio"},
		"sample ratio NaN":  {func(c *Config) { c.Telemetry.SampleRatio = math.NaN() }, "telemetry.sample_ratio"},
		"endpoint no URL":   {func(c *Config) { c.Telemetry.OTLPEndpoint = "collector:4317" }, "telemetry.otlp_endpoint"},
	} {
		cfg := devConfig("127.0.0.1:0", "", "k")
		c.tweak(cfg)
		if _, _, err := cfg.service(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.want)
		}
	}
	if _, _, err := devConfig("127.0.0.1:0", "", "k").service(); err != nil {
		t.Fatalf("dev config: %v", err)
	}
}

func TestConfigFileEnvAndUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	base := "shard_count: 2\nshard_distribution_mode: auto\nshard_on_db: 2\ndatabases:\n  - {name: c, host: 127.0.0.1, type: postgres, user: u, password: \"${COFFER_TEST_PW}\"}\n"
	path := writeFile(t, dir, "a.yaml", base)
	if _, _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), "COFFER_TEST_PW not set") {
		t.Fatalf("unset variable: %v", err)
	}
	t.Setenv("COFFER_TEST_PW", "s3cret")
	cfg, _, err := loadConfig(path)
	if err != nil || cfg.Databases[0].Password != "s3cret" || cfg.Listen.HTTP != "127.0.0.1:8080" {
		t.Fatalf("%+v %v", cfg, err)
	}
	t.Setenv("COFFER_TEST_PW", `a\tb"c\x41`)
	if cfg, _, err = loadConfig(path); err != nil || cfg.Databases[0].Password != `a\tb"c\x41` {
		t.Fatalf("a password with a backslash and a quote: %q, %v", cfg.Databases[0].Password, err)
	}
	if _, _, err := loadConfig(writeFile(t, dir, "lead.yaml", "---\n"+base)); err != nil {
		t.Fatalf("a document that starts with ---: %v", err)
	}
	path = writeFile(t, dir, "two.yaml", base+"---\nlisten: {http: ':1'}\n")
	if _, _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), "more than one YAML document") {
		t.Fatalf("a second document: %v", err)
	}
	path = writeFile(t, dir, "b.yaml", base+"listen: {http: ':1', grcp: ':2'}\n")
	if _, _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), "unknown key grcp") {
		t.Fatalf("misspelt key: %v", err)
	}
	for pool, want := range map[string]string{
		"{conns_max: 0}":               "pool.conns_max",
		"{conns_min: 20}":              "pool.conns_min",
		"{health_check_period: 0s}":    "health_check_period must be > 0",
		"{conn_idle_max: 0s}":          "conn_idle_max",
		"{connect_timeout: -1s}":       "connect_timeout",
		"{conn_lifetime_max: 0s}":      "conn_lifetime_max",
		"{conns_max: 4, conns_min: 4}": "",
	} {
		path = writeFile(t, dir, "c.yaml", base+"pool: "+pool+"\n")
		_, _, err := loadConfig(path)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("pool: %s: %v, want %q", pool, err, want)
		}
	}
}
