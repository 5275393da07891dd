package slo

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
)

var update = flag.Bool("update", false, "rewrite the checked-in rules and dashboard under deploy/")

func load(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCheckedInUpToDate requires deploy/prometheus/llmesh-rules.yaml and
// deploy/grafana/llmesh-slo.json to be what `llmesh slo rules|dashboard
// --config examples/mesh.yaml` writes now (go test ./slo/ -update
// rewrites them).
func TestCheckedInUpToDate(t *testing.T) {
	cfg := load(t, "../examples/mesh.yaml")
	rules, _, err := GenerateRules(cfg, "examples/mesh.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	dash, err := GenerateDashboard(cfg, "examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{
		"../deploy/prometheus/llmesh-rules.yaml": rules,
		"../deploy/grafana/llmesh-slo.json":      dash,
	} {
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(string(want), string(got)); d != "" {
			t.Errorf("%s is stale; regenerate with go test ./slo/ -update (-want +got):\n%s", path, d)
		}
	}
}

func TestBurnRateAlerts(t *testing.T) {
	f, skipped := Rules(load(t, "testdata/mesh.yaml"), Options{})
	type alert struct{ class, long, short, expr string }
	var got []alert
	for _, r := range f.Groups[0].Rules {
		if r.Alert == AlertBurn {
			got = append(got, alert{r.Labels[LabelClass], r.Labels["long_window"], r.Labels["short_window"], r.Expr})
		}
	}
	e := func(class, long, short, th string) alert {
		return alert{class, long, short, fmt.Sprintf(`llmesh_class:slo_error:ratio_rate%s{llmesh_class=%q} > %s and llmesh_class:slo_error:ratio_rate%s{llmesh_class=%q} > %s`, long, class, th, short, class, th)}
	}
	want := []alert{
		e("interactive", "1h", "5m", "0.72"), e("interactive", "6h", "30m", "0.3"), e("interactive", "1d", "2h", "0.15"), e("interactive", "3d", "6h", "0.05"),
		// 14.4 × 0.1 ≥ 1: no 1h/5m pair for batch.
		e("batch", "6h", "30m", "0.6"), e("batch", "1d", "2h", "0.3"), e("batch", "3d", "6h", "0.1"),
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(alert{})); d != "" {
		t.Errorf("burn-rate alerts (-want +got):\n%s", d)
	}
	if len(skipped) != 1 || skipped[0].Class != "batch" || skipped[0].Pair.Long != "1h" {
		t.Errorf("skipped = %v, want batch's 1h/5m", skipped)
	}
	if s := skipped[0].String(); !strings.Contains(s, "14.4 × budget 0.1 = 1.44 ≥ 1") {
		t.Errorf("skipped note %q", s)
	}
}

func TestSchedulerAlertOnlyWithService(t *testing.T) {
	has := func(cfg *config.Config, job string) string {
		f, _ := Rules(cfg, Options{SchedulerJob: job})
		for _, r := range f.Groups[0].Rules {
			if r.Alert == AlertSchedulerDown {
				return r.Expr
			}
		}
		return ""
	}
	if got := has(load(t, "../examples/mesh.yaml"), ""); got != "" {
		t.Errorf("mesh without scheduler_service has a scheduler alert: %s", got)
	}
	if got, want := has(load(t, "testdata/mesh.yaml"), "sched"), `up{job="sched"} == 0 or absent(up{job="sched"})`; got != want {
		t.Errorf("scheduler alert expr %q, want %q", got, want)
	}
}

// TestDashboardReadsRecordedSeries requires every recorded name a panel
// queries to be one of the rules, every panel inside the 24-column grid
// without overlaps, and one row per class and pool.
func TestDashboardReadsRecordedSeries(t *testing.T) {
	cfg := load(t, "../examples/mesh.yaml")
	f, _ := Rules(cfg, Options{})
	recorded := map[string]bool{}
	for _, r := range f.Groups[0].Rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	d := BuildDashboard(cfg)
	name := regexp.MustCompile(`[a-z_]+:[a-z_]+:[a-z0-9_]+`)
	type cell struct{ x, y int }
	used := map[cell]int{}
	rows := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows++
			continue
		}
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d %q past the grid: %+v", p.ID, p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if o, ok := used[cell{x, y}]; ok {
					t.Fatalf("panel %d overlaps panel %d at %d,%d", p.ID, o, x, y)
				}
				used[cell{x, y}] = p.ID
			}
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			// Runs as written against Prometheus (the e2e test does).
			if strings.Contains(tg.Expr, "$") {
				t.Errorf("panel %q query %q uses a Grafana variable", p.Title, tg.Expr)
			}
			for _, n := range name.FindAllString(tg.Expr, -1) {
				if !recorded[n] && !strings.HasPrefix(n, "vllm:") {
					t.Errorf("panel %q queries %s, which no rule records", p.Title, n)
				}
			}
		}
	}
	if want := len(cfg.Classes) + len(cfg.Pools) + 1; rows != want {
		t.Errorf("%d rows, want %d (classes, pools, engines)", rows, want)
	}
}

// TestPromtoolRules runs `promtool check rules` on the checked-in rules and
// `promtool test rules` on the cases in testdata/alerts*_test.yaml against
// the rules generated for testdata/mesh.yaml.
func TestPromtoolRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		fmt.Fprintln(os.Stderr, "SKIP TestPromtoolRules: promtool not installed (Debian package prometheus; make e2e-deps installs it)")
		t.Skip("promtool not installed (Debian package prometheus; make e2e-deps installs it)")
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	t.Log(run("check", "rules", "../deploy/prometheus/llmesh-rules.yaml"))
	// The example Prometheus config, with the rules it loads.
	t.Log(run("check", "config", "../deploy/prometheus/prometheus.yml"))

	dir := t.TempDir()
	rules, _, err := GenerateRules(load(t, "testdata/mesh.yaml"), "slo/testdata/mesh.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "llmesh-rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(run("check", "rules", filepath.Join(dir, "llmesh-rules.yaml")))
	tests, _ := filepath.Glob("testdata/alerts*_test.yaml")
	if len(tests) != 2 {
		t.Fatalf("test files %v", tests)
	}
	args := []string{"test", "rules"}
	for _, p := range tests {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(p))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, dst)
	}
	out := run(args...)
	if strings.Count(out, "SUCCESS") != len(tests) {
		t.Fatalf("promtool test rules:\n%s", out)
	}
	t.Log(out)
}
