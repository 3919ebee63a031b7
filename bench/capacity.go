package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cofferhq/coffer/internal/cgroup"
)

// Confinement is how a --self stack's processes shared the machine's
// CPUs: what a figure per op or per second depends on.
type Confinement struct {
	// Servers is how many PostgreSQL servers the stack ran, Databases
	// how many coffer databases they held (its shards spread over them).
	Servers   int `json:"postgres_servers"`
	Databases int `json:"databases"`
	// CPUs are the CPUs the bench could use; PostgresCPUs those every
	// server was confined to (a cpuset, --pg-cpus) and LoadCPUs those of
	// the bench and coffer serve, the rest. Without --pg-cpus both are
	// empty: every process shares every CPU.
	CPUs         string `json:"cpus"`
	PostgresCPUs string `json:"postgres_cpus,omitempty"`
	LoadCPUs     string `json:"load_cpus,omitempty"`
	// PostgresCPUQuota is each server's CPU budget in cores (a CFS
	// quota, --pg-cpu-quota), 0 for none.
	PostgresCPUQuota float64 `json:"postgres_cpu_quota_cores,omitempty"`
	// PostgresCPUsSeen and LoadCPUsSeen are read back from the processes
	// after the runs (every PostgreSQL process's, coffer serve's CPU
	// list, distinct lists joined by a space): what the kernel enforced,
	// on the backends forked after the confinement too.
	PostgresCPUsSeen string `json:"postgres_cpus_seen,omitempty"`
	LoadCPUsSeen     string `json:"load_cpus_seen,omitempty"`
}

// BudgetCores is the CPU all PostgreSQL servers together could use: the
// servers' quotas, else their CPUs, else every CPU.
func (c *Confinement) BudgetCores() float64 {
	switch {
	case c.PostgresCPUQuota > 0:
		return float64(c.Servers) * c.PostgresCPUQuota
	case c.PostgresCPUs != "":
		return float64(cpuCount(c.PostgresCPUs))
	}
	return float64(cpuCount(c.CPUs))
}

// cpuCount is how many CPUs a CPU list ("0-2,5") names, 0 if it is
// none.
func cpuCount(list string) int {
	cpus, _ := cgroup.ParseList(list)
	return len(cpus)
}

// write prints the confinement as a line of the report's header.
func (c *Confinement) write(w io.Writer) {
	servers := fmt.Sprintf("PostgreSQL (%d server(s), %d database(s))", c.Servers, c.Databases)
	if c.PostgresCPUs == "" && c.PostgresCPUQuota == 0 {
		fmt.Fprintf(w, "CPUs: shared: %s, coffer serve and the bench on CPUs %s\n", servers, c.CPUs)
		return
	}
	if c.PostgresCPUs != "" {
		servers += fmt.Sprintf(" on CPUs %s (seen: %s)", c.PostgresCPUs, c.PostgresCPUsSeen)
	}
	if c.PostgresCPUQuota > 0 {
		servers += fmt.Sprintf(", %.2f cores each (CFS quota)", c.PostgresCPUQuota)
	}
	load := "coffer serve and the bench on CPUs " + c.CPUs
	if c.LoadCPUs != "" {
		load = fmt.Sprintf("coffer serve and the bench on CPUs %s (seen: %s)", c.LoadCPUs, c.LoadCPUsSeen)
	}
	fmt.Fprintf(w, "CPUs: %s; %s\n", servers, load)
}

// Cores is the CPU each part kept busy during coffer's runs, in cores:
// its CPU per op times the ops per second.
type Cores struct {
	Postgres float64 `json:"postgres"`
	Coffer   float64 `json:"coffer_serve"`
	Bench    float64 `json:"bench"`
	// PostgresBudget is what the servers could use (BudgetCores).
	PostgresBudget float64 `json:"postgres_budget,omitempty"`
}

