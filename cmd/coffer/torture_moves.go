package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shard/move"
	"github.com/cofferhq/coffer/torture"
	"github.com/cofferhq/coffer/wallet"
	"github.com/jackc/pgx/v5"
)

// The shard-move side of a torture run: the torture.Target methods the
// moves need, and the checks of the shard map after them.

// Databases is part of torture.Target.
func (t *tortureRun) Databases() int { return len(t.served.Databases()) }

// MovableShards is part of torture.Target: the shards of the workload's
// players but of no probe.
func (t *tortureRun) MovableShards() []int { return t.movable }

// movableShards lists the shards of players 1 … last, without those of
// probes.
func movableShards(m *shard.Map, last coffer.PlayerID, probes ...coffer.PlayerID) []int {
	var out []int
	for p := coffer.PlayerID(1); p <= last; p++ {
		if s := int(m.ShardOf(p)); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, p := range probes {
		out = slices.DeleteFunc(out, func(s int) bool { return s == int(m.ShardOf(p)) })
	}
	slices.Sort(out)
	return out
}

// ShardPlace is part of torture.Target. The moves name the databases as
// the instances' config does, through the proxies.
func (t *tortureRun) ShardPlace(ctx context.Context, s int) (torture.ShardPlace, error) {
	if err := t.placer.Refresh(ctx); err != nil {
		return torture.ShardPlace{}, err
	}
	m, id := t.placer.Map(), coffer.ShardID(s)
	mv, _ := m.Move(id)
	return torture.ShardPlace{Home: m.DatabaseIndex(id), Configured: t.served.DatabaseIndex(id), Move: mv}, nil
}

// MoverCommand is part of torture.Target: the mover runs on the
// instances' config, so that the moves name the databases as they do.
func (t *tortureRun) MoverCommand(args ...string) *exec.Cmd {
	exe, err := ownImage()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, append([]string{"shard", "move", "-c", t.cfgPath}, args...)...)
}

// checkShardMap checks that the databases agree on the shard map that
// router (refreshed) routes by, and that every instance routes by it
// too: each database lists in its sharding state, and holds the tables
// of, exactly the shards the map places on it; each shard's latest move
// is recorded alike on every database that took part, and ended
// (cleaned up or aborted), leaving nothing behind.
func (t *tortureRun) checkShardMap(ctx context.Context, router *shard.Router) []string {
	m := router.Map()
	var violations []string
	latest := map[coffer.ShardID]shard.Move{}
	recorded := map[coffer.ShardID][]string{} // the databases that recorded it, by shard
	holdings := make([]move.Holding, len(m.Databases()))
	for i, db := range t.direct.Databases() {
		h, err := inspect(ctx, db)
		if err != nil {
			violations = append(violations, fmt.Sprintf("shard map: database %d: %v", i, err))
			continue
		}
		holdings[i] = h
		for _, mv := range h.Moves {
			if was, ok := latest[mv.Shard]; !ok || mv.Epoch > was.Epoch {
				latest[mv.Shard] = mv
			}
		}
		if !slices.Equal(h.Listed, m.Databases()[i].Shards) || !slices.Equal(h.Tabled, m.Databases()[i].Shards) {
			violations = append(violations, fmt.Sprintf("shard map: database %d holds the tables of shards %v and lists %v; the map places %v there",
				i, h.Tabled, h.Listed, m.Databases()[i].Shards))
		}
		for _, tr := range h.Traces {
			violations = append(violations, fmt.Sprintf("shard map: database %d: left behind by a move: %s", i, tr))
		}
	}
	for i, h := range holdings {
		for _, mv := range h.Moves {
			if last := latest[mv.Shard]; mv.Epoch == last.Epoch {
				recorded[mv.Shard] = append(recorded[mv.Shard], m.Databases()[i].Name())
				if mv != last {
					violations = append(violations, fmt.Sprintf("shard map: shard %d: database %d records its move as %+v, another as %+v", mv.Shard, i, mv, last))
				}
			}
		}
	}
	for s, mv := range latest {
		if mv.State != shard.MoveCleaned && mv.State != shard.MoveAborted {
			violations = append(violations, fmt.Sprintf("shard map: shard %d's move to %s ended %s", s, mv.Target, mv.State))
		}
		if got := recorded[s]; !slices.Contains(got, mv.Source) || !slices.Contains(got, mv.Target) {
			violations = append(violations, fmt.Sprintf("shard map: shard %d's move %d is recorded on %v, not on its source and target", s, mv.Epoch, got))
		}
	}
	return append(violations, t.instancesAgree(ctx, m)...)
}

func inspect(ctx context.Context, db shard.Database) (move.Holding, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.Config.ConnString(5))
	if err != nil {
		return move.Holding{}, err
	}
	defer conn.Close(ctx)
	return move.Inspect(ctx, conn)
}

// instancesAgree checks that every instance's /v1/status places the
// shards as m does, waiting for their next reads of the moves (every
// second) for up to 10 seconds.
func (t *tortureRun) instancesAgree(ctx context.Context, m *shard.Map) []string {
	var want []string
	for _, db := range m.Databases() {
		want = append(want, fmt.Sprintf("%s %v", db.Name(), shardRanges(db.Shards)))
	}
	var violations []string
	for k := range t.Instances() {
		t.mu.Lock()
		c := wallet.New("http://"+t.procs[k].httpAddr, t.key, nil)
		t.mu.Unlock()
		var got []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got = got[:0]
			st, err := c.Status(ctx)
			if err != nil {
				got = append(got, err.Error())
			}
			for _, db := range st.Databases {
				got = append(got, fmt.Sprintf("%s %v", db.Name, db.Shards))
			}
			if slices.Equal(got, want) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Equal(got, want) {
			violations = append(violations, fmt.Sprintf("shard map: instance %d places the shards %s, the databases %s",
				k, strings.Join(got, ", "), strings.Join(want, ", ")))
		}
	}
	return violations
}

// awayLine is the report's line on the shards the audit found away from
// the database the config places them on.
func awayLine(m, configured *shard.Map) string {
	var away []string
	for s := range m.ShardCount() {
		id := coffer.ShardID(s)
		if i := m.DatabaseIndex(id); i != configured.DatabaseIndex(id) {
			away = append(away, fmt.Sprintf("%d (on %d)", s, i))
		}
	}
	if len(away) == 0 {
		return "audited every shard where the databases place it: all on the database the config places them on\n"
	}
	return fmt.Sprintf("audited every shard where the databases place it: %d away from the database the config places them on: shards %s\n",
		len(away), strings.Join(away, ", "))
}
