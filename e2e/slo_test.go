package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/telemetry"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// sloStack is a sim behind a gateway, scraped by a real Prometheus that
// evaluates the rules `llmesh slo rules` generated for the gateway's mesh,
// after one run of the standard workload through the gateway.
type sloStack struct {
	Mesh, Dashboard string
	PromURL         string
	Prom            *proctest.Proc
	Gateway         *gatewayProc
	Sim             *proctest.Sim
	Bench           *benchRun
}

// sloMesh has the standard workload's classes (bench/workloads/
// mixed-priority.yaml: the same names, priorities, SLOs and targets), the
// class taken from the workload's x-llmesh-class header, and a pool small
// enough that batch queues and is preempted for interactive requests.
const sloMesh = `listeners:
  - name: main
    address: 127.0.0.1:0
    routes:
      - {name: openai, match: {path_prefix: /v1/}, pool: engine}
pools:
  - name: engine
    protocol: openai
    endpoints: [%s]
    capacity: {max_inflight: 4}
    scheduler:
      policy: preemptive
      preemption: {min_lower_inflight: 1, min_run_time: 20ms, max_per_request: 3}
classes:
  - {name: interactive, priority: 0, slo: {ttft: 500ms, tpot: 30ms}, attainment_target: 0.99, queue: {max_length: 1000, max_wait: 2m}}
  - {name: batch, priority: 10, slo: {ttft: 5s, tpot: 100ms}, attainment_target: 0.9, preemptible: true, queue: {max_length: 1000, max_wait: 2m}}
default_class: interactive
classification:
  priority_header:
    name: x-llmesh-class
    trusted_sources: [127.0.0.1/32]
telemetry:
  prometheus: {enabled: true}
admin:
  address: 127.0.0.1:0
`

