package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/wallet"
	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"
)

// serveBinary starts `coffer serve -c path` as a process of its own and
// returns its API; it is killed when the test ends.
func serveBinary(t *testing.T, path string) *wallet.Conn {
	t.Helper()
	cmd := exec.Command(cofferBinary(t), "serve", "-c", path)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() { // to the end: a log not read would block it
			var line struct{ Msg, HTTP string }
			if json.Unmarshal(lines.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- line.HTTP
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("coffer serve exited before serving")
		}
		return wallet.New("http://"+a, devKey, nil)
	case <-time.After(time.Minute):
		t.Fatal("coffer serve not serving within a minute")
	}
	return nil
}

// moveConfigs writes two configs of the same databases, 4 shards: old
// lists two databases (shards 0–1 and 2–3), new adds a third that holds
// none yet, as an operator adding a database server writes it.
func moveConfigs(t *testing.T) (oldPath, newPath string, dbs []pgtest.DB) {
	t.Helper()
	dir := t.TempDir()
	cfg := devConfig("127.0.0.1:0", "", devKey)
	cfg.ShardCount, cfg.DistributionMode, cfg.Log.Level = 4, "manual", "info"
	for i, r := range [][]shard.Range{{{Min: 0, Max: 1}}, {{Min: 2, Max: 3}}, {}} {
		d := pgtest.NewDB(t, 0)
		dbs = append(dbs, d)
		cfg.Databases = append(cfg.Databases, shard.DatabaseConfig{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(),
			Type: "postgres", User: pgserver.Superuser, Password: pgserver.Password, Shards: r})
		if i == 1 {
			oldPath = filepath.Join(dir, "old.yaml")
			must(t, writeConfigFile(oldPath, cfg))
		}
	}
	newPath = filepath.Join(dir, "new.yaml")
	must(t, writeConfigFile(newPath, cfg))
	return oldPath, newPath, dbs
}

