package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"
)

// repoFile is a file of the repository, by its path from the root.
func repoFile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", path))
	must(t, err)
	return raw
}

// TestDashboardAndAlertsQueryCofferMetrics: every metric a panel of the
// Grafana dashboard or an alerting rule queries is one a running coffer
// exports (its registry's descriptions: those not observed yet too), a
// histogram's series (_bucket, _sum, _count) only of a histogram; every
// expression parses (promtool); every alert has the fields Prometheus
// needs and those our pager reads, and its section in operations.md, and
// raises what its unit tests expect.
func TestDashboardAndAlertsQueryCofferMetrics(t *testing.T) {
	exported, histograms := exportedMetrics(t)
	var exprs []string
	var dash struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	raw := repoFile(t, "deploy/grafana/coffer.json")
	must(t, json.Unmarshal(raw, &dash))
	for _, p := range dash.Panels {
		var panel struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		}
		must(t, json.Unmarshal(p, &panel))
		for _, target := range panel.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("the dashboard queries %d expressions", len(exprs))
	}
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			exprs = append(exprs, m[1])
		}
	}
	alerts := alertRules(t)
	for _, r := range alerts {
		exprs = append(exprs, r.Expr)
	}
	for _, expr := range exprs {
		for _, name := range metricNames(expr) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !exported[name] && !(base != name && histograms[base]) {
				t.Errorf("%s: coffer exports no metric %s", expr, name)
			}
		}
	}
	promtoolCheck(t, exprs)
}

// labelValues is the metric of a dashboard variable's query.
var labelValues = regexp.MustCompile(`^label_values\((\w+),`)

// exportedMetrics are the metric names a running coffer exports: its
// registry's descriptions, and which of them are histograms (from a
// scrape, after a call made them appear).
func exportedMetrics(t *testing.T) (names, histograms map[string]bool) {
	s := startService(t, twoServers(t), nil)
	_, _, err := s.dev.Change(ctx, 1, 42, grant("deploy-1", "gold", 5))
	must(t, err)
	_, err = s.dev.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 42})
	must(t, err)
	descs := make(chan *prometheus.Desc)
	go func() { s.main.metrics.Describe(descs); close(descs) }()
	names = map[string]bool{}
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("a description without a name: %s", d)
		}
		names[m[1]] = true
	}
	resp, err := http.Get("http://" + s.main.OpsAddr + "/metrics")
	must(t, err)
	defer resp.Body.Close()
	histograms = map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[1] == "TYPE" && f[3] == "histogram" {
			histograms[f[2]] = true
		}
	}
	must(t, sc.Err())
	for _, h := range []string{"coffer_request_duration_seconds", "coffer_group_commit_batch_size"} {
		if !names[h] || !histograms[h] {
			t.Fatalf("%s: not read as an exported histogram", h)
		}
	}
	return names, histograms
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// promQLNoNames are the parts of an expression that hold no metric name:
// strings, label matchers, ranges and the label lists of by, without, on,
// ignoring, group_left and group_right.
var promQLNoNames = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)

var promQLWord = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)

var promQLKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}

// metricNames are the metric names expr reads: its words that are not a
// function's or an aggregation's, a keyword, or part of a number.
func metricNames(expr string) []string {
	expr = promQLNoNames.ReplaceAllString(expr, " ")
	var out []string
	for _, loc := range promQLWord.FindAllStringIndex(expr, -1) {
		word := expr[loc[0]:loc[1]]
		before, after := "", strings.TrimLeft(expr[loc[1]:], " \t\n")
		if loc[0] > 0 {
			before = expr[loc[0]-1 : loc[0]]
		}
		switch {
		case strings.HasPrefix(after, "("), promQLKeywords[strings.ToLower(word)]:
		case before != "" && strings.ContainsAny(before, "0123456789."): // 1e3, 5m
		default:
			out = append(out, word)
		}
	}
	return out
}

// alertRule is a rule of deploy/prometheus/alerts.yml: the fields
// Prometheus reads, and nothing else (KnownFields).
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules reads the alerting rules and checks each has what
// Prometheus requires (a name, an expression, a duration in for), a
// severity, a summary, a description and a runbook: its section in
// docs/operations.md.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(repoFile(t, "deploy/prometheus/alerts.yml")))
	dec.KnownFields(true)
	must(t, dec.Decode(&file))
	ops := string(repoFile(t, "docs/operations.md"))
	var rules []alertRule
	for _, g := range file.Groups {
		if g.Name == "" {
			t.Error("a group without a name")
		}
		for _, r := range g.Rules {
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", r.Alert, err)
				}
			}
			anchor := "docs/operations.md#" + strings.ToLower(r.Alert)
			switch {
			case !regexp.MustCompile(`^Coffer[A-Za-z]+$`).MatchString(r.Alert) || r.Expr == "":
				t.Errorf("a rule without an alert name or an expression: %+v", r)
			case r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.Annotations["runbook"] != anchor:
				t.Errorf("%s: needs a severity, a summary, a description and the runbook %s", r.Alert, anchor)
			case !strings.Contains(ops, "\n#### "+r.Alert+"\n"):
				t.Errorf("%s: no section #### %s in docs/operations.md", r.Alert, r.Alert)
			}
			rules = append(rules, r)
		}
	}
	if len(rules) == 0 {
		t.Fatal("no alerting rule")
	}
	return rules
}

