package report

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/workload"
)

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ raw, want float64 }{
		{0.013, 0.02}, {0.1, 0.1}, {0.15, 0.2}, {3, 5}, {7, 10}, {1234, 2000}, {0, 1}, {-2, 1},
	} {
		if got := niceStep(c.raw); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("niceStep(%g) = %g, want %g", c.raw, got, c.want)
		}
	}
}

func TestAxisTicks(t *testing.T) {
	labels := func(a axis) []string {
		var out []string
		for _, v := range a.ticks {
			out = append(out, a.label(v))
		}
		return out
	}
	for _, c := range []struct {
		name           string
		lo, hi         float64
		log, fixedHi   bool
		want           []string
		wantLo, wantHi float64
	}{
		{"fraction", 0, 1, false, true, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}, 0, 1},
		{"ms", 0, 437, false, false, []string{"0", "100", "200", "300", "400", "500"}, 0, 500},
		{"tokens/s", 0, 23500, false, false, []string{"0", "5k", "10k", "15k", "20k", "25k"}, 0, 25000},
		{"log ms", 18, 4200, true, false, []string{"10", "20", "50", "100", "200", "500", "1000", "2000", "5000", "10k"}, 10, 10000},
		{"log many decades", 0.5, 2e6, true, false, []string{"0.1", "1", "10", "100", "1000", "10k", "100k", "1M", "10M"}, 0.1, 1e7},
	} {
		a := newAxis(c.lo, c.hi, c.log, c.fixedHi)
		if diff := cmp.Diff(c.want, labels(a)); diff != "" {
			t.Errorf("%s: ticks (-want +got):\n%s", c.name, diff)
		}
		if math.Abs(a.lo-c.wantLo) > 1e-9 || math.Abs(a.hi-c.wantHi) > 1e-9 {
			t.Errorf("%s: range [%g, %g], want [%g, %g]", c.name, a.lo, a.hi, c.wantLo, c.wantHi)
		}
		if f := a.frac(c.lo); f < 0 || f > 1 {
			t.Errorf("%s: the lowest value maps outside the plot: %g", c.name, f)
		}
	}
}

var polyline = regexp.MustCompile(`<polyline [^>]*points="([^"]*)"`)

func TestChartHTML(t *testing.T) {
	c := Chart{Title: `TTFT <p99> & "x"`, XLabel: "time (s)", YLabel: "ms", Series: []Series{
		{Name: "A: fifo", XY: [][2]float64{{0, 10}, {1, math.NaN()}, {2, 30}, {3, math.Inf(1)}}},
		{Name: "A: fifo", Dash: "9 5", XY: [][2]float64{{0, 5}, {2, 15}}},
		{Name: "empty"},
		{Name: "one point", XY: [][2]float64{{1, 20}}},
	}}
	h := string(c.HTML())
	if strings.Contains(h, "<p99>") || !strings.Contains(h, "TTFT &lt;p99&gt; &amp; &#34;x&#34;") {
		t.Errorf("title not escaped:\n%s", h)
	}
	lines := polyline.FindAllStringSubmatch(h, -1)
	if len(lines) != 2 {
		t.Fatalf("%d polylines, want 2 (the empty series and the single point draw none):\n%s", len(lines), h)
	}
	// NaN and Inf points are left out; the rest map into the plot area,
	// y growing downwards.
	if pts := strings.Fields(lines[0][1]); len(pts) != 2 {
		t.Errorf("first line has points %v, want 2 (NaN and Inf dropped)", pts)
	}
	for _, l := range lines {
		for _, p := range strings.Fields(l[1]) {
			xs, ys, _ := strings.Cut(p, ",")
			x, errX := strconv.ParseFloat(xs, 64)
			y, errY := strconv.ParseFloat(ys, 64)
			if errX != nil || errY != nil || x < padL || x > padL+plotW || y < padT || y > padT+plotH {
				t.Errorf("point %q outside the plot area", p)
			}
		}
	}
	if !strings.Contains(h, `<circle `) {
		t.Error("a single-point series draws no marker")
	}
	if n := strings.Count(h, "</svg> A: fifo</li>"); n != 1 {
		t.Errorf("legend lists %q %d times, want once", "A: fifo", n)
	}
	if strings.Contains(h, "</svg> empty</li>") {
		t.Error("legend lists a series with no points")
	}
	if i, j := strings.Index(h, `<ul class="legend"`), strings.Index(h, "</svg><ul"); i < 0 || j < 0 || j > i {
		t.Error("legend is not after the plot")
	}
	if got := string(Chart{Title: "t", Series: []Series{{Name: "x"}}}.HTML()); !strings.Contains(got, "no data") || strings.Contains(got, "<svg") {
		t.Errorf("a chart without points: %s", got)
	}
}