// TestShardMoveBetweenServeProcesses moves shard 0 with `coffer shard
// move` while a `coffer serve` started before the move takes writes on
// every shard: no acknowledged write is lost or applied twice, and the
// old copy holds nothing the new one lacks (the fence stopped every
// write the instance sent there after the cut-over, before it read the
// move). A second `coffer serve`, started after the move with the
// config from before the third database was added, answers
// shard_unavailable for shard 0 and serves the others. The audit is
// clean, `coffer shard` names the new home and export-sdbmigrate places
// shard 0 there.
func TestShardMoveBetweenServeProcesses(t *testing.T) {
	oldPath, newPath, dbs := moveConfigs(t)
	if code, out, errOut := run(t, "migrate", "-c", newPath); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	first := serveBinary(t, newPath)
	players := map[coffer.ShardID][]coffer.PlayerID{}
	for p := coffer.PlayerID(1); len(players[0]) < 8 || len(players[1]) < 4 || len(players[2]) < 4; p++ {
		s := coffer.ShardID(shard.Jump(uint64(p), 4))
		players[s] = append(players[s], p)
	}
	all := append(append(append([]coffer.PlayerID{}, players[0]...), players[1]...), players[2]...)
	var mu sync.Mutex
	acked, unknown := map[string]coffer.PlayerID{}, map[string]coffer.PlayerID{}
	var written atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				p, key := all[(g*5+n)%len(all)], fmt.Sprintf("g%d-%d", g, n)
				_, _, err := first.Change(ctx, 1, p, grant(key, "gold", 1))
				mu.Lock()
				if err == nil {
					acked[key] = p
					written.Add(1)
				} else {
					unknown[key] = p
				}
				mu.Unlock()
			}
		})
	}
	waitFor(t, func() bool { return written.Load() >= 100 })
	code, out, errOut := run(t, "shard", "move", "-c", newPath, "--shard", "0", "--to", "2")
	w := written.Load()
	waitFor(t, func() bool { return written.Load() >= w+100 })
	close(stop)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "writes paused") || !strings.Contains(out, "verified") {
		t.Fatalf("shard move: %d\n%s%s", code, out, errOut)
	}
	for key, p := range unknown {
		if shard.Jump(uint64(p), 4) != 0 {
			t.Errorf("write %s to player %d, of a shard that did not move, failed", key, p)
		}
		if _, _, err := first.Change(ctx, 1, p, grant(key, "gold", 1)); err != nil {
			t.Fatalf("retry of %s: %v", key, err)
		}
		acked[key] = p
	}
	want := map[coffer.PlayerID]coffer.Amount{}
	for _, p := range acked {
		want[p]++
	}
	for _, p := range all {
		if got := balanceOf(t, first, p, "gold").Total; got != want[p] {
			t.Errorf("player %d (shard %d): %d gold, %d acknowledged", p, shard.Jump(uint64(p), 4), got, want[p])
		}
	}
	oldCopyIsCopied(t, dbs[0], dbs[2])

	second := serveBinary(t, oldPath)
	var e *coffer.Error
	if _, _, err := second.Change(ctx, 1, players[0][0], grant("second", "gold", 1)); !errors.As(err, &e) || e.Code != coffer.CodeUnavailable {
		t.Errorf("a write to shard 0 through the instance of the old config: %v, want shard_unavailable", err)
	}
	if _, _, err := second.Change(ctx, 1, players[2][0], grant("second", "gold", 1)); err != nil {
		t.Errorf("a write to shard 2 through the instance of the old config: %v", err)
	}
	st, err := second.Status(ctx)
	must(t, err)
	if len(st.Moves) != 1 || st.Moves[0].Shard != 0 || st.Moves[0].State != "verified" || st.ShardsAvailable != 3 {
		t.Errorf("status of the instance of the old config: %+v", st)
	}
	oldCopyIsCopied(t, dbs[0], dbs[2])

	if code, out, errOut := run(t, "audit", "-c", newPath); code != 0 {
		t.Errorf("audit: %d\n%s%s", code, out, errOut)
	}
	if _, out, _ := run(t, "shard", "-c", newPath, fmt.Sprint(players[0][0])); !strings.HasSuffix(strings.TrimSpace(out), dbs[2].Name) {
		t.Errorf("coffer shard: %q, want the player on %s", out, dbs[2].Name)
	}
	code, out, errOut = run(t, "shard", "export-sdbmigrate", "-c", newPath)
	var exported shard.Config
	if code != 0 || yaml.Unmarshal([]byte(out), &exported) != nil {
		t.Fatalf("export-sdbmigrate: %d\n%s%s", code, out, errOut)
	}
	if got := fmt.Sprint(exported.DistributionMode, " ", exported.Databases[0].Shards, exported.Databases[1].Shards, exported.Databases[2].Shards); got != "manual [{1 1}] [{2 3}] [{0 0}]" {
		t.Errorf("exported placement: %s", got)
	}
	if _, err := shard.NewMap(exported); err != nil {
		t.Errorf("the exported config does not load: %v", err)
	}
}

// oldCopyIsCopied checks that every trx in the old copy of shard 0 (on
// source) is in the new one (on target): nothing was written there that
// did not reach the new home.
func oldCopyIsCopied(t *testing.T, source, target pgtest.DB) {
	t.Helper()
	rows, err := source.Conn(t).Query(ctx, "SELECT idempotency_key FROM trx_0_moved")
	must(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	var copied int
	must(t, target.Conn(t).QueryRow(ctx, "SELECT count(*) FROM trx_0 WHERE idempotency_key = ANY($1)", keys).Scan(&copied))
	if copied != len(keys) || len(keys) == 0 {
		t.Fatalf("the old copy holds %d trx, of which the new one has %d", len(keys), copied)
	}
}

// TestShardMoveUsage: a move needs a config, a shard and one of --to,
// --abort, --cleanup.
func TestShardMoveUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--shard", "1", "--to", "x"},
		{"-c", "c.yaml", "--to", "x"},
		{"-c", "c.yaml", "--shard", "1"},
		{"-c", "c.yaml", "--shard", "1", "--to", "x", "--abort"},
		{"-c", "c.yaml", "--shard", "1", "--to", "x", "--unverified"},
	} {
		if code, _, errOut := run(t, append([]string{"shard", "move"}, args...)...); code != 2 || !strings.Contains(errOut, "usage: coffer shard move") {
			t.Errorf("shard move %v: %d %s", args, code, errOut)
		}
	}
	if code, _, errOut := run(t, "shard", "export-sdbmigrate"); code != 2 || !strings.Contains(errOut, "usage") {
		t.Errorf("export-sdbmigrate without -c: %d %s", code, errOut)
	}
}
