package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/shard"
)

// relayProcess is `coffer feed` run as a child process, as the fault suite
// and the benchmark run it: a process of its own, which they can kill.
type relayProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startRelayProcess starts this binary's `feed -c config`, its output
// appended to logPath. The relay dies with the process that started it.
func startRelayProcess(config, logPath string) (*relayProcess, error) {
	exe, err := ownImage()
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(exe, "feed", "-c", config)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &relayProcess{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop ends the relay: SIGKILL when kill, else SIGTERM (it confirms what
// it delivered), SIGKILL after 30 s.
func (p *relayProcess) stop(kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New("the relay did not stop within 30 s of SIGTERM; killed")
	}
}

// within polls ok every 50 ms until it holds (true), or ctx ends or
// bound passes (false).
func within(ctx context.Context, bound time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(bound); ctx.Err() == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return false
}

// feedSlots reads the state of the feed's slot (slot prefix) in every
// database of router, through query: a statement of one boolean column
// over pg_replication_slots with the slot's name as $1. It tells whether
// every database has a row and its value is true.
func feedSlots(ctx context.Context, router *shard.Router, prefix, query string, args ...any) bool {
	for i, d := range router.Map().Databases() {
		var ok bool
		err := router.Database(i).QueryRow(ctx, query, append([]any{feed.SlotName(prefix, d.Config.Name)}, args...)...).Scan(&ok)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

// Queries of feedSlots.
const (
	slotExists = "SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = $1"
	slotActive = "SELECT active FROM pg_replication_slots WHERE slot_name = $1"
)

// waitConfirmed waits, at most bound, until every database of router has
// its feed slot (prefix) confirm the WAL up to where it is now. It returns
// those positions, and whether the slots reached them.
func waitConfirmed(ctx context.Context, router *shard.Router, prefix string, bound time.Duration) ([]string, bool, error) {
	var lsns []string
	for i, d := range router.Map().Databases() {
		var lsn string
		if err := router.Database(i).QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return nil, false, fmt.Errorf("%s: %w", d.Label(), err)
		}
		lsns = append(lsns, lsn)
	}
	const confirmed = "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1"
	ok := within(ctx, bound, func() bool {
		for i, d := range router.Map().Databases() {
			var done bool
			err := router.Database(i).QueryRow(ctx, confirmed, feed.SlotName(prefix, d.Config.Name), lsns[i]).Scan(&done)
			if err != nil || !done {
				return false
			}
		}
		return true
	})
	return lsns, ok, nil
}
