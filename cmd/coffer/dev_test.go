package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgserver"
)

// TestDevCommand runs the real binary as a newcomer would: `coffer dev`,
// then the printed curl commands, then Ctrl-C; a second run reuses the
// data, so the same commands answer the same balance. The metrics are on
// the printed operations address, not the API's; the PostgreSQL
// superuser's password is random, kept for the second run, and with the
// logs readable by their owner only.
func TestDevCommand(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to run the printed example; make test installs it")
	}
	dir := t.TempDir()
	t.Cleanup(func() { _ = pgserver.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	var password []byte
	for run := 1; run <= 2; run++ {
		commands := startDev(t, data, func(cmds []string, banner string) {
			ops := regexp.MustCompile(`operations  (http://\S+)`).FindStringSubmatch(banner)
			if ops == nil || !strings.Contains(string(runShell(t, "curl -sf "+ops[1]+"/metrics")), "coffer_shards_available 16") {
				t.Fatalf("run %d: no metrics on the operations listener:\n%s", run, banner)
			}
			console := regexp.MustCompile(`console     (http://\S+)`).FindStringSubmatch(banner)
			if console == nil || !strings.Contains(string(runShell(t, "curl -sf "+console[1]+"ns/1/players/42")), "<title>coffer console") {
				t.Fatalf("run %d: no console page at the printed URL:\n%s", run, banner)
			}
			var grant coffer.Trx
			must(t, json.Unmarshal(runShell(t, cmds[0]), &grant))
			var bal coffer.Balances
			must(t, json.Unmarshal(runShell(t, cmds[1]), &bal))
			if grant.IdempotencyKey == "" || bal.PlayerID != 42 || bal.Balances[0].Currency != "gold" || bal.Balances[0].Total != 100 {
				t.Fatalf("run %d: grant %+v, balances %+v", run, grant, bal)
			}
		})
		if commands != 2 {
			t.Fatalf("run %d: %d curl commands printed, want 2", run, commands)
		}
		pw, err := os.ReadFile(filepath.Join(data, "pg", "password"))
		must(t, err)
		if run == 1 {
			password = pw
		}
		if !bytes.Equal(pw, password) || strings.TrimSpace(string(pw)) == pgserver.Password {
			t.Fatalf("run %d: password %q, first run's %q", run, pw, password)
		}
		for _, f := range []string{"pg/password", "pg/postgres.log", "coffer.log", "coffer.yaml"} {
			if fi, err := os.Stat(filepath.Join(data, f)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("run %d: %s: %v %v", run, f, fi.Mode(), err)
			}
		}
	}
}

// startDev starts `coffer dev` on free ports, hands the printed curl
// commands to try, then interrupts it and checks it stops cleanly.
func startDev(t *testing.T, data string, try func(cmds []string, banner string)) int {
	t.Helper()
	cmd, upTo, finish := startUntil(t, t.TempDir(), "Press Ctrl-C",
		"dev", "--data-dir", data, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0",
		"--console-listen", "127.0.0.1:0")
	var cmds []string
	for _, l := range strings.Split(upTo, "\n") {
		if strings.HasPrefix(l, "curl ") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) == 2 {
		try(cmds, upTo)
	}
	must(t, cmd.Process.Signal(syscall.SIGINT))
	if code, out, errOut := finish(); code != 0 || !strings.Contains(out, "coffer dev: stopped") {
		t.Fatalf("coffer dev did not stop cleanly: exit %d\n%s%s", code, out, errOut)
	}
	return len(cmds)
}

// startUntil starts `coffer args…` with TMPDIR=tmp and returns once a line
// of its output contains mark, with the output up to there; it is killed
// at the end of the test, or after 3 minutes. finish waits for it to exit
// and returns its exit code and whole output.
func startUntil(t *testing.T, tmp, mark string, args ...string) (cmd *exec.Cmd, upTo string, finish func() (int, string, string)) {
	t.Helper()
	return startUntilWithin(t, tmp, mark, 3*time.Minute, args...)
}

// startUntilWithin is startUntil with the command killed after life.
func startUntilWithin(t *testing.T, tmp, mark string, life time.Duration, args ...string) (cmd *exec.Cmd, upTo string, finish func() (int, string, string)) {
	t.Helper()
	cmd = exec.Command(cofferBinary(t), args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	kill := time.AfterFunc(life, func() { _ = cmd.Process.Kill() })
	var out strings.Builder
	lines := bufio.NewScanner(stdout)
	found := false
	for !found && lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		found = strings.Contains(lines.Text(), mark)
	}
	upTo = out.String()
	finish = func() (int, string, string) {
		for lines.Scan() {
			out.WriteString(lines.Text() + "\n")
		}
		_ = cmd.Wait()
		kill.Stop()
		return cmd.ProcessState.ExitCode(), out.String(), stderr.String()
	}
	if !found {
		_, o, e := finish()
		t.Fatalf("no %q in the output:\n%s%s", mark, o, e)
	}
	return cmd, upTo, finish
}

var binary struct {
	once sync.Once
	path string
	err  error
}

// cofferBinary builds the coffer binary once for the tests that run it as
// a user would, static, as the container image builds it (CGO_ENABLED=0).
func cofferBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "coffer-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "coffer")
		build := exec.Command("go", "build", "-o", binary.path, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

func runShell(t *testing.T, command string) []byte {
	t.Helper()
	out, err := exec.Command("sh", "-c", command).Output()
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	return out
}