func (r *Report) cores() Cores {
	busy := func(per1000 float64) float64 { return per1000 / 1000 * r.TPS }
	c := Cores{Postgres: busy(r.Coffer.PostgresCPUPer1000Op), Coffer: busy(r.Coffer.CofferCPUPer1000Op), Bench: busy(r.Coffer.BenchCPUPer1000Op)}
	if r.Confinement != nil {
		c.PostgresBudget = r.Confinement.BudgetCores()
	}
	return c
}

// ScaleOut is the report of --databases: the same workload on stacks of
// more and more PostgreSQL servers, each with the same CPU budget, one
// stack after the other. Its JSON form is what --json writes.
type ScaleOut struct {
	Points []ScalePoint `json:"points"`
	Stacks []*Report    `json:"stacks"`
}

// ScalePoint is one stack's throughput, against the first stack's.
type ScalePoint struct {
	Servers int     `json:"postgres_servers"`
	TPS     float64 `json:"tps"`
	// Ratio is TPS over the first stack's TPS.
	Ratio float64 `json:"ratio_to_first"`
	Cores Cores   `json:"cores_busy"`
}

// NewScaleOut is the report of stacks, the first the reference.
func NewScaleOut(stacks []*Report) *ScaleOut {
	s := &ScaleOut{Stacks: stacks}
	for _, r := range stacks {
		p := ScalePoint{Servers: r.Confinement.Servers, TPS: r.TPS, Cores: r.cores()}
		if stacks[0].TPS > 0 {
			p.Ratio = r.TPS / stacks[0].TPS
		}
		s.Points = append(s.Points, p)
	}
	return s
}

// WriteText prints each stack's report, then the scale-out table.
func (s *ScaleOut) WriteText(w io.Writer) {
	for _, r := range s.Stacks {
		fmt.Fprintf(w, "\n=== %d PostgreSQL server(s)\n", r.Confinement.Servers)
		r.WriteText(w)
	}
	first := s.Points[0]
	fmt.Fprintf(w, "\nscale-out: %s, %d clients, the same budget per server; cores busy during coffer's runs\n", s.Stacks[0].Workload, s.Stacks[0].Clients)
	fmt.Fprintf(w, "%8s %10s %8s %12s %22s %8s %8s\n", "servers", "tps", fmt.Sprintf("× at %d", first.Servers), "tps/server", "PostgreSQL (budget)", "serve", "bench")
	for _, p := range s.Points {
		fmt.Fprintf(w, "%8d %10.0f %8.2f %12.0f %22s %8.2f %8.2f\n", p.Servers, p.TPS, p.Ratio, p.TPS/float64(p.Servers),
			fmt.Sprintf("%.2f (%.2f)", p.Cores.Postgres, p.Cores.PostgresBudget), p.Cores.Coffer, p.Cores.Bench)
	}
}

// WriteJSON writes the report as JSON to path.
func (s *ScaleOut) WriteJSON(path string) error { return writeJSON(path, s) }

// WriteMarkdown writes each stack's report and charts into
// dir/servers-K, and the whole text into dir/report.md.
func (s *ScaleOut) WriteMarkdown(dir string) error {
	for _, r := range s.Stacks {
		if err := r.WriteMarkdown(filepath.Join(dir, fmt.Sprintf("servers-%d", r.Confinement.Servers))); err != nil {
			return err
		}
	}
	var text strings.Builder
	s.WriteText(&text)
	var links strings.Builder
	for _, r := range s.Stacks {
		fmt.Fprintf(&links, "- [%d server(s)](servers-%d/report.md)\n", r.Confinement.Servers, r.Confinement.Servers)
	}
	md := fmt.Sprintf("# coffer bench: %s on more PostgreSQL servers\n\n%s\n```\n%s```\n", s.Stacks[0].Workload, links.String(), strings.TrimLeft(text.String(), "\n"))
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644)
}

// Violations is what the audits found on every stack.
func (s *ScaleOut) Violations() int {
	n := 0
	for _, r := range s.Stacks {
		n += r.AuditViolations
	}
	return n
}
