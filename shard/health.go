package shard

import (
	"context"
	"time"
)

// Health is what the last check of a database found (Router.Check).
type Health struct {
	// Up tells the database takes requests: its schema verified, and the
	// last probe reached a server that accepts writes.
	Up bool
	// Verified tells its schema was found compatible (SetVerified): it is
	// not checked again until it is set unverified.
	Verified bool
	// Err is why it is not up, or what the probe warned of; empty if
	// nothing.
	Err string
	// CheckedAt is when the check ran; zero before the first.
	CheckedAt time.Time
	// Primary is what the last probe that reached the database found.
	Primary Primary
}

// Check checks database i: its schema with verify until that passes once
// (then the database starts taking requests), and a Probe. It records the
// outcome as the database's Health, and returns the Health before it, the
// Health now, and verify's error. Checks of one database are not run
// concurrently: the service runs them from one goroutine.
func (r *Router) Check(ctx context.Context, i int, verify func(context.Context) error) (was, now Health, err error) {
	was = r.Health(i)
	now = Health{Verified: was.Verified, Primary: was.Primary}
	if !now.Verified {
		if err = verify(ctx); err == nil {
			now.Verified = true
			r.SetVerified(i, true)
		}
	}
	primary, probeErr := r.Probe(ctx, i)
	now.Up, now.CheckedAt = probeErr == nil && now.Verified, time.Now().UTC()
	switch {
	case err != nil:
		now.Err = err.Error()
	case probeErr != nil:
		now.Err = probeErr.Error()
	}
	if primary.Host != "" {
		now.Primary = primary
	}
	r.healthMu.Lock()
	r.health[i] = now
	r.healthMu.Unlock()
	return was, now, err
}

// Health is database i's last check (the zero Health before the first),
// with whether its schema is verified as the router holds it now.
func (r *Router) Health(i int) Health {
	r.healthMu.Lock()
	h := r.health[i]
	r.healthMu.Unlock()
	h.Verified = !r.dbs[i].unverified.Load()
	return h
}
