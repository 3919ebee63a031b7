package bench

import (
	"math"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
)

// TestShardMoveWindows: each window counts the ops in flight at some
// moment of it, of the other shards (copy, quiet) or of the moved one
// (cut); a quiet window ends where the first move began, is as long as
// the move's copy, and never starts before the run.
func TestShardMoveWindows(t *testing.T) {
	start := time.Now()
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	// Players are their shard's number here.
	l := &opLog{shardOf: func(p coffer.PlayerID) coffer.ShardID { return coffer.ShardID(p) }}
	for _, o := range []struct {
		shard int64
		at    float64
		ms    int
		code  string
	}{
		{0, 0.1, 10, ""}, {0, 0.5, 10, ""}, // before the first quiet window
		{0, 1.5, 20, ""}, {0, 1.995, 10, ""}, // quiet; the second still in flight when the copy begins
		{0, 2.5, 40, "transport"}, {1, 2.5, 5, ""}, // copy: the other shard's, the moved one's
		{1, 2.95, 200, ""}, {1, 3.5, 10, ""}, {0, 3.5, 10, ""}, // cut: in flight when the pause began, after it; another shard's
		{1, 4.2, 10, ""}, // after the cut window
	} {
		l.add(&Op{Player: o.shard}, at(o.at), time.Duration(o.ms)*time.Millisecond, o.code)
	}
	made := []madeMove{
		{1, Moved{From: "a", To: "b", Began: at(2), Synced: at(3), Done: at(3.1), Pause: 100 * time.Millisecond}},
		{1, Moved{From: "b", To: "a", Began: at(5), Synced: at(8), Done: at(8.1), Pause: 100 * time.Millisecond}},
	}
	moves := l.shardMoves("coffer#1", start, made)
	if len(moves) != 2 {
		t.Fatalf("%d moves, want 2", len(moves))
	}
	m := moves[0]
	near := func(got, want float64) bool { return math.Abs(got-want) <= want/100 }
	switch {
	case m.Run != "coffer#1" || m.Shard != 1 || m.From != "a" || m.To != "b" || m.PauseMs != 100:
		t.Fatalf("move: %+v", m)
	case m.Copy.FromS != 2 || m.Copy.ToS != 3 || m.Copy.Ops != 2 || m.Copy.Errors != 1 || !near(m.Copy.Max, 40):
		t.Fatalf("copy: %+v", m.Copy)
	case m.Quiet.FromS != 1 || m.Quiet.ToS != 2 || m.Quiet.Ops != 2 || m.Quiet.Errors != 0 || !near(m.Quiet.Max, 20):
		t.Fatalf("quiet: %+v", m.Quiet)
	case !near(m.P99Ratio, 2):
		t.Fatalf("p99 ratio %v, want 2", m.P99Ratio)
	case m.Cut.Ops != 2 || !near(m.Cut.FromS, 3) || !near(m.Cut.ToS, 4.1) || !near(m.Cut.Max, 200):
		t.Fatalf("cut: %+v", m.Cut)
	}
	if q := moves[1].Quiet; q.FromS != 0 || q.ToS != 2 || q.Ops != 4 {
		t.Fatalf("a quiet window longer than the run before the first move: %+v", q)
	}
}
