package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/cofferhq/coffer/bench"
	"github.com/cofferhq/coffer/internal/cgroup"
	"github.com/cofferhq/coffer/internal/pgserver"
)

// benchServersMax bounds --databases: each server of a stack is a
// PostgreSQL of its own.
const benchServersMax = 16

// parseServers reads --databases: a list of server counts, ascending,
// such as "1,2,4".
func parseServers(list string) ([]int, error) {
	var counts []int
	for _, part := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || n > benchServersMax || len(counts) > 0 && n <= counts[len(counts)-1] {
			return nil, fmt.Errorf("%q is not a list of server counts 1–%d, ascending, such as 1,2,4", list, benchServersMax)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// checkCPUs refuses --pg-cpus, --pg-cpu-quota and --databases that do not
// fit this machine, and finds the CPUs: PostgreSQL gets the last
// --pg-cpus of those the bench may use, the bench and coffer serve the
// rest.
func (f *benchFlags) checkCPUs(given map[string]bool) error {
	confined := f.pgCPUs > 0 || f.pgCPUQuota > 0
	switch {
	case (given["pg-cpus"] || given["pg-cpu-quota"] || given["databases"]) && !f.self:
		return errors.New("--pg-cpus, --pg-cpu-quota and --databases need --self")
	case f.pgCPUs < 0 || f.pgCPUQuota < 0:
		return errors.New("--pg-cpus and --pg-cpu-quota must not be negative")
	case f.pgCPUQuota > 0 && f.pgCPUQuota < cgroup.QuotaCoresMin:
		return fmt.Errorf("--pg-cpu-quota: at least %g cores", cgroup.QuotaCoresMin)
	}
	for _, n := range f.servers {
		if _, err := shardsOnEach(f.shards, n); err != nil {
			return fmt.Errorf("--databases: %w (--shards)", err)
		}
		// The servers share --pg-cpus: their budgets must fit in it, or
		// each would get less than its own.
		if f.pgCPUs > 0 && float64(n)*f.pgCPUQuota > float64(f.pgCPUs)+1e-9 {
			return fmt.Errorf("--pg-cpu-quota %g × %d servers is more than --pg-cpus %d: the servers would share their cores, not each have its budget", f.pgCPUQuota, n, f.pgCPUs)
		}
	}
	allowed, err := cgroup.AllowedCPUs(os.Getpid())
	if err != nil {
		return err
	}
	if f.cpus, err = cgroup.ParseList(allowed); err != nil {
		return err
	}
	if f.pgCPUs >= len(f.cpus) {
		return fmt.Errorf("--pg-cpus %d: the bench may use %d CPUs (%s) and needs one at least for itself and coffer serve", f.pgCPUs, len(f.cpus), allowed)
	}
	if f.pgCPUQuota > float64(len(f.cpus)) {
		return fmt.Errorf("--pg-cpu-quota %g: more than the %d CPUs the bench may use", f.pgCPUQuota, len(f.cpus))
	}
	if !confined {
		return nil
	}
	if err := cgroup.Check(f.pgCPUs > 0, f.pgCPUQuota > 0); err != nil {
		return fmt.Errorf("--pg-cpus, --pg-cpu-quota: %w", err)
	}
	return nil
}

// stackCPUs is the confinement of one --self stack: the cgroups of its
// PostgreSQL servers and, with --pg-cpus, of the bench itself, whose
// children (coffer serve, pgbench) are born in its group.
type stackCPUs struct {
	set    *cgroup.Set
	pgCPUs string
	quota  float64
	report bench.Confinement
	// servers are the groups of the PostgreSQL servers.
	servers []*cgroup.Group
}

// confine sets up the cgroups of a stack of layout (none without
// --pg-cpus and --pg-cpu-quota); place and placeBench put the stack's
// processes in them, remove undoes it.
func (f *benchFlags) confine(layout stackLayout) (*stackCPUs, error) {
	c := &stackCPUs{quota: f.pgCPUQuota, report: bench.Confinement{Servers: layout.servers, Databases: layout.databases(),
		CPUs: cgroup.FormatList(f.cpus), PostgresCPUQuota: f.pgCPUQuota}}
	if f.pgCPUs == 0 && f.pgCPUQuota == 0 {
		return c, nil
	}
	var err error
	if c.set, err = cgroup.NewSet("coffer-bench-"+strconv.Itoa(os.Getpid()), f.pgCPUs > 0, f.pgCPUQuota > 0); err != nil {
		return nil, err
	}
	if f.pgCPUs > 0 {
		split := len(f.cpus) - f.pgCPUs
		c.pgCPUs, c.report.PostgresCPUs = cgroup.FormatList(f.cpus[split:]), cgroup.FormatList(f.cpus[split:])
		c.report.LoadCPUs = cgroup.FormatList(f.cpus[:split])
	}
	return c, nil
}

// placeBench moves the bench onto the CPUs PostgreSQL does not have (with
// --pg-cpus): the load generator, and coffer serve and pgbench, born in
// its group once started. It comes after the stack's start, which may
// then use every CPU.
func (c *stackCPUs) placeBench() error {
	if c.report.LoadCPUs == "" {
		return nil
	}
	load, err := c.set.Group("load", c.report.LoadCPUs, 0)
	if err != nil {
		return err
	}
	return load.Add(os.Getpid())
}

// place confines server number i: the postmaster first, so that every
// backend it forks from then on is born confined, then the children it
// forked before.
func (c *stackCPUs) place(i int, server *pgserver.Server) error {
	if c.set == nil {
		return nil
	}
	g, err := c.set.Group("pg"+strconv.Itoa(i), c.pgCPUs, c.quota)
	if err != nil {
		return err
	}
	c.servers = append(c.servers, g)
	pids := server.PIDs()
	if len(pids) == 0 {
		return fmt.Errorf("PostgreSQL server %d is not running", i)
	}
	if err := g.Add(pids[0]); err != nil {
		return err
	}
	for _, pid := range server.PIDs()[1:] {
		if err := g.Add(pid); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// throttling sums the servers' quota periods and those throttled.
func (c *stackCPUs) throttling() (periods, throttled int64, err error) {
	for _, g := range c.servers {
		p, t, err := g.Throttling()
		if err != nil {
			return 0, 0, err
		}
		periods, throttled = periods+p, throttled+t
	}
	return periods, throttled, nil
}

// readBack records the CPU lists the kernel enforced on the stack's
// PostgreSQL processes and on coffer serve, read after the runs.
func (c *stackCPUs) readBack(st *localStack, servePID int) {
	var seen []string
	for _, pid := range st.postgresPIDs() {
		if cpus, err := cgroup.AllowedCPUs(pid); err == nil && !slices.Contains(seen, cpus) {
			seen = append(seen, cpus)
		}
	}
	c.report.PostgresCPUsSeen = strings.Join(seen, " ")
	c.report.LoadCPUsSeen, _ = cgroup.AllowedCPUs(servePID)
}

// remove takes the bench home and removes the cgroups; the stack's
// processes must have stopped.
func (c *stackCPUs) remove() error {
	if c.set == nil {
		return nil
	}
	return c.set.Remove()
}

// runServers is --databases: the same bench on a stack of each size, one
// after the other; an interrupt ends it after the stack it stopped.
func (f *benchFlags) runServers(ctx context.Context, out io.Writer) (*bench.ScaleOut, error) {
	var reps []*bench.Report
	for _, n := range f.servers {
		if len(reps) > 0 && f.Stopped() {
			break
		}
		rep, err := f.runSelf(ctx, out, stackLayout{servers: n, databasesEach: 1})
		if err != nil {
			return nil, err
		}
		reps = append(reps, rep)
	}
	return bench.NewScaleOut(reps), nil
}