// promtoolCheck checks the alerting rules, and exprs (the dashboard's,
// Grafana's variables given values), with Prometheus's own parser, and
// runs the rules' unit tests (deploy/prometheus/alerts_test.yml):
// promtool, at PROMTOOL or on the PATH.
func promtoolCheck(t *testing.T, exprs []string) {
	t.Helper()
	promtool := os.Getenv("PROMTOOL") // make test's: scripts/ensure-promtool.sh
	if promtool == "" {
		var err error
		if promtool, err = exec.LookPath("promtool"); err != nil {
			t.Fatal("promtool is missing: set PROMTOOL, or run make test, which finds or fetches one (scripts/ensure-promtool.sh)")
		}
	}
	alerts, err := filepath.Abs(filepath.Join("..", "..", "deploy/prometheus/alerts.yml"))
	must(t, err)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*", "$database", ".*")
	for i, expr := range exprs {
		quoted, err := json.Marshal(grafana.Replace(expr))
		must(t, err)
		fmt.Fprintf(&rules, "      - record: dashboard:expr%d\n        expr: %s\n", i, quoted)
	}
	dashboard := filepath.Join(t.TempDir(), "dashboard.yml")
	must(t, os.WriteFile(dashboard, []byte(rules.String()), 0o644))
	if out, err := exec.Command(promtool, "check", "rules", alerts, dashboard).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	// Each case is a scrape history and the alerts it must raise.
	cases := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cases.Dir = filepath.Dir(alerts)
	if out, err := cases.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestImageConfig: the config the container image ships loads with
// coffer serve's parser, given the variables compose.yaml passes to every
// command that reads it; the image copies it where its commands read it,
// and runs as a user without privileges.
func TestImageConfig(t *testing.T) {
	const path = "/etc/coffer/coffer.yaml"
	dockerfile := string(repoFile(t, "Dockerfile"))
	for _, line := range []string{"COPY deploy/coffer.yaml " + path, `CMD ["serve", "-c", "` + path + `"]`, "USER 65532:65532", "RUN CGO_ENABLED=0 go build"} {
		if !strings.Contains(dockerfile, "\n"+line) {
			t.Errorf("Dockerfile: no line %s", line)
		}
	}
	var compose struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	must(t, yaml.Unmarshal(repoFile(t, "compose.yaml"), &compose))
	config := repoFile(t, "deploy/coffer.yaml")
	for service, command := range map[string][]string{"migrate": {"migrate", "-c", path}, "coffer": {"serve", "-c", path}} {
		sv := compose.Services[service]
		if !slices.Equal(sv.Command, command) {
			t.Errorf("compose.yaml: %s runs %q, want %q", service, sv.Command, command)
		}
		for _, m := range envRef.FindAllSubmatch(config, -1) {
			if _, ok := sv.Environment[string(m[1])]; !ok {
				t.Errorf("compose.yaml: %s does not set %s, which the config reads", service, m[1])
			}
		}
	}
	t.Setenv("COFFER_DB_PASSWORD", `a "quoted" pass\word`)
	t.Setenv("COFFER_API_KEY_SHA256", keyHash("image-key"))
	file := filepath.Join(t.TempDir(), "coffer.yaml")
	must(t, os.WriteFile(file, config, 0o600))
	cfg, m, err := loadConfig(file)
	must(t, err)
	_, clients, err := cfg.service()
	must(t, err)
	if _, err := clients.Authenticate("image-key"); err != nil {
		t.Errorf("the key whose hash the environment gives: %v", err)
	}
	if db := m.Databases()[0]; db.Config.Password != `a "quoted" pass\word` || db.Config.Host != "postgres" {
		t.Errorf("the database: %+v", db.Config)
	}
}

// TestBinaryIsStatic: the binary the image ships, built as its Dockerfile
// builds it (CGO_ENABLED=0), needs no dynamic loader nor shared library:
// it runs on a base image without libc.
func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(cofferBinary(t))
	must(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %s program header: it is linked dynamically", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v", libs)
	}
	out, err := exec.Command(cofferBinary(t), "keygen").Output()
	must(t, err)
	if !strings.Contains(string(out), "coffer_") {
		t.Errorf("coffer keygen: %s", out)
	}
}
