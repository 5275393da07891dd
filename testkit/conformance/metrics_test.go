package conformance

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/telemetry"
)

// metricRows is the traffic both hosts get for the metrics comparison:
// streamed and whole answers, both gRPC APIs, an upstream error, a
// refusal, a queue-full and a preemption (llmesh.preemptions).
var metricRows = []string{
	"completions SSE with usage", "chat JSON", "llm.v1 Generate", "vLLM Generate", "upstream 500",
	"relocation: header over max", "queue full", "preempted mid-stream",
}

// TestHostConformanceMetricNames sends the same traffic through both
// hosts, each recording into its own telemetry provider through the one
// host recorder (telemetry.HostRecorder), scrapes each provider's
// Prometheus endpoint and compares the metric names with their label
// names.
func TestHostConformanceMetricNames(t *testing.T) {
	sim := simtest.Start(t)
	up := upstreams{http: sim.HTTPURL, grpc: "http://" + sim.GRPCAddr}
	scrape := map[string]func() string{}
	var hosts []host
	for _, name := range []string{"gateway", "envoy"} {
		p, err := telemetry.New(context.Background(), telemetry.Options{Prometheus: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		rec := telemetry.HostRecorder{R: p.Recorder}
		srv := httptest.NewServer(p.PrometheusHandler())
		t.Cleanup(srv.Close)
		scrape[name] = func() string {
			res, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return string(b)
		}
		if name == "gateway" {
			hosts = append(hosts, startGateway(t, up, rec))
		} else {
			hosts = append(hosts, startEnvoy(t, up, []exchange.Recorder{rec}...))
		}
	}
	for _, name := range metricRows {
		tc := row(t, name)
		for _, h := range hosts {
			h.recs().drain()
			h.adm().drain()
			_, n := runScenario(t, h, tc, sim.Model)
			h.recs().take(n)
		}
	}
	gw, ev := series(scrape["gateway"]()), series(scrape["envoy"]())
	if len(gw) == 0 {
		t.Fatal("the gateway's scrape has no llmesh series")
	}
	for _, want := range []string{"llmesh_preemptions_total", "gen_ai_server_time_to_first_token_seconds_bucket"} {
		found := false
		for s := range gw {
			found = found || strings.HasPrefix(s, want+"{")
		}
		if !found {
			t.Errorf("the gateway's scrape lacks %s", want)
		}
	}
	for s := range gw {
		if !ev[s] {
			t.Errorf("only the gateway exports %s", s)
		}
	}
	for s := range ev {
		if !gw[s] {
			t.Errorf("only the Envoy host exports %s", s)
		}
	}
	if t.Failed() {
		t.Logf("gateway:\n%s\nenvoy:\n%s", strings.Join(sorted(gw), "\n"), strings.Join(sorted(ev), "\n"))
	}
}

func row(t *testing.T, name string) tcase {
	t.Helper()
	for _, tc := range table {
		if tc.name == name {
			return tc
		}
	}
	t.Fatalf("no row %q", name)
	return tcase{}
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
	labelName  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

// series lists a Prometheus scrape's llmesh and GenAI series as
// "name{label names}", each once, without the labels' values.
func series(text string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		m := sampleLine.FindStringSubmatch(l)
		if m == nil || !(strings.HasPrefix(m[1], "llmesh_") || strings.HasPrefix(m[1], "gen_ai_")) {
			continue
		}
		var names []string
		for _, lm := range labelName.FindAllStringSubmatch(m[3], -1) {
			if lm[1] != "le" && !strings.HasPrefix(lm[1], "otel_scope_") {
				names = append(names, lm[1])
			}
		}
		sort.Strings(names)
		out[m[1]+"{"+strings.Join(names, ",")+"}"] = true
	}
	return out
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