func startSLOStack(t *testing.T) *sloStack {
	t.Helper()
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus; `make e2e-deps` installs it): skipping the live SLO tests")
	}
	s := &sloStack{}
	// A few engine failures make sure both classes have SLO misses of a
	// known cause (failed) besides whatever TTFT misses the queueing gives.
	s.Sim = startSim(t, "sim", "--fault-rate", "0.1", "--fault-kinds", "500", "--seed", "7", "--time-scale", "2")
	dir := t.TempDir()
	s.Mesh = filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(s.Mesh, []byte(fmt.Sprintf(sloMesh, strings.TrimPrefix(s.Sim.URL, "http://"))), 0o644); err != nil {
		t.Fatal(err)
	}
	rules, dash := filepath.Join(dir, "llmesh-rules.yaml"), filepath.Join(dir, "llmesh-slo.json")
	for _, args := range [][]string{
		{"slo", "rules", "--config", s.Mesh, "--out", rules},
		{"slo", "dashboard", "--config", s.Mesh, "--out", dash},
	} {
		if out, err := exec.Command(llmesh(t), args...).CombinedOutput(); err != nil {
			t.Fatalf("llmesh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	s.Dashboard = dash
	s.Gateway = startGateway(t, "gateway", "--config", s.Mesh)

	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: llmesh-gateway
    static_configs: [{targets: [%q]}]
  - job_name: llmesh-sim
    static_configs: [{targets: [%q]}]
`, rules, s.Gateway.Admin, strings.TrimPrefix(s.Sim.URL, "http://"))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := proctest.FreeAddr(t)
	s.Prom = proctest.Start(t, "prometheus", promBin, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr, "--log.level=warn")
	s.PromURL = "http://" + promAddr
	proctest.WaitHTTP(t, s.PromURL+"/-/ready", s.Prom)
	// Both targets scraped before the traffic starts, so the report's
	// window starts with Prometheus already watching.
	proctest.WaitFor(t, "Prometheus to scrape the gateway and the sim", func() bool {
		v, ok := promQuery(s.PromURL, `sum(up{job=~"llmesh-gateway|llmesh-sim"})`)
		return ok && v == 2
	}, s.Prom, s.Gateway.Proc, s.Sim.Proc)

	// The standard workload, shortened: 40 requests at 10 req/s against a
	// sim running twice as fast as real time (the same overload in half the
	// time), no warm-up
	// (the report counts every request the gateway saw).
	s.Bench = runBench(t, s.Gateway.URL(), "--workload", "../bench/workloads/mixed-priority.yaml",
		"--requests", "40", "--rate", "10", "--duration", "1m", "--warmup", "0s", "--seed", "3")
	total := 0
	for _, c := range s.Bench.Report.Classes {
		total += c.Requests
	}
	if total != 40 {
		t.Fatalf("bench measured %d requests, want 40\n%s", total, s.Bench.Output)
	}
	proctest.WaitFor(t, "Prometheus to count every request of the run", func() bool {
		v, ok := promQuery(s.PromURL, `sum(llmesh_requests_total{job="llmesh-gateway"})`)
		return ok && v == float64(total)
	}, s.Prom, s.Gateway.Proc, s.Sim.Proc)
	return s
}

// promSeries runs an instant query and returns how many series it gave;
// err is set when Prometheus rejected the query.
func promSeries(base, query string) (int, error) {
	body, err := proctest.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return 0, err
	}
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		return 0, err
	}
	if resp.Status != "success" {
		return 0, fmt.Errorf("%s", resp.Error)
	}
	return len(resp.Data.Result), nil
}

// TestSLOLive runs the standard workload through a gateway scraped by a
// real Prometheus loaded with the generated rules, then checks the
// generated dashboard and `llmesh report slo` against it.
func TestSLOLive(t *testing.T) {
	s := startSLOStack(t)
	t.Run("dashboard", func(t *testing.T) { checkDashboard(t, s) })
	t.Run("report", func(t *testing.T) { checkReport(t, s) })
}

// Loopback delivery between the proxy and the bench on a loaded machine:
// the proxy's TTFT of a request is shorter than the client's by the time
// the request and its first token spend between them, its TPOT differs by
// that over the output tokens. Requests this close to an SLO may be judged
// differently by the two.
const (
	proxyClientTTFT = 50 * time.Millisecond
	proxyClientTPOT = time.Millisecond
)

// checkReport runs `llmesh report slo` over the run and compares it with
// what the bench measured for the same requests: request and failure
// counts equal; SLO-good counts equal except for requests within the
// proxy/client delivery time of an SLO; each TTFT and TPOT percentile in
// the histogram bucket that holds the bench's sample of that rank (the
// histogram's resolution), widened by the same delivery time.
func checkReport(t *testing.T, s *sloStack) {
	dir := t.TempDir()
	jsonPath, mdPath, htmlPath := filepath.Join(dir, "slo.json"), filepath.Join(dir, "slo.md"), filepath.Join(dir, "slo.html")
	args := []string{"report", "slo", "--prometheus", s.PromURL, "--config", s.Mesh, "--window", "30m",
		"--json", jsonPath, "--markdown", mdPath, "--html", htmlPath}
	out, err := exec.Command(llmesh(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("llmesh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("llmesh report slo:\n%s", out)
	f, err := os.Open(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := report.ReadJSON(f) // the bench's reader
	if err != nil {
		t.Fatal(err)
	}
	if rep.Live == nil || rep.Live.Prometheus != s.PromURL {
		t.Fatalf("live section %+v", rep.Live)
	}
	md, _ := os.ReadFile(mdPath)
	for _, want := range []string{"error budget remaining", "worst hours", "| interactive |", "| batch |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("markdown report lacks %q:\n%s", want, md)
		}
	}
	if h, _ := os.ReadFile(htmlPath); !strings.Contains(string(h), "interactive error budget remaining") {
		t.Errorf("HTML report lacks the classes' error budgets")
	}

	byClass := map[string][]result.Record{}
	for _, r := range s.Bench.Records {
		byClass[r.Class] = append(byClass[r.Class], r)
	}
	for name, b := range s.Bench.Report.Classes {
		l := rep.Classes[name]
		if l == nil {
			t.Errorf("class %s missing from the live report", name)
			continue
		}
		if l.Requests != b.Requests || l.Failed != b.Failed {
			t.Errorf("%s: live %d requests, %d failed; bench %d, %d", name, l.Requests, l.Failed, b.Requests, b.Failed)
		}
		ttftSLO, tpotSLO := time.Duration(b.SLOTTFTMs*1e6), time.Duration(b.SLOTPOTMs*1e6)
		near := 0
		var ttfts, tpots []time.Duration
		for _, r := range byClass[name] {
			if d, ok := r.TTFT(); ok && r.Status == result.StatusOK {
				ttfts = append(ttfts, d)
				if (d - ttftSLO).Abs() <= proxyClientTTFT {
					near++
				}
			}
			if d, ok := r.TPOT(); ok && r.Status == result.StatusOK {
				tpots = append(tpots, d)
				if (d - tpotSLO).Abs() <= proxyClientTPOT {
					near++
				}
			}
		}
		liveGood := math.Round(l.SLOAttainment * float64(l.Requests))
		benchGood := math.Round(b.SLOAttainment * float64(b.Requests))
		t.Logf("%s: %d requests, %d failed; SLO met: live %.0f, bench %.0f (%d near an SLO); attainment live %.4f bench %.4f; budget left %v; preemptions %d",
			name, l.Requests, l.Failed, liveGood, benchGood, near, l.SLOAttainment, b.SLOAttainment, deref(l.BudgetRemaining), l.Preemptions)
		if math.Abs(liveGood-benchGood) > float64(near) {
			t.Errorf("%s: %v requests met the SLO at the proxy, %v at the bench; only %d were within the delivery time of an SLO", name, liveGood, benchGood, near)
		}
		for _, m := range []struct {
			what    string
			samples []time.Duration
			live    result.Percentiles
			bounds  []float64
			slack   time.Duration
		}{
			{"TTFT", ttfts, l.TTFTMs, telemetry.BucketsTTFT, proxyClientTTFT},
			{"TPOT", tpots, l.TPOTMs, telemetry.BucketsTPOT, proxyClientTPOT},
		} {
			if m.live.N != len(m.samples) {
				t.Errorf("%s %s: the histogram counted %d, the bench %d", name, m.what, m.live.N, len(m.samples))
				continue
			}
			sort.Slice(m.samples, func(i, j int) bool { return m.samples[i] < m.samples[j] })
			for _, q := range []struct {
				q  float64
				ms float64
			}{{0.5, m.live.P50}, {0.9, m.live.P90}, {0.99, m.live.P99}} {
				// histogram_quantile finds the bucket whose cumulative
				// count first reaches q·n: the one holding sample ⌈q·n⌉.
				k := int(math.Ceil(q.q * float64(len(m.samples))))
				x := m.samples[k-1]
				lo, hi := bucket(m.bounds, q.ms/1000)
				t.Logf("%s %s p%g: live %.2f ms in bucket (%g, %g] s; bench sample %d of %d: %v", name, m.what, 100*q.q, q.ms, lo, hi, k, len(m.samples), x)
				if x.Seconds() < lo-m.slack.Seconds() || x.Seconds() > hi+m.slack.Seconds() {
					t.Errorf("%s %s p%g: bench sample %v outside the live estimate's bucket (%g, %g] s", name, m.what, 100*q.q, x, lo, hi)
				}
			}
		}
	}
}

// bucket returns the histogram bucket (lo, hi] holding v.
func bucket(bounds []float64, v float64) (lo, hi float64) {
	for _, b := range bounds {
		if v <= b {
			return lo, b
		}
		lo = b
	}
	return lo, math.Inf(1)
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkDashboard runs every query of every panel of the generated
// dashboard against Prometheus and requires each to return data.
func checkDashboard(t *testing.T, s *sloStack) {
	raw, err := os.ReadFile(s.Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string          `json:"title"`
			Type    string          `json:"type"`
			GridPos struct{ Y int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	queries := 0
	row := ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title
			continue
		}
		for _, tg := range p.Targets {
			queries++
			var n int
			var qerr error
			// Recording rules run every second; a 5m rate needs two
			// scrapes after the traffic.
			proctest.Until(t, fmt.Sprintf("%s / %s: %s to return data", row, p.Title, tg.Expr), func() (bool, string) {
				n, qerr = promSeries(s.PromURL, tg.Expr)
				if qerr != nil {
					return false, qerr.Error()
				}
				return n > 0, "no series"
			}, s.Prom)
			t.Logf("%s / %s: %s: %d series", row, p.Title, tg.Expr, n)
		}
	}
	if queries < 20 {
		t.Fatalf("only %d dashboard queries", queries)
	}
}
