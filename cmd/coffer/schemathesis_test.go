package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
)

// schemathesisPath is where scripts/ensure-schemathesis.sh installs
// Schemathesis's command, from this package's directory.
const schemathesisPath = "../../.cache/schemathesis/bin/st"

// TestSchemathesis runs Schemathesis, a third-party OpenAPI fuzzer,
// against a `coffer dev` stack's /openapi.json: positive, negative and
// stateful tests of every operation, with the checks and bounds of
// testdata/schemathesis.toml. Any finding fails the test; so does an
// audit of the stack afterwards that finds a broken invariant. `make
// fuzz-api` runs it alone (docs/testing.md).
func TestSchemathesis(t *testing.T) {
	st, err := filepath.Abs(schemathesisPath)
	must(t, err)
	if _, err := os.Stat(st); err != nil {
		t.Fatalf("Schemathesis is not installed (%v): run scripts/ensure-schemathesis.sh, as make test does", err)
	}
	config, err := filepath.Abs("testdata/schemathesis.toml")
	must(t, err)
	dir := t.TempDir()
	t.Cleanup(func() { _ = pgserver.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	const key = "schemathesis-dev-key"
	cmd, banner, finish := startUntilWithin(t, t.TempDir(), "Press Ctrl-C", 20*time.Minute,
		"dev", "--data-dir", data, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--ops-listen", "", "--console-listen", "", "--api-key", key)
	api := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(banner)
	if api == nil {
		t.Fatalf("no API address in the banner:\n%s", banner)
	}
	fuzz := exec.Command(st, "--config-file", config, "--no-color", "run", api[1]+"/openapi.json", "-H", "Authorization: Bearer "+key)
	// Hypothesis and Schemathesis keep their state in the working
	// directory: a run starts afresh.
	fuzz.Dir = t.TempDir()
	start := time.Now()
	out, err := fuzz.CombinedOutput()
	if err != nil {
		t.Fatalf("Schemathesis found failures (%v) in %s:\n%s", err, time.Since(start).Round(time.Second), out)
	}
	// The phases with their times, and the count of test cases.
	var summary []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "(in ") || strings.Contains(l, " generated, ") {
			summary = append(summary, strings.TrimSpace(l))
		}
	}
	t.Logf("Schemathesis passed in %s: %s", time.Since(start).Round(time.Second), strings.Join(summary, "; "))
	if code, out, errOut := run(t, "audit", "-c", filepath.Join(data, "coffer.yaml")); code != 0 {
		t.Fatalf("audit after the fuzzing: exit %d\n%s%s", code, out, errOut)
	}
	must(t, cmd.Process.Signal(syscall.SIGINT))
	if code, out, errOut := finish(); code != 0 || !strings.Contains(out, "coffer dev: stopped") {
		t.Fatalf("coffer dev did not stop cleanly: exit %d\n%s%s", code, out, errOut)
	}
}
