package coffer

import (
	"testing"
	"time"
)

// mustCatalog is the catalog of the domain tests: currencies cs, with the
// product's default hold TTL (10 minutes) and at most an hour.
func mustCatalog(tb testing.TB, cs ...Currency) *Catalog {
	tb.Helper()
	c, err := NewCatalog(cs, 10*time.Minute, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
