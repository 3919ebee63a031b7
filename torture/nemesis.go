package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault kinds.
const (
	PGKill     = "pg-kill"     // kill -9 a PostgreSQL server, restart it
	PGStop     = "pg-stop"     // SIGSTOP a PostgreSQL server for a while, then SIGCONT
	NetCut     = "net-cut"     // refuse and drop connections to one database
	NetSlow    = "net-slow"    // delay every packet to one database
	NetReset   = "net-reset"   // reset the open connections to one database
	CofferKill = "coffer-kill" // kill -9 a coffer instance, restart it
	// The failovers, which need a standby behind every primary.
	PGFailover   = "pg-failover"   // kill -9 a primary, promote its standby, rewind the old primary into a standby
	PGSwitchover = "pg-switchover" // planned: stop a primary cleanly, promote its standby, rejoin the old primary
	PatroniKill  = "patroni-kill"  // kill -9 the Patroni agent of a leader, restart it once another member leads
	// The change feed's, which need it (--feed).
	FeedKill = "feed-kill" // kill -9 the relay (coffer feed), restart it
	NATSKill = "nats-kill" // kill -9 the broker (nats-server), restart it
)

// FaultKinds lists the kinds of a run without standbys, in the order of
// the report.
var FaultKinds = []string{PGKill, PGStop, NetCut, NetSlow, NetReset, CofferKill, ShardMove}

// StandbyFaultKinds lists the kinds of a run with standbys (--standbys).
var StandbyFaultKinds = append(slices.Clone(FaultKinds), PGFailover, PGSwitchover)

// PatroniFaultKinds lists the kinds of a run under Patroni (--patroni):
// pg-kill kills the leader's PostgreSQL (Patroni restarts it, or fails
// over), pg-switchover is `patronictl switchover`.
var PatroniFaultKinds = []string{PGKill, NetCut, NetReset, CofferKill, PatroniKill, PGSwitchover, ShardMove}

// FeedFaultKinds are added to a run's kinds when it runs the change feed.
var FeedFaultKinds = []string{FeedKill, NATSKill}

// reportKinds is every kind, in the order of the report.
var reportKinds = []string{PGKill, PGStop, NetCut, NetSlow, NetReset, CofferKill, PGFailover, PGSwitchover, PatroniKill, ShardMove, FeedKill, NATSKill}

// failover tells whether a kind changes the primary: its writes are probed
// while it lasts, and the report gives their outage.
func failover(kind string) bool {
	return kind == PGFailover || kind == PGSwitchover || kind == PatroniKill
}

// Target is what the nemesis breaks. Index i is a database (and its
// server and proxy) or, for CofferKill, an instance; the feed's kinds
// have one relay and one broker. Each method returns once the fault is in
// place; Heal-type methods once it is undone.
type Target interface {
	KillServer(i int) error
	RestartServer(ctx context.Context, i int) error
	PauseServer(i int) error
	ResumeServer(i int) error
	Proxy(i int) *Proxy
	KillInstance(i int) error
	RestartInstance(ctx context.Context, i int) error
	// WaitDatabase blocks until database i serves again through every
	// instance; WaitInstance until instance i is ready.
	WaitDatabase(ctx context.Context, i int)
	WaitInstance(ctx context.Context, i int)
	// KillRelay and KillBroker kill -9 the feed's relay and broker;
	// their restarts return once the process runs. WaitFeed blocks until
	// the relay reads every database's slot and the broker answers.
	KillRelay() error
	RestartRelay() error
	KillBroker() error
	RestartBroker() error
	WaitFeed(ctx context.Context)
	// Failover changes the primary of database i in the way kind says,
	// taking length where the kind has a length (how long a killed agent
	// stays dead), and returns once the database has a standby in sync
	// again, ready for the next failover.
	Failover(ctx context.Context, i int, kind string, length time.Duration) error
	// Instances is the number of coffer instances; ProbeWrite writes once
	// through instance k to a player of database i that the workload does
	// not use.
	Instances() int
	ProbeWrite(ctx context.Context, k, i int) error
	// Databases is the number of shard databases; MovableShards lists
	// the shards a shard-move may move (none a probe uses, so that a
	// probe of database i stays on database i); ShardPlace reads where
	// shard s is now from the databases.
	Databases() int
	MovableShards() []int
	ShardPlace(ctx context.Context, s int) (ShardPlace, error)
	// MoverCommand is `coffer shard move` with args, on the run's
	// config, not started.
	MoverCommand(args ...string) *exec.Cmd
}

// Fault is one planned fault.
type Fault struct {
	Kind   string
	Index  int
	At     time.Duration // from the start of the run
	Length time.Duration
	// Move is what a shard-move does; nil for the other kinds.
	Move *MovePlan
}