// TestTimelineMeshQueueAndPreemptions: the timeline carries llmesh's
// queue (from Server-Timing queue times) and preemptions at the end of the
// preempted request, per one-second bucket.
func TestTimelineMeshQueueAndPreemptions(t *testing.T) {
	s, err := workload.Parse([]byte(`
requests: 3
arrival: {process: constant, rate: 100}
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 2}}]`))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec := int64(time.Second)
	rec := func(i int, queue, done int64, pre int) result.Record {
		return result.Record{Index: i, Class: "a", OutputTokens: 2, Status: result.StatusOK,
			FirstTokenNS: done - sec/10, ChunkNS: []int64{done - sec/10, done}, DoneNS: done,
			LLMesh: &result.ServerTimes{QueueNS: queue, HasQueue: true, Preemptions: pre}, Preemptions: pre}
	}
	// Three requests sent at 0: waiting in llmesh for 2.5 s, 2.5 s and
	// 0.5 s; the first preempted twice and ending at 4.2 s.
	rep := stats.Summarize([]result.Record{rec(0, 25*sec/10, 42*sec/10, 2), rec(1, 25*sec/10, 3*sec, 0), rec(2, sec/2, 2*sec, 0)}, stats.Meta{Workload: w})
	var queued, pre []int
	for _, b := range rep.Timeline {
		queued, pre = append(queued, b.MeshQueued), append(pre, b.Preemptions)
	}
	if diff := cmp.Diff([]int{2, 2, 0, 0, 0}, queued); diff != "" {
		t.Errorf("llmesh queue at each bucket's end (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 0, 0, 2}, pre); diff != "" {
		t.Errorf("preemptions per bucket (-want +got):\n%s", diff)
	}
	if rep.TimelineFormat != result.TimelineFormat || !MeshQueueMeasured(rep) || Preempted(rep) != 2 {
		t.Errorf("format %d, mesh queue measured %v, preempted %d", rep.TimelineFormat, MeshQueueMeasured(rep), Preempted(rep))
	}
}

// FuzzChart: any points give a finite drawing (no NaN coordinates, a
// bounded number of ticks) and never hang.
func FuzzChart(f *testing.F) {
	f.Add(0.0, 1.0, 2.0, 3.0, false)
	f.Add(1e16, 1e16+2, 1e16+1, 5.0, false)
	f.Add(1e-300, 1e300, 1.0, -1e300, true)
	f.Add(-5.0, -5.0, -5.0, -5.0, true)
	f.Fuzz(func(t *testing.T, x0, x1, y0, y1 float64, logX bool) {
		h := string(Chart{Title: "t", LogX: logX, Series: []Series{{Name: "s", XY: [][2]float64{{x0, y0}, {x1, y1}}}}}.HTML())
		if strings.Contains(h, "NaN") || strings.Contains(h, "Inf") {
			t.Fatalf("non-finite coordinate:\n%s", h)
		}
		if n := strings.Count(h, "<line "); n > 60 {
			t.Fatalf("%d grid lines", n)
		}
	})
}
