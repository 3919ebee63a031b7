package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writeHeader prints what ran: the workload, and the settings of a
// --self stack.
func (r *Report) writeHeader(w io.Writer) {
	fmt.Fprintf(w, "\nworkload %s over %s, %d clients", r.Workload, r.Transport, r.Clients)
	if r.BatchSize > 0 {
		fmt.Fprintf(w, ", %d grants per call (ops and tps count grants; the baseline writes one per transaction)", r.BatchSize)
	}
	if r.Rate > 0 {
		fmt.Fprintf(w, ", open loop at %.0f/s", r.Rate)
	}
	fmt.Fprintf(w, ", %d round(s)\n", len(r.Rounds))
	if len(r.PostgresSettings) > 0 {
		var set []string
		for _, name := range slices.Sorted(maps.Keys(r.PostgresSettings)) {
			set = append(set, name+"="+r.PostgresSettings[name])
		}
		fmt.Fprintf(w, "PostgreSQL: %s\n", strings.Join(set, " "))
	}
	if r.Committers > 0 {
		fmt.Fprintf(w, "coffer serve: batches.committers=%d batches.readers=%d\n", r.Committers, r.Readers)
	}
	if r.Confinement != nil {
		r.Confinement.write(w)
	}
	if r.Interrupted {
		fmt.Fprintln(w, "interrupted: this covers the runs until the interrupt")
	}
}

// WriteText prints the human summary.
func (r *Report) WriteText(w io.Writer) {
	r.writeHeader(w)
	fmt.Fprintln(w)
	base := cmp.Or(r.BaselineName, "sql")
	fmt.Fprintf(w, "%-7s %12s %12s %8s\n", "round", "coffer tps", base+" tps", "ratio")
	for i, rd := range r.Rounds {
		if rd.BaselineTPS > 0 {
			fmt.Fprintf(w, "%-7d %12.0f %12.0f %8.2f\n", i+1, rd.CofferTPS, rd.BaselineTPS, rd.Ratio)
		} else {
			fmt.Fprintf(w, "%-7d %12.0f %12s %8s\n", i+1, rd.CofferTPS, "-", "-")
		}
	}
	if r.Baseline != nil {
		fmt.Fprintf(w, "median ratio coffer/%s: %.2f\n", base, r.RatioMedian)
	}
	l := r.Latency
	fmt.Fprintf(w, "\ncoffer latency ms: p50 %.2f  p95 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  (mean %.2f, sd %.2f)\n",
		l.P50, l.P95, l.P99, l.P999, l.Max, l.Mean, l.Std)
	if b := r.BaselineLat; b != nil {
		fmt.Fprintf(w, "%-6s latency ms: p50 %.2f  p95 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  (mean %.2f, sd %.2f)\n",
			base, b.P50, b.P95, b.P99, b.P999, b.Max, b.Mean, b.Std)
	}
	fmt.Fprintf(w, "errors: %s\n", errorList(r.Errors))
	fmt.Fprintf(w, "\n%-28s %12s %12s\n", "per operation", "coffer", base)
	row := func(name string, c float64, b func(*Side) float64, format string) {
		bs := "-"
		if r.Baseline != nil {
			bs = fmt.Sprintf(format, b(r.Baseline))
		}
		fmt.Fprintf(w, "%-28s %12s %12s\n", name, fmt.Sprintf(format, c), bs)
	}
	row("WAL bytes", r.Coffer.WALBytesPerOp, func(s *Side) float64 { return s.WALBytesPerOp }, "%.0f")
	row("database growth bytes", r.Coffer.DBBytesPerOp, func(s *Side) float64 { return s.DBBytesPerOp }, "%.0f")
	row("transactions that wrote", r.Coffer.TransactionsPerOp, func(s *Side) float64 { return s.TransactionsPerOp }, "%.3f")
	row("PostgreSQL CPU s / 1000 ops", r.Coffer.PostgresCPUPer1000Op, func(s *Side) float64 { return s.PostgresCPUPer1000Op }, "%.3f")
	if r.Coffer.WalsenderCPUPer1000Op > 0 || r.Baseline != nil && r.Baseline.WalsenderCPUPer1000Op > 0 {
		row("  of which walsenders", r.Coffer.WalsenderCPUPer1000Op, func(s *Side) float64 { return s.WalsenderCPUPer1000Op }, "%.3f")
	}
	if r.CapacityRatio > 0 {
		fmt.Fprintf(w, "%-28s %12.0f %12.0f  (PostgreSQL's capacity: coffer/%s %.2f)\n", "ops per PostgreSQL CPU s",
			1000/r.Coffer.PostgresCPUPer1000Op, 1000/r.Baseline.PostgresCPUPer1000Op, base, r.CapacityRatio)
	}
	fmt.Fprintf(w, "%-28s %12.3f\n", "coffer CPU s / 1000 ops", r.Coffer.CofferCPUPer1000Op)
	row("bench CPU s / 1000 ops", r.Coffer.BenchCPUPer1000Op, func(s *Side) float64 { return s.BenchCPUPer1000Op }, "%.3f")
	if r.Confinement != nil && r.Confinement.PostgresCPUQuota > 0 {
		row("PostgreSQL quota ran out %", 100*r.Coffer.PostgresThrottledShare, func(s *Side) float64 { return 100 * s.PostgresThrottledShare }, "%.1f")
	}
	row("CPU stolen by the host %", 100*r.Coffer.StealShare, func(s *Side) float64 { return 100 * s.StealShare }, "%.1f")
	fmt.Fprintf(w, "%-28s %12.2f\n", "lot updates that were HOT", r.Coffer.LotHOTShare)
	if r.Confinement != nil {
		c := r.cores()
		fmt.Fprintf(w, "cores busy in coffer's runs: PostgreSQL %.2f of %.2f, coffer serve %.2f, bench %.2f\n", c.Postgres, c.PostgresBudget, c.Coffer, c.Bench)
	}
	if r.RSSPeakBytes > 0 {
		fmt.Fprintf(w, "coffer serve peak RSS: %.1f MB\n", float64(r.RSSPeakBytes)/1e6)
	}
	fmt.Fprintf(w, "writes acknowledged %d, trx rows written %d\n", r.Writes, r.TrxWritten)
	if d := r.Decay; d != nil {
		fmt.Fprintf(w, "decay over %d ops: first tenth %.0f tps, last tenth %.0f tps (%.0f %%)\n", d.Ops, d.FirstTPS, d.LastTPS, 100*d.Ratio)
		fmt.Fprint(w, "tps per tenth:")
		for _, tps := range d.TenthsTPS {
			fmt.Fprintf(w, " %.0f", tps)
		}
		fmt.Fprintln(w)
		if len(d.TenthsCofferCPU) > 0 {
			fmt.Fprint(w, "coffer CPU s / 1000 ops per tenth (the host's speed):")
			for _, s := range d.TenthsCofferCPU {
				fmt.Fprintf(w, " %.3f", s)
			}
			fmt.Fprintln(w)
		}
	}
	writeMoves(w, r.Moves)
	if r.Feed != nil {
		r.Feed.writeText(w)
	}
	writeStatements(w, "coffer", &r.Coffer)
	if r.Baseline != nil {
		writeStatements(w, base, r.Baseline)
	}
}

