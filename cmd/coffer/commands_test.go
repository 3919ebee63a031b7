package main

import (
	"encoding/hex"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
)

// TestKeygen: the printed hash is the SHA-256 of the printed key, and the
// key is new each time.
func TestKeygen(t *testing.T) {
	keys := map[string]bool{}
	for i := 0; i < 2; i++ {
		code, out, _ := run(t, "keygen")
		var key, hash string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			switch f[0] {
			case "key:":
				key = f[1]
			case "key_sha256:":
				hash = f[1]
			}
		}
		h := coffer.HashKey(key)
		if code != 0 || key == "" || hash != hex.EncodeToString(h[:]) || keys[key] {
			t.Fatalf("keygen: code %d\n%s", code, out)
		}
		keys[key] = true
	}
	if code, _, _ := run(t, "keygen", "extra"); code != 2 {
		t.Fatalf("keygen with an argument: exit %d", code)
	}
}

// TestServeRefusesBadConfig: `coffer serve` names the key at fault and
// exits 1 without serving.
// TestTuneGC: a serving process collects at gcPercent unless GOGC says
// otherwise.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	tuneGC()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Fatalf("GC percent %d, want %d", got, gcPercent)
	}
	t.Setenv("GOGC", "50")
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set, yet GC percent changed to %d", got)
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	cfg := dbConfig(t, "currencies: [{id: 1, code: gold}]\nnamespaces: [{id: 1, exchanges: [{from: gold, to: mana, rate: \"1:2\"}]}]\nclients: [{name: a, emitter: 1, key_sha256: [\""+strings.Repeat("ab", 32)+"\"], namespaces: [1], permissions: [read]}]\n")
	code, _, errOut := run(t, "serve", "-c", cfg)
	if code != 1 || !strings.Contains(errOut, "namespaces[0].exchanges[0]") {
		t.Fatalf("code %d: %s", code, errOut)
	}
	if code, _, errOut := run(t, "serve", "-c", "/nonexistent.yaml"); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("missing file: code %d: %s", code, errOut)
	}
}

func TestTortureFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--faults", "pg-kill,meteor"},
		{"--duration", "1s"},
		{"--clients", "0"},
	} {
		if code, _, _ := run(t, append([]string{"torture"}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestBenchTarget drives a running service (the bench deployment's
// currencies and namespaces) over both transports.
func TestBenchTarget(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) {
		b := benchConfig(devKey)
		c.Currencies, c.Namespaces, c.Clients = b.Currencies, b.Namespaces, b.Clients
	})
	for _, target := range [][]string{{"--target", s.base}, {"--target", s.main.GRPCAddr, "--transport", "grpc"}} {
		args := append([]string{"bench", "--api-key", devKey, "--workload", "mix", "--clients", "2", "--duration", "1s",
			"--warmup", "0s", "--rounds", "1", "--scale", "0.001"}, target...)
		code, out, errOut := run(t, args...)
		if code != 0 || !strings.Contains(out, "errors: none") || strings.Contains(out, "writes acknowledged 0,") {
			t.Fatalf("%v: code %d\n%s%s", target, code, out, errOut)
		}
	}
	// The workloads with consumes, holds and exchanges, over both transports:
	// no error but a consume or exchange finding too little.
	for _, target := range [][]string{{"--target", s.base}, {"--target", s.main.GRPCAddr, "--transport", "grpc"}} {
		for _, w := range []string{"spend", "hold", "exchange"} {
			args := append([]string{"bench", "--api-key", devKey, "--workload", w, "--clients", "2", "--duration", "1s",
				"--warmup", "0s", "--rounds", "1", "--scale", "0.001"}, target...)
			code, out, errOut := run(t, args...)
			errs := regexp.MustCompile(`(?m)^errors: (.*)$`).FindStringSubmatch(out)
			if code != 0 || errs == nil || (errs[1] != "none" && !regexp.MustCompile(`^insufficient_funds [0-9]+$`).MatchString(errs[1])) || strings.Contains(out, "writes acknowledged 0,") {
				t.Fatalf("%s %v: code %d\n%s%s", w, target, code, out, errOut)
			}
		}
	}
	// --decay: one run of that many ops, each tenth's throughput reported.
	code, out, errOut := run(t, "bench", "--target", s.base, "--api-key", devKey, "--decay", "400", "--clients", "2", "--warmup", "0s", "--scale", "0.001")
	tenths := regexp.MustCompile(`(?m)^tps per tenth:( [0-9]+){10}$`)
	if code != 0 || !strings.Contains(out, "decay over 400 ops: first tenth ") || !tenths.MatchString(out) || !strings.Contains(out, "errors: none") {
		t.Fatalf("--decay: code %d\n%s%s", code, out, errOut)
	}
	// A wrong key or address stops the bench before any run, with the code.
	for _, c := range []struct {
		args []string
		code string
	}{
		{[]string{"--target", s.base, "--api-key", "wrong"}, "unauthenticated"},
		{[]string{"--target", s.main.GRPCAddr, "--transport", "grpc", "--api-key", "wrong"}, "unauthenticated"},
		{[]string{"--target", "http://127.0.0.1:1", "--api-key", devKey}, "transport"},
	} {
		code, out, errOut := run(t, append([]string{"bench", "--duration", "1s", "--warmup", "0s", "--rounds", "1"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, "a balance read (namespace 1, player 1) failed: "+c.code+";") || strings.Contains(out, "coffer#1") {
			t.Fatalf("%v: code %d\n%s%s", c.args, code, out, errOut)
		}
	}
}
