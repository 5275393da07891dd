package ab

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// gatewayArm makes runs through a gateway as the harness records them:
// llmesh's Server-Timing queue time on every response, and, when preempt
// is set, a preemption on every tenth batch request. slowMs is added to
// the interactive class's TTFT (the arm that queues urgent work behind
// batch work).
func gatewayArm(slowMs int, preempt bool) func(context.Context, harness.Options) (*result.Report, []result.Record, error) {
	return func(_ context.Context, o harness.Options) (*result.Report, []result.Record, error) {
		var recs []result.Record
		src := o.Workload.Source()
		for {
			it, ok := src.Next()
			if !ok {
				break
			}
			class := o.Workload.Classes[it.Class].Name
			at := int64(it.At)
			ms := 20 + (it.Index*37)%120
			if class == "interactive" {
				ms += slowMs
			}
			ttft := int64(ms) * int64(time.Millisecond)
			queue := ttft / 2
			r := result.Record{Index: it.Index, Class: class, PromptTokens: it.PromptTokens, MaxTokens: it.MaxTokens,
				IntendedNS: at, SentNS: at, FirstTokenNS: at + ttft, OutputTokens: 8, Status: result.StatusOK,
				LLMesh: &result.ServerTimes{QueueNS: queue, HasQueue: true}}
			if preempt && class == "batch" && it.Index%10 == 0 {
				r.LLMesh.Preemptions, r.Preemptions = 1, 1
			}
			for k := int64(0); k < 8; k++ {
				r.ChunkNS = append(r.ChunkNS, r.FirstTokenNS+k*int64(20*time.Millisecond))
			}
			r.DoneNS = r.ChunkNS[7]
			recs = append(recs, r)
		}
		rep := stats.Summarize(recs, stats.Meta{Workload: o.Workload, Target: o.Target, Policy: o.Policy,
			Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
		return rep, recs, nil
	}
}

func abSample(t *testing.T) *Result {
	t.Helper()
	w := compile(t, `
name: golden-ab
requests: 240
arrival: {process: poisson, rate: 40}
classes:
  - {name: interactive, priority: 0, share: 0.25, slo: {ttft: 150ms}, prompt_tokens: {value: 64}, output_tokens: {value: 8}}
  - {name: batch, priority: 10, share: 0.75, slo: {ttft: 2s}, prompt_tokens: {value: 512}, output_tokens: {value: 8}}`)
	run := func(ctx context.Context, o harness.Options) (*result.Report, []result.Record, error) {
		if o.Target == "fifo" {
			return gatewayArm(150, false)(ctx, o)
		}
		return gatewayArm(0, true)(ctx, o)
	}
	res, err := Compare(context.Background(), Options{Workload: w, A: URL{Endpoint: "fifo"}, B: URL{Endpoint: "preemptive"},
		Repeats: 2, Resamples: 200, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var chartTitle = regexp.MustCompile(`<figure class="chart"[^>]*><figcaption[^>]*>([^<]*)</figcaption>`)

// The A/B page overlays both arms' runs in the charts the verdict rests
// on, most urgent class first, and says where the queue depth came from.
func TestHTMLCharts(t *testing.T) {
	res := abSample(t)
	var buf bytes.Buffer
	if err := HTML(&buf, res); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	top := page[:strings.Index(page, "<h2>Reports of every run</h2>")]
	var titles []string
	for _, m := range chartTitle.FindAllStringSubmatch(top, -1) {
		titles = append(titles, m[1])
	}
	want := []string{
		"TTFT CDF: interactive", "TTFT CDF: batch",
		"P99 TTFT over time: interactive (requests finishing in each bucket)",
		"P99 TTFT over time: batch (requests finishing in each bucket)",
		"Throughput over time",
		"Queue depth in llmesh over time (from Server-Timing queue times)",
		"Preemptions over time (counted when the preempted request ends)",
	}
	if diff := cmp.Diff(want, titles); diff != "" {
		t.Errorf("A/B chart titles (-want +got):\n%s", diff)
	}
	for _, legend := range []string{"A: fifo, pair 1", "A: fifo, pair 2", "B: preemptive, pair 1", "B: preemptive, pair 2"} {
		if n := strings.Count(top, "</svg> "+legend+"</li>"); n != len(want) {
			t.Errorf("legend %q in %d charts, want %d", legend, n, len(want))
		}
	}
	// The timeline carries what the charts draw: arm B's preemptions (one
	// per tenth batch request) and llmesh's queue in both arms.
	for _, r := range res.Runs {
		want := 0
		if r.Arm == "B" {
			want = r.Report.Classes["batch"].Preemptions
		}
		if got := report.Preempted(r.Report); got != want || (r.Arm == "B" && got == 0) {
			t.Errorf("run %s/%d: %d preemptions on the timeline, want %d", r.Arm, r.Repeat, got, want)
		}
		queued := 0
		for _, b := range r.Report.Timeline {
			queued = max(queued, b.MeshQueued)
		}
		if queued == 0 {
			t.Errorf("run %s/%d: llmesh's queue is empty on the whole timeline", r.Arm, r.Repeat)
		}
	}

	path := filepath.Join("testdata", "ab.html.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if diff := cmp.Diff(string(golden), page); diff != "" {
		t.Errorf("A/B page differs from %s (-want +got):\n%s", path, diff)
	}
	for _, bad := range []string{"http://", "https://", "src=\"", "<script", "<link"} {
		if i := strings.Index(strings.ReplaceAll(top, `xmlns="http://www.w3.org/2000/svg"`, ""), bad); i >= 0 {
			t.Errorf("A/B page references an external resource or runs script: %q", bad)
		}
	}
}

// A result saved before timelines carried per-class P99s, llmesh's queue
// and preemptions shows what it has, not zeros that look measured.
func TestHTMLChartsOldTimeline(t *testing.T) {
	res := abSample(t)
	for _, r := range res.Runs {
		r.Report.TimelineFormat = 0
	}
	var buf bytes.Buffer
	if err := HTML(&buf, res); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	page = page[:strings.Index(page, "<h2>Reports of every run</h2>")]
	for _, want := range []string{"P99 TTFT over time (all classes", "Waiting for a first token over time (all classes)"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks chart %q", want)
		}
	}
	for _, bad := range []string{"Preemptions over time", "Queue depth in llmesh", "P99 TTFT over time: interactive"} {
		if strings.Contains(page, bad) {
			t.Errorf("page draws %q from a timeline that does not carry it", bad)
		}
	}
}

// Runs through a target without llmesh's Server-Timing: no preemption
// chart of zeros, but a line saying why and how to get one.
func TestHTMLChartsWithoutServerTiming(t *testing.T) {
	res := abSample(t)
	for _, r := range res.Runs {
		for _, c := range r.Report.Classes {
			c.QueueMs = nil
		}
	}
	var buf bytes.Buffer
	if err := HTML(&buf, res); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	page = page[:strings.Index(page, "<h2>Reports of every run</h2>")]
	if strings.Contains(page, "Preemptions over time") || strings.Contains(page, "Queue depth in llmesh") {
		t.Error("preemption or llmesh queue chart without Server-Timing")
	}
	for _, want := range []string{"Waiting for a first token over time", "telemetry.server_timing: true", "P99 TTFT over time: interactive"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
