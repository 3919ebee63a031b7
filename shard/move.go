package shard

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
)

// MoveState is how far a shard's move went (docs/adr/0022-shard-moves.md).
type MoveState string

// The states of a move, in the order it passes them; aborted ends a move
// that never cut over.
const (
	// MoveCopying: the target is being filled by logical replication; the
	// source serves the shard.
	MoveCopying MoveState = "copying"
	// MoveAborted: the move was undone before its cut-over; the source
	// serves the shard.
	MoveAborted MoveState = "aborted"
	// MoveCut: the source's copy is fenced, the target not yet writable:
	// nobody serves the shard (its writes wait).
	MoveCut MoveState = "cut"
	// MoveDone: the target serves the shard.
	MoveDone MoveState = "done"
	// MoveVerified: the copy was checked against the source's.
	MoveVerified MoveState = "verified"
	// MoveCleaned: the source's copy is dropped.
	MoveCleaned MoveState = "cleaned"
)

// rank orders the states a move passes. Two databases may hold one move
// at different states (the mover writes each step on both, one after the
// other): the later state is the move's.
func (s MoveState) rank() int {
	return slices.Index([]MoveState{MoveCopying, MoveAborted, MoveCut, MoveDone, MoveVerified, MoveCleaned}, s)
}

// Valid tells whether s is one of the states.
func (s MoveState) Valid() bool { return s.rank() >= 0 }

// InProgress tells whether a move in state s has begun and not ended:
// copying or cut.
func (s MoveState) InProgress() bool { return s == MoveCopying || s == MoveCut }

// Move is the latest move of a shard, as a database records it.
type Move struct {
	Shard coffer.ShardID
	// Epoch counts the shard's moves: each takes one more than the last.
	Epoch int64
	// Source and Target name the databases (Database.Name).
	Source, Target string
	State          MoveState
	// Pause is how long the cut-over paused the shard's writes; zero
	// before it ended.
	Pause time.Duration
}

// Home names the database that serves the shard in this state, or ""
// while none does (cut).
func (mv Move) Home() string {
	switch {
	case mv.State == MoveCut:
		return ""
	case mv.State.rank() >= MoveDone.rank():
		return mv.Target
	}
	return mv.Source
}

// later tells whether mv supersedes other: a later move, or a later state
// of the same one.
func (mv Move) later(other Move) bool {
	if mv.Epoch != other.Epoch {
		return mv.Epoch > other.Epoch
	}
	return mv.State.rank() > other.State.rank()
}

// latestMoves keeps the latest of each shard's moves (Move.later).
func latestMoves(moves []Move) map[coffer.ShardID]Move {
	out := map[coffer.ShardID]Move{}
	for _, mv := range moves {
		if was, ok := out[mv.Shard]; !ok || mv.later(was) {
			out[mv.Shard] = mv
		}
	}
	return out
}

// WithMoves is the config's placement overlaid with moves, the records
// read from the databases: each shard is where its latest move puts it
// (Move.Home). A shard whose home is not among the config's databases, or
// that is being cut over, is on none (Unplaced). Records of shards out of
// range are ignored.
func (m *Map) WithMoves(moves []Move) *Map {
	out := &Map{count: m.count, configured: m.configured, dbOfShard: slices.Clone(m.configured), moves: map[coffer.ShardID]Move{}}
	for s, mv := range latestMoves(moves) {
		if s < 0 || int(s) >= m.count {
			continue
		}
		out.moves[s] = mv
		out.dbOfShard[s] = m.Index(mv.Home())
	}
	out.databases = make([]Database, len(m.databases))
	for i, db := range m.databases {
		out.databases[i] = Database{Index: i, Config: db.Config}
	}
	for s, i := range out.dbOfShard {
		if i >= 0 {
			out.databases[i].Shards = append(out.databases[i].Shards, coffer.ShardID(s))
		}
	}
	return out
}

// Index is the index of the database named name (Database.Name), or -1.
func (m *Map) Index(name string) int {
	return slices.IndexFunc(m.databases, func(d Database) bool { return d.Name() == name })
}

// Moves are the latest move of each shard that has one, by shard.
func (m *Map) Moves() map[coffer.ShardID]Move { return maps.Clone(m.moves) }

// Move is shard s's latest move, and false if it never moved.
func (m *Map) Move(s coffer.ShardID) (Move, bool) {
	mv, ok := m.moves[s]
	return mv, ok
}

// SameMoves tells whether m and other place shards by the same moves.
func (m *Map) SameMoves(other *Map) bool { return maps.Equal(m.moves, other.moves) }

// ErrMoving is what Unplaced wraps while a shard is being cut over: its
// requests may wait for its new home.
var ErrMoving = errors.New("being cut over to its new database")

// Unplaced returns nil if a database of the config serves shard s, or
// why none does: it is being cut over (ErrMoving), or it moved to a
// database this config does not list.
func (m *Map) Unplaced(s coffer.ShardID) error {
	if m.dbOfShard[s] >= 0 {
		return nil
	}
	mv := m.moves[s]
	if mv.Home() == "" {
		return fmt.Errorf("shard %d is %w (%s → %s)", s, ErrMoving, mv.Source, mv.Target)
	}
	return fmt.Errorf("shard %d moved to database %s, which the config does not list; add it to the config", s, mv.Home())
}

// Incoming lists the shards a move in progress is filling database i
// with: its _sdbmigrate_sharding_state may list them or not (the mover
// records one there once it made the shard's tables, and takes it out as
// it aborts), beside the shards it serves.
func (m *Map) Incoming(i int) []coffer.ShardID {
	var in []coffer.ShardID
	name := m.databases[i].Name()
	for s, mv := range m.moves {
		if mv.State.InProgress() && mv.Target == name {
			in = append(in, s)
		}
	}
	slices.Sort(in)
	return in
}

// InProgress lists the moves that began and did not end, by shard.
func (m *Map) InProgress() []Move {
	var out []Move
	for _, mv := range m.moves {
		if mv.State.InProgress() {
			out = append(out, mv)
		}
	}
	slices.SortFunc(out, func(a, b Move) int { return int(a.Shard - b.Shard) })
	return out
}

// Lookup finds a database by what an operator may call it: its name
// (Database.Name), its dbname when no other database has it, or its
// index in the config.
func (m *Map) Lookup(key string) (Database, error) {
	if i := m.Index(key); i >= 0 {
		return m.databases[i], nil
	}
	var found []Database
	for _, d := range m.databases {
		if d.Config.Name == key {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return Database{}, fmt.Errorf("%d databases are named %q; give the address too (%s)", len(found), key, found[0].Name())
	}
	if i, err := strconv.Atoi(key); err == nil && i >= 0 && i < len(m.databases) {
		return m.databases[i], nil
	}
	var names []string
	for _, d := range m.databases {
		names = append(names, d.Name())
	}
	return Database{}, fmt.Errorf("no database %q in the config; it lists %s", key, strings.Join(names, ", "))
}
