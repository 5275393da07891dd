package gatewayproc

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/workload"
)

// sloCase is one scripted engine response and the request that asks for it.
type sloCase struct {
	name      string
	maxTokens int           // what the bench asks for
	tokens    int           // what the engine streams
	first     time.Duration // before the first token
	gap       time.Duration // between tokens
	finish    string        // the engine's finish reason
	status    int           // non-200: the engine fails the request
	met       bool          // the one judgement both sides must give
}

var sloCases = []sloCase{
	{name: "fast stream", maxTokens: 8, tokens: 8, first: 5 * time.Millisecond, gap: 2 * time.Millisecond, finish: "length", met: true},
	{name: "one token of 32", maxTokens: 32, tokens: 1, first: 5 * time.Millisecond, finish: "stop"},
	{name: "one token of 1", maxTokens: 1, tokens: 1, first: 5 * time.Millisecond, finish: "length", met: true},
	{name: "no token", maxTokens: 8, tokens: 0, first: 5 * time.Millisecond, finish: "stop"},
	{name: "slow tokens", maxTokens: 6, tokens: 6, first: 5 * time.Millisecond, gap: 80 * time.Millisecond, finish: "length"},
	{name: "late first token", maxTokens: 4, tokens: 4, first: 400 * time.Millisecond, gap: 2 * time.Millisecond, finish: "length"},
	{name: "engine error", maxTokens: 4, status: http.StatusInternalServerError},
}

// scriptedEngine answers the i-th request as sloCases[i] says.
func scriptedEngine(t *testing.T) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i >= len(sloCases) {
			http.Error(w, "unscripted request", http.StatusGone)
			return
		}
		c := sloCases[i]
		if c.status != 0 {
			http.Error(w, "scripted failure", c.status)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		f.Flush()
		time.Sleep(c.first)
		for k := 0; k < c.tokens; k++ {
			if k > 0 {
				time.Sleep(c.gap)
			}
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"t%d\",\"finish_reason\":null}]}\n\n", k)
			f.Flush()
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":%q}],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", c.finish, c.tokens, 16+c.tokens)
		f.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// sloMetRE reads the gateway's request counter by its SLO label.
var sloMetRE = regexp.MustCompile(`(?m)^llmesh_requests_total\{[^}]*llmesh_slo_met="(true|false)"[^}]*\} (\d+)`)

func sloCounts(t *testing.T, admin string) (met, missed int) {
	t.Helper()
	_, body := get(t, admin+"/metrics")
	for _, m := range sloMetRE.FindAllStringSubmatch(body, -1) {
		v, _ := strconv.Atoi(m[2])
		if m[1] == "true" {
			met += v
		} else {
			missed += v
		}
	}
	return met, missed
}

// One SLO judgement: the same responses (a full stream, one token of 32
// asked, one of one, none, slow tokens, a late first token, an engine
// error) driven through the gateway by the bench harness are judged alike,
// request by request, by the bench (its report's attainment) and by the
// gateway (llmesh_requests_total's llmesh_slo_met, what `llmesh report slo`
// reads).
func TestSLOJudgedAlikeByBenchAndGateway(t *testing.T) {
	engine := scriptedEngine(t)
	mesh := fmt.Sprintf(`
listeners:
  - name: in
    address: 127.0.0.1:0
    routes: [{name: all, match: {path_prefix: /v1/}, pool: engine}]
pools:
  - {name: engine, protocol: openai, endpoints: [%s]}
classes:
  - {name: default, priority: 0, slo: {ttft: 200ms, tpot: 20ms}}
default_class: default
telemetry:
  prometheus: {enabled: true}
admin:
  address: 127.0.0.1:0
`, strings.TrimPrefix(engine.URL, "http://"))
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeMesh(t, path, mesh)
	data, admin := startRun(t, Config{ConfigPath: path, Logger: quietLog()})
	for _, c := range sloCases {
		s := harness.QuickSpec(harness.Quick{Protocol: "openai-completions", Model: "m", Rate: 1, Requests: 1,
			PromptTokens: 16, MaxTokens: c.maxTokens, TTFTSLO: 200 * time.Millisecond, TPOTSLO: 20 * time.Millisecond})
		s.MaxScheduleLagP99 = workload.Duration(time.Minute)
		w, err := workload.Compile(s, workload.CompileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		met0, missed0 := sloCounts(t, admin)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rep, _, err := harness.Run(ctx, harness.Options{Workload: w, Target: data})
		cancel()
		if err != nil && rep == nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cl := rep.Classes["default"]
		if cl == nil || cl.Requests != 1 {
			t.Fatalf("%s: bench report %+v", c.name, cl)
		}
		bench := cl.SLOAttainment == 1
		// The gateway records a request when its response ends, just
		// after the client has read it.
		var met, missed int
		scrapes.Until(t, c.name+": the request recorded", func() bool {
			met, missed = sloCounts(t, admin)
			return met+missed > met0+missed0
		})
		if met+missed != met0+missed0+1 {
			t.Fatalf("%s: the gateway recorded %d requests, want 1", c.name, met+missed-met0-missed0)
		}
		gateway := met > met0
		if bench != c.met || gateway != c.met {
			t.Errorf("%s: bench met %v, gateway met %v; want both %v (bench violations %+v)", c.name, bench, gateway, c.met, cl.Violations)
		}
	}
}