// statementsShown bounds the statements listed per side.
const statementsShown = 12

func writeStatements(w io.Writer, name string, s *Side) {
	if len(s.Statements) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s: %.2f statements sent and %.0f µs executing them per op (pg_stat_statements; ↳ ran inside a function, its time the function's too)\n", name, s.StatementsPerOp, s.ExecUsPerOp)
	fmt.Fprintf(w, "%8s %8s %8s %8s  %s\n", "calls/op", "µs/op", "mean µs", "WAL B/op", "statement")
	for i, st := range s.Statements {
		if i == statementsShown {
			break
		}
		q := st.Query
		if len(q) > 90 {
			q = q[:87] + "..."
		}
		if st.Nested {
			q = "↳ " + q
		}
		fmt.Fprintf(w, "%8.2f %8.1f %8.1f %8.0f  %s\n", st.CallsPerOp, st.ExecUsPerOp, st.MeanExecUs, st.WALBytesPerOp, q)
	}
}

func errorList(errs map[string]int64) string {
	if len(errs) == 0 {
		return "none"
	}
	var parts []string
	for code, n := range errs {
		parts = append(parts, fmt.Sprintf("%s %d", code, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Violations is what the audit found.
func (r *Report) Violations() int { return r.AuditViolations }

// WriteJSON writes the report as JSON to path.
func (r *Report) WriteJSON(path string) error { return writeJSON(path, r) }

// writeJSON writes v as indented JSON to path.
func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

// WriteMarkdown writes dir/report.md and its charts: throughput and p99
// over time, and the latency distribution.
func (r *Report) WriteMarkdown(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	charts := []struct {
		file, title, y string
		value          func(Point) float64
	}{
		{"throughput.png", "Throughput", "ops/s", func(p Point) float64 { return p.TPS }},
		{"p99.png", "p99 latency", "ms", func(p Point) float64 { return p.P99Ms }},
	}
	for _, c := range charts {
		if err := r.timeChart(filepath.Join(dir, c.file), c.title, c.y, c.value); err != nil {
			return err
		}
	}
	if err := r.latencyChart(filepath.Join(dir, "latency.png")); err != nil {
		return err
	}
	var text strings.Builder
	r.WriteText(&text)
	md := fmt.Sprintf("# coffer bench: %s\n\n```\n%s```\n\n![throughput](throughput.png)\n\n![p99](p99.png)\n\n![latency distribution](latency.png)\n",
		r.Workload, strings.TrimLeft(text.String(), "\n"))
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644)
}

func (r *Report) timeChart(path, title, y string, value func(Point) float64) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s — %s, %d clients", title, r.Workload, r.Clients)
	p.X.Label.Text, p.Y.Label.Text = "seconds into the run", y
	p.Add(plotter.NewGrid())
	for i, run := range r.Runs {
		pts := make(plotter.XYs, len(run.Series))
		for j, pt := range run.Series {
			pts[j] = plotter.XY{X: pt.Second, Y: value(pt)}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotColors[i%len(plotColors)]
		p.Add(line)
		p.Legend.Add(run.Label, line)
	}
	p.Legend.Top = true
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}

// latencyChart plots latency against percentile on a "nines" axis, for
// each run.
func (r *Report) latencyChart(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Latency distribution — %s", r.Workload)
	p.X.Label.Text, p.Y.Label.Text = "percentile (50, 90, 99, 99.9, 99.99)", "ms"
	p.Add(plotter.NewGrid())
	quantiles := []float64{50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99}
	for i, run := range r.Runs {
		if run.hist == nil || run.hist.TotalCount() == 0 {
			continue
		}
		pts := make(plotter.XYs, len(quantiles))
		for j, q := range quantiles {
			pts[j] = plotter.XY{X: -math.Log10(1 - q/100), Y: float64(run.hist.ValueAtQuantile(q)) / 1000}
		}
		line, _, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color = plotColors[i%len(plotColors)]
		p.Add(line)
		p.Legend.Add(run.Label, line)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}