// Plan is the schedule of a run: every enabled kind at least once (when
// the run is long enough), in an order and with targets drawn from seed.
func Plan(seed uint64, kinds []string, duration time.Duration, databases, instances int) []Fault {
	if len(kinds) == 0 {
		return nil
	}
	kinds = slices.Clone(kinds) // shuffled below; the caller's stays as it is
	rng := rand.New(rand.NewPCG(seed, 1))
	var plan []Fault
	at := 3 * time.Second
	for i := 0; ; i++ {
		if i%len(kinds) == 0 {
			rng.Shuffle(len(kinds), func(a, b int) { kinds[a], kinds[b] = kinds[b], kinds[a] })
		}
		f := Fault{Kind: kinds[i%len(kinds)], At: at, Length: time.Duration(1500+rng.IntN(2500)) * time.Millisecond}
		n := databases
		switch f.Kind {
		case CofferKill:
			n = instances
		case FeedKill, NATSKill:
			n = 1
		}
		f.Index = rng.IntN(n)
		if f.Kind == ShardMove {
			f.Move = planMove(rng, kinds, instances)
		}
		if at+f.Length > duration-2*time.Second {
			return plan
		}
		plan = append(plan, f)
		at += f.Length + time.Duration(2000+rng.IntN(3000))*time.Millisecond
	}
}

// Injected is what the nemesis did and how long recovery took.
type Injected struct {
	// Recovery has, by kind, one entry per fault injected: the time from
	// its heal to serving again.
	Recovery map[string][]time.Duration
	// Outage sums, per database, the time from a fault on it to serving
	// again.
	Outage map[int]time.Duration
	// Failovers lists the failovers in the order they were injected.
	Failovers []FailoverTimes
	// Moves lists the shard-moves in the order they were made.
	Moves  []MoveResult
	Errors []string
}

// FailoverTimes is what the clients saw of one failover: writes refused
// from the first probe write that failed to the first that succeeded
// after it (through any instance), and the time from the same start until
// every instance had written after its last failure. Zero when no probe
// write failed.
type FailoverTimes struct {
	Kind       string
	Index      int
	At         time.Duration // from the start of the run
	Refused    time.Duration
	EveryWrote time.Duration
}

// Run applies the plan from start until it ends, end (the latest a
// fault may begin) passes, or ctx ends. Every fault is healed before Run
// returns.
func Run(ctx context.Context, t Target, plan []Fault, start, end time.Time) *Injected {
	in := &Injected{Recovery: map[string][]time.Duration{}, Outage: map[int]time.Duration{}}
	for _, f := range plan {
		// Failovers can take longer than planned, and shift the faults
		// after them; one that would begin after end is dropped.
		if time.Now().After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return in
		case <-time.After(time.Until(start.Add(f.At))):
		}
		begun := time.Now()
		if f.Kind == ShardMove {
			mr, err := moveShard(ctx, t, f)
			if err != nil {
				in.Errors = append(in.Errors, fmt.Sprintf("%s of shard %d: %v", f.Kind, mr.Shard, err))
			}
			mr.At = begun.Sub(start)
			in.Moves = append(in.Moves, mr)
			continue
		}
		if failover(f.Kind) {
			ft, err := probeFailover(ctx, t, f)
			if err != nil {
				in.Errors = append(in.Errors, fmt.Sprintf("%s on %d: %v", f.Kind, f.Index, err))
			}
			ft.At = begun.Sub(start)
			in.Failovers = append(in.Failovers, ft)
			in.Recovery[f.Kind] = append(in.Recovery[f.Kind], ft.Refused)
			in.Outage[f.Index] += ft.EveryWrote
			continue
		}
		healed, err := apply(ctx, t, f)
		if err != nil {
			in.Errors = append(in.Errors, fmt.Sprintf("%s on %d: %v", f.Kind, f.Index, err))
			continue
		}
		switch f.Kind {
		case CofferKill:
			t.WaitInstance(ctx, f.Index)
		case FeedKill, NATSKill:
			t.WaitFeed(ctx)
		default:
			t.WaitDatabase(ctx, f.Index)
			in.Outage[f.Index] += time.Since(begun)
		}
		in.Recovery[f.Kind] = append(in.Recovery[f.Kind], time.Since(healed))
	}
	return in
}

// apply injects f, waits its length, and heals it. It returns when the
// healing began: recovery is measured from then (a restart included).
func apply(ctx context.Context, t Target, f Fault) (time.Time, error) {
	var heal func() error
	switch f.Kind {
	case PGKill:
		err := t.KillServer(f.Index)
		heal = func() error { return errors.Join(err, t.RestartServer(ctx, f.Index)) }
	case PGStop:
		err := t.PauseServer(f.Index)
		heal = func() error { return errors.Join(err, t.ResumeServer(f.Index)) }
	case NetCut:
		t.Proxy(f.Index).Cut()
		heal = func() error { t.Proxy(f.Index).Heal(); return nil }
	case NetSlow:
		t.Proxy(f.Index).Slow(150 * time.Millisecond)
		heal = func() error { t.Proxy(f.Index).Heal(); return nil }
	case NetReset:
		for end := time.Now().Add(f.Length); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
			t.Proxy(f.Index).Reset()
		}
		return time.Now(), nil
	case CofferKill:
		err := t.KillInstance(f.Index)
		heal = func() error { return errors.Join(err, t.RestartInstance(ctx, f.Index)) }
	case FeedKill:
		err := t.KillRelay()
		heal = func() error { return errors.Join(err, t.RestartRelay()) }
	case NATSKill:
		err := t.KillBroker()
		heal = func() error { return errors.Join(err, t.RestartBroker()) }
	default:
		return time.Now(), fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	time.Sleep(f.Length)
	healed := time.Now()
	return healed, heal()
}

