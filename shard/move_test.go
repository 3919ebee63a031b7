package shard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
)

// TestWithMoves renders, for records of moves as the databases hold
// them, where each of 4 shards is (the database index, or - for none)
// and why not.
func TestWithMoves(t *testing.T) {
	base, err := NewMap(Config{ShardCount: 4, DistributionMode: "manual", Databases: []DatabaseConfig{
		db("a", Range{0, 1}), db("b", Range{2, 3}), {Name: "c", Host: "127.0.0.1", Port: 5432, User: "u", Shards: []Range{}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := base.Databases()[0].Name(), base.Databases()[1].Name(), base.Databases()[2].Name()
	mv := func(s coffer.ShardID, epoch int64, from, to string, st MoveState) Move {
		return Move{Shard: s, Epoch: epoch, Source: from, Target: to, State: st}
	}
	cases := []struct {
		name  string
		moves []Move
		want  string
	}{
		{"none", nil, "0 0 1 1"},
		{"copying", []Move{mv(0, 1, a, c, MoveCopying)}, "0 0 1 1"},
		{"cut on the source, copying on the target", []Move{mv(0, 1, a, c, MoveCut), mv(0, 1, a, c, MoveCopying)}, "- 0 1 1"},
		{"done on the target, cut on the source", []Move{mv(0, 1, a, c, MoveCut), mv(0, 1, a, c, MoveDone)}, "2 0 1 1"},
		{"aborted", []Move{mv(0, 1, a, c, MoveAborted), mv(0, 1, a, c, MoveCopying)}, "0 0 1 1"},
		{"cleaned", []Move{mv(3, 1, b, c, MoveCleaned)}, "0 0 1 2"},
		{"moved back: the later epoch wins", []Move{mv(0, 1, a, c, MoveVerified), mv(0, 2, c, a, MoveDone)}, "0 0 1 1"},
		{"moved on, only the first move read", []Move{mv(0, 1, a, c, MoveDone)}, "2 0 1 1"},
		{"to a database not in the config", []Move{mv(1, 1, a, "elsewhere/x", MoveDone)}, "0 - 1 1"},
		{"out of range", []Move{mv(9, 1, a, c, MoveDone)}, "0 0 1 1"},
	}
	for _, c := range cases {
		m := base.WithMoves(c.moves)
		var got []string
		for s := coffer.ShardID(0); s < 4; s++ {
			if i := m.DatabaseIndex(s); i >= 0 {
				got = append(got, fmt.Sprint(i))
			} else {
				got = append(got, "-")
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: %s, want %s", c.name, strings.Join(got, " "), c.want)
		}
	}
	cut := base.WithMoves([]Move{mv(0, 1, a, c, MoveCut)})
	if err := cut.Unplaced(0); err == nil || !strings.Contains(err.Error(), "being cut over") {
		t.Errorf("a shard being cut over: %v", err)
	}
	if got := fmt.Sprint(cut.Incoming(2), cut.Incoming(0), cut.Databases()[0].Shards); got != "[0] [] [1]" {
		t.Errorf("incoming on the target, on the source, and the source's shards: %s", got)
	}
	gone := base.WithMoves([]Move{mv(1, 1, a, "elsewhere/x", MoveDone)})
	if err := gone.Unplaced(1); err == nil || !strings.Contains(err.Error(), "not list") {
		t.Errorf("a shard moved out of the config: %v", err)
	}
	if got := fmt.Sprint(gone.Databases()[0].Shards); got != "[0]" {
		t.Errorf("shards of a: %s", got)
	}
}

func TestLookup(t *testing.T) {
	m, err := NewMap(Config{ShardCount: 2, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{
		db("a"), {Name: "a", Host: "127.0.0.2", Port: 5432, User: "u"}}})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"127.0.0.2:5432/a": "1", "1": "1", "0": "0", "a": "2 databases are named", "b": `no database "b"`} {
		d, err := m.Lookup(key)
		got := fmt.Sprint(d.Index)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("Lookup(%q) = %s, want %s", key, got, want)
		}
	}
}
