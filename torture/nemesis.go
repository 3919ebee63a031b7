package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
)

// FaultKinds lists every kind, in the order of the report.
var FaultKinds = []string{PGKill, PGStop, NetCut, NetSlow, NetReset, CofferKill}

// Target is what the nemesis breaks. Index i is a database (and its
// server and proxy) or, for CofferKill, an instance. Each method returns
// once the fault is in place; Heal-type methods once it is undone.
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
}

// Fault is one planned fault.
type Fault struct {
	Kind   string
	Index  int
	At     time.Duration // from the start of the run
	Length time.Duration
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
		if f.Kind == CofferKill {
			n = instances
		}
		f.Index = rng.IntN(n)
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
	Errors []string
}

// Run applies the plan from start until it ends or ctx does. Every fault
// is healed before Run returns.
func Run(ctx context.Context, t Target, plan []Fault, start time.Time) *Injected {
	in := &Injected{Recovery: map[string][]time.Duration{}, Outage: map[int]time.Duration{}}
	for _, f := range plan {
		select {
		case <-ctx.Done():
			return in
		case <-time.After(time.Until(start.Add(f.At))):
		}
		begun := time.Now()
		healed, err := apply(ctx, t, f)
		if err != nil {
			in.Errors = append(in.Errors, fmt.Sprintf("%s on %d: %v", f.Kind, f.Index, err))
			continue
		}
		if f.Kind == CofferKill {
			t.WaitInstance(ctx, f.Index)
		} else {
			t.WaitDatabase(ctx, f.Index)
		}
		in.Recovery[f.Kind] = append(in.Recovery[f.Kind], time.Since(healed))
		if f.Kind != CofferKill {
			in.Outage[f.Index] += time.Since(begun)
		}
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
	default:
		return time.Now(), fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	time.Sleep(f.Length)
	healed := time.Now()
	return healed, heal()
}

// Summary is the nemesis part of the report, one line per kind.
func (in *Injected) Summary() string {
	var b strings.Builder
	for _, k := range FaultKinds {
		rs := in.Recovery[k]
		if len(rs) == 0 {
			continue
		}
		slices.Sort(rs)
		fmt.Fprintf(&b, "  %-12s ×%d  serving again after %s (worst %s)\n", k, len(rs), rs[len(rs)/2].Round(time.Millisecond), rs[len(rs)-1].Round(time.Millisecond))
	}
	return b.String()
}
