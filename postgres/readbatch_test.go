package postgres_test

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
)

// TestBalanceReadsAreGathered: balance reads from many goroutines are
// answered in fewer round trips than reads, each as a read alone answers.
func TestBalanceReadsAreGathered(t *testing.T) {
	e := newEnv(t)
	var players []coffer.PlayerID
	for p := coffer.PlayerID(1); p <= 50; p++ {
		players = append(players, p)
		e.mustChange(p, "a", free("gold", coffer.Amount(p)), paid("silver", 2*coffer.Amount(p), fmt.Sprint("o", p)))
	}
	want := map[coffer.PlayerID]coffer.Balances{}
	for _, p := range players {
		b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p, Lots: true})
		must(t, err)
		want[p] = b
	}
	const reads = 400
	got := make([]coffer.Balances, reads)
	trips, _ := e.roundTrips(func() {
		var wg sync.WaitGroup
		for i := range reads {
			wg.Go(func() {
				var err error
				got[i], err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: players[i%len(players)], Lots: true})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	})
	for i, b := range got {
		if w := want[players[i%len(players)]]; !reflect.DeepEqual(b, w) {
			t.Fatalf("read %d: %+v, alone %+v", i, b, w)
		}
	}
	if trips >= reads {
		t.Fatalf("%d round trips for %d reads", trips, reads)
	}
	t.Logf("%d round trips for %d reads", trips, reads)
}

// heldReads is an Observer that holds the first batch of reads (before
// its reads are answered) until release is closed.
type heldReads struct {
	observed
	held             atomic.Bool
	entered, release chan struct{}
}

func (o *heldReads) Batch(database, kind string, items int, took time.Duration) {
	o.observed.Batch(database, kind, items, took)
	if kind == "reads" && o.held.CompareAndSwap(false, true) {
		close(o.entered)
		<-o.release
	}
}

// TestReadsOneBatchAtATime: with Readers 1 (the default), a database runs
// one batch of reads at a time, and the reads that queue behind it go
// together in the next. With a second reader they would run at once, in
// batches of their own.
func TestReadsOneBatchAtATime(t *testing.T) {
	e := newEnv(t)
	o := &heldReads{entered: make(chan struct{}), release: make(chan struct{})}
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, Observer: o})
	defer store.Close()
	release := sync.OnceFunc(func() { close(o.release) })
	defer release() // before Close, which waits for the held batch
	ps := e.playersOn(0, 1, 5)
	read := func(p coffer.PlayerID, errs chan<- error) {
		_, err := store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p})
		errs <- err
	}
	first, rest := make(chan error, 1), make(chan error, 4)
	go read(ps[0], first)
	<-o.entered
	for _, p := range ps[1:] {
		go read(p, rest)
	}
	queued := func() (n int) {
		store.Queues(func(database, kind string, jobs int) {
			if kind == "reads" {
				n += jobs
			}
		})
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < 4; {
		select {
		case err := <-rest:
			t.Fatalf("a read ran beside the held batch (err %v)", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads queued, want 4", queued())
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	must(t, <-first)
	for range 4 {
		must(t, <-rest)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	db := e.router.Map().Databases()[0].Name()
	if w := []string{db + " reads 1", db + " reads 4"}; !slices.Equal(o.batches, w) {
		t.Fatalf("batches %q, want %q", o.batches, w)
	}
}
