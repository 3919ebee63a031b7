package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/cofferhq/coffer/internal/pgserver"
)

// TestClients runs the tests of the Python, TypeScript and C# clients
// (clients/, docs/clients.md) against one real `coffer dev`: the README's
// story through each client, its errors and its retries. Then the ledger
// they wrote must pass the audit. scripts/ensure-clients.sh installs what
// they need (a virtual environment with pytest and the Python client as a
// user installs it; TypeScript; Mono's mcs and mono, which build and run
// the C# client's tests), and the TypeScript client's committed
// build (clients/typescript/dist, what `npm install` of the directory
// gives) must be what tsc makes of its source.
func TestClients(t *testing.T) {
	root, err := filepath.Abs("../..")
	must(t, err)
	runIn(t, root, nil, "scripts/ensure-clients.sh")
	dir := t.TempDir()
	t.Cleanup(func() { _ = pgserver.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	key := newAPIKey()
	cmd, upTo, finish := startUntil(t, t.TempDir(), "Press Ctrl-C",
		"dev", "--data-dir", data, "--listen", "127.0.0.1:0", "--grpc-listen", "", "--ops-listen", "", "--console-listen", "", "--api-key", key)
	api := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(upTo)
	if api == nil {
		t.Fatalf("no API address in the banner:\n%s", upTo)
	}
	env := []string{"COFFER_URL=" + api[1], "COFFER_API_KEY=" + key}

	t.Run("python", func(t *testing.T) {
		runIn(t, filepath.Join(root, "clients/python"), env,
			filepath.Join(root, ".cache/clients/venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	})
	t.Run("typescript", func(t *testing.T) {
		ts := filepath.Join(root, "clients/typescript")
		runIn(t, ts, env, "npm", "test", "--silent")
		for _, f := range []string{"index", "client", "errors", "models"} {
			for _, ext := range []string{".js", ".d.ts"} {
				built, err := os.ReadFile(filepath.Join(ts, "build-test/src", f+ext))
				must(t, err)
				committed, err := os.ReadFile(filepath.Join(ts, "dist", f+ext))
				must(t, err)
				if !bytes.Equal(built, committed) {
					t.Errorf("clients/typescript/dist/%s%s is not what tsc makes of src: run `npm run build` in clients/typescript", f, ext)
				}
			}
		}
	})

	t.Run("csharp", func(t *testing.T) {
		runIn(t, filepath.Join(root, "clients/csharp"), env, "sh", "test.sh", t.TempDir())
	})

	if code, out, errOut := run(t, "audit", "-c", filepath.Join(data, "coffer.yaml")); code != 0 {
		t.Errorf("audit after the clients' tests: exit %d\n%s%s", code, out, errOut)
	}
	must(t, cmd.Process.Signal(syscall.SIGINT))
	if code, out, errOut := finish(); code != 0 {
		t.Fatalf("coffer dev did not stop cleanly: exit %d\n%s%s", code, out, errOut)
	}
}

// runIn runs a command in dir with env added, and fails the test with its
// output if it fails.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