// probeFailover runs the failover f while every instance writes to its
// database every 50 ms, and measures from those writes what clients saw.
func probeFailover(ctx context.Context, t Target, f Fault) (FailoverTimes, error) {
	ft := FailoverTimes{Kind: f.Kind, Index: f.Index}
	done := make(chan struct{})
	probes := make([][]probe, t.Instances())
	var wg sync.WaitGroup
	for k := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[k] = probeWrites(ctx, t, k, f.Index, done)
		}()
	}
	err := t.Failover(ctx, f.Index, f.Kind, f.Length)
	close(done)
	wg.Wait()
	ft.Refused, ft.EveryWrote = outage(probes)
	return ft, err
}

// probe is one probe write: when it began and ended, and whether it was
// acknowledged.
type probe struct {
	begun, ended time.Time
	ok           bool
}

// probeWrites writes through instance k to database i every 50 ms until
// done is closed and a write begun after that succeeded (so the instance
// writes to the new primary), or a minute after done.
func probeWrites(ctx context.Context, t Target, k, i int, done <-chan struct{}) []probe {
	var probes []probe
	var doneAt time.Time
	for ctx.Err() == nil {
		p := probe{begun: time.Now()}
		p.ok = t.ProbeWrite(ctx, k, i) == nil
		p.ended = time.Now()
		probes = append(probes, p)
		if doneAt.IsZero() {
			select {
			case <-done:
				doneAt = time.Now()
			default:
			}
		} else if p.ok && p.begun.After(doneAt) || time.Since(doneAt) > time.Minute {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return probes
}

// outage reads the probe writes of every instance: refused is from the
// first failed write to the end of the first success begun after it;
// everyWrote from the same start until each instance's first success
// begun after its own last failure.
func outage(probes [][]probe) (refused, everyWrote time.Duration) {
	var firstFail time.Time
	for _, ps := range probes {
		for _, p := range ps {
			if !p.ok && (firstFail.IsZero() || p.begun.Before(firstFail)) {
				firstFail = p.begun
			}
		}
	}
	if firstFail.IsZero() {
		return 0, 0
	}
	var firstOK time.Time
	for _, ps := range probes {
		lastFail := firstFail
		for _, p := range ps {
			if !p.ok && p.begun.After(lastFail) {
				lastFail = p.begun
			}
		}
		var ok time.Time
		for _, p := range ps {
			if p.ok && p.begun.After(firstFail) && (firstOK.IsZero() || p.ended.Before(firstOK)) {
				firstOK = p.ended
			}
			if p.ok && p.begun.After(lastFail) && ok.IsZero() {
				ok = p.ended
			}
		}
		if ok.IsZero() {
			return refusedSince(firstFail, firstOK), time.Minute
		}
		everyWrote = max(everyWrote, ok.Sub(firstFail))
	}
	return refusedSince(firstFail, firstOK), everyWrote
}

func refusedSince(firstFail, firstOK time.Time) time.Duration {
	if firstOK.IsZero() {
		return time.Minute
	}
	return firstOK.Sub(firstFail)
}

// Summary is the nemesis part of the report, one line per kind, then one
// per failover.
func (in *Injected) Summary() string {
	var b strings.Builder
	for _, k := range reportKinds {
		if k == ShardMove && len(in.Moves) > 0 {
			fmt.Fprintf(&b, "  %-13s ×%d  (shard moves, below)\n", k, len(in.Moves))
		}
		rs := in.Recovery[k]
		if len(rs) == 0 {
			continue
		}
		slices.Sort(rs)
		what := "serving again after"
		if failover(k) {
			what = "writes refused for"
		}
		fmt.Fprintf(&b, "  %-13s ×%d  %s %s (worst %s)\n", k, len(rs), what, rs[len(rs)/2].Round(time.Millisecond), rs[len(rs)-1].Round(time.Millisecond))
	}
	if len(in.Failovers) > 0 {
		fmt.Fprintf(&b, "failovers:\n")
	}
	for _, f := range in.Failovers {
		fmt.Fprintf(&b, "  %-13s database %d at %s: writes refused for %s, every instance wrote to the new primary after %s\n",
			f.Kind, f.Index, f.At.Round(time.Second), f.Refused.Round(time.Millisecond), f.EveryWrote.Round(time.Millisecond))
	}
	b.WriteString(movesSummary(in.Moves))
	return b.String()
}
