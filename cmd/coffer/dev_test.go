package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// data, so the same commands answer the same balance.
func TestDevCommand(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to run the printed example; make test installs it")
	}
	bin := cofferBinary(t)
	dir := t.TempDir()
	t.Cleanup(func() { _ = pgserver.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	for run := 1; run <= 2; run++ {
		commands := startDev(t, bin, data, func(cmds []string) {
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
	}
}

// startDev starts `coffer dev` on free ports, hands the printed curl
// commands to try, then interrupts it and checks it stops cleanly.
func startDev(t *testing.T, bin, data string, try func([]string)) int {
	t.Helper()
	cmd := exec.Command(bin, "dev", "--data-dir", data, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill() }()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var cmds []string
	timeout := time.After(60 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("coffer dev exited before it was up")
			}
			if strings.HasPrefix(l, "curl ") {
				cmds = append(cmds, l)
			}
			if strings.HasPrefix(l, "Press Ctrl-C") {
				break wait
			}
		case <-timeout:
			t.Fatal("coffer dev not up in 60 s")
		}
	}
	if len(cmds) == 2 {
		try(cmds)
	}
	must(t, cmd.Process.Signal(syscall.SIGINT))
	var rest strings.Builder
	for l := range lines {
		rest.WriteString(l + "\n")
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(rest.String(), "coffer dev: stopped") {
		t.Fatalf("coffer dev did not stop cleanly: %v\n%s", err, rest.String())
	}
	return len(cmds)
}

var binary struct {
	once sync.Once
	path string
	err  error
}

// cofferBinary builds the coffer binary once for the tests that run it as
// a user would.
func cofferBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "coffer-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "coffer")
		if out, err := exec.Command("go", "build", "-o", binary.path, ".").CombinedOutput(); err != nil {
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
