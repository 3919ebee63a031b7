package postgres

import "time"

// SetPlanClock makes the store's planning (planLate) read the time from
// now. Set it before the store's first write: the committers read it
// without a lock.
func (s *Store) SetPlanClock(now func() time.Time) { s.now = now }
