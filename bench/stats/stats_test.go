package stats

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

func testWorkload(t *testing.T) *workload.Workload {
	t.Helper()
	s, err := workload.Parse([]byte(`
requests: 100
arrival: {process: constant, rate: 10}
classes:
  - {name: hi, priority: 0, share: 1, slo: {ttft: 100ms, tpot: 10ms}, attainment_target: 0.5, prompt_tokens: {value: 10}, output_tokens: {value: 11}}
  - {name: lo, priority: 5, share: 1, slo: {ttft: 1s}, prompt_tokens: {value: 10}, output_tokens: {value: 11}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

const msNS = int64(time.Millisecond)

// rec makes an OK record sent at sent ms with the given TTFT and a chunk
// every gap ms for 11 tokens.
func rec(i int, class string, sent, ttft, gap int64) result.Record {
	r := result.Record{Index: i, Class: class, IntendedNS: sent * msNS, SentNS: sent * msNS, PromptTokens: 10, MaxTokens: 11, OutputTokens: 11, Status: result.StatusOK}
	t := (sent + ttft) * msNS
	r.FirstTokenNS = t
	for k := 0; k < 11; k++ {
		r.ChunkNS = append(r.ChunkNS, t)
		t += gap * msNS
	}
	r.DoneNS = r.ChunkNS[10]
	return r
}

func TestSummarize(t *testing.T) {
	w := testWorkload(t)
	recs := []result.Record{
		{Index: 0, Class: "hi", Warmup: true, Status: result.StatusOK, SentNS: 0, DoneNS: 1},
		rec(1, "hi", 100, 50, 5),   // meets
		rec(2, "hi", 200, 150, 5),  // ttft miss
		rec(3, "hi", 300, 50, 20),  // tpot miss
		rec(4, "lo", 400, 900, 50), // meets (no tpot slo)
		{Index: 5, Class: "lo", IntendedNS: 500 * msNS, SentNS: 500 * msNS, DoneNS: 510 * msNS, Status: result.StatusRejected, Code: 429},
		{Index: 6, Class: "lo", IntendedNS: 600 * msNS, SentNS: 600 * msNS, DoneNS: 610 * msNS, Status: result.StatusPreempted, Code: 503},
		{Index: 7, Class: "hi", IntendedNS: 700 * msNS, SentNS: 700 * msNS, DoneNS: 1900 * msNS, Status: result.StatusDropped},
	}
	rep := Summarize(recs, Meta{Workload: w})
	if rep.Warmup != 1 || rep.NumPrompts != 7 || rep.Completed != 4 || rep.Failed != 3 {
		t.Fatalf("warmup %d prompts %d completed %d failed %d", rep.Warmup, rep.NumPrompts, rep.Completed, rep.Failed)
	}
	hi, lo := rep.Classes["hi"], rep.Classes["lo"]
	if hi.Requests != 4 || hi.Violations != (result.Violations{TTFT: 1, TPOT: 1, Error: 1}) {
		t.Errorf("hi: requests %d violations %+v", hi.Requests, hi.Violations)
	}
	if lo.Violations != (result.Violations{Rejected: 1, Preempted: 1}) {
		t.Errorf("lo violations %+v", lo.Violations)
	}
	if hi.SLOAttainment != 0.25 || lo.SLOAttainment != 1.0/3 || hi.MeetsTarget {
		t.Errorf("attainment hi %v lo %v meets %v", hi.SLOAttainment, lo.SLOAttainment, hi.MeetsTarget)
	}
	// The measured window runs from the first send (100 ms) to the last end
	// (1900 ms): 1.8 s.
	if math.Abs(rep.Duration-1.8) > 1e-9 {
		t.Errorf("duration %v", rep.Duration)
	}
	if got := hi.GoodputRPS; math.Abs(got-1/1.8) > 1e-9 {
		t.Errorf("hi goodput %v", got)
	}
	if got := rep.Overall.SLOAttainment; math.Abs(got-2.0/7) > 1e-9 {
		t.Errorf("overall attainment %v, want 2/7", got)
	}
	if hi.TTFTMs.N != 3 || math.Abs(hi.TTFTMs.P50-50) > 0.1 || math.Abs(hi.TTFTMs.Max-150) > 0.1 {
		t.Errorf("hi ttft %+v", hi.TTFTMs)
	}
	// TPOT = (E2E − TTFT)/(tokens − 1) = gap.
	if math.Abs(lo.TPOTMs.P50-50) > 0.1 || math.Abs(hi.ITLMs.P99-20) > 0.1 || hi.ITLMs.N != 30 {
		t.Errorf("lo tpot %+v, hi itl %+v", lo.TPOTMs, hi.ITLMs)
	}
	if rep.TotalOutputTokens != 44 || rep.MaxConcurrentRequests != 3 {
		t.Errorf("output tokens %d, max concurrency %d", rep.TotalOutputTokens, rep.MaxConcurrentRequests)
	}
	if !rep.Valid || rep.ScheduleLagMs.P99 != 0 {
		t.Errorf("valid %v lag %+v %v", rep.Valid, rep.ScheduleLagMs, rep.InvalidReasons)
	}
	if rep.MedianTTFTMs != rep.Overall.TTFTMs.P50 || rep.P999E2ELMs != rep.Overall.E2EMs.P999 {
		t.Errorf("vLLM fields not filled from overall")
	}
}

func TestScheduleLagInvalidates(t *testing.T) {
	w := testWorkload(t)
	var recs []result.Record
	for i := 0; i < 100; i++ {
		r := rec(i, "hi", int64(i)*10, 10, 1)
		if i%10 == 0 {
			r.IntendedNS -= 5 * msNS // sent 5 ms late
		}
		recs = append(recs, r)
	}
	rep := Summarize(recs, Meta{Workload: w})
	if rep.Valid || len(rep.InvalidReasons) != 1 || math.Abs(rep.ScheduleLagMs.P99-5) > 0.01 {
		t.Errorf("valid %v reasons %v lag %+v", rep.Valid, rep.InvalidReasons, rep.ScheduleLagMs)
	}
}

func TestEarlyStopping(t *testing.T) {
	if got := minSamples(0.99); got != 459 {
		t.Errorf("minSamples(0.99) = %d, want 459", got)
	}
	if got := minSamples(0.9); got != 44 {
		t.Errorf("minSamples(0.9) = %d, want 44", got)
	}
	if got := maxOverLatency(458, 0.99); got != -1 {
		t.Errorf("maxOverLatency(458) = %d, want -1", got)
	}
	if got := maxOverLatency(459, 0.99); got != 0 {
		t.Errorf("maxOverLatency(459) = %d, want 0", got)
	}
	// Large n: the allowed count approaches n(1−p) from below.
	got := maxOverLatency(100000, 0.99)
	if got < 900 || got >= 1000 {
		t.Errorf("maxOverLatency(100000, 0.99) = %d, want in [900, 1000)", got)
	}
	m := newMetric()
	for i := 1; i <= 1000; i++ {
		m.add(time.Duration(i) * time.Millisecond)
	}
	es := earlyStop("ttft", 0.99, m)
	if !es.Valid || es.BoundMs < m.q(99) || es.BoundMs > 1000.5 {
		t.Errorf("early stop %+v, p99 %v", es, m.q(99))
	}
	small := newMetric()
	small.add(time.Millisecond)
	if es := earlyStop("ttft", 0.99, small); es.Valid {
		t.Errorf("one sample supports p99: %+v", es)
	}
}

func TestEngineAgreement(t *testing.T) {
	w := testWorkload(t)
	r := rec(1, "hi", 100, 50, 5)
	r.Engine = &result.EngineTimes{ArrivalNS: 1_000_000_000, FirstTokenNS: 1_000_000_000 + 48*msNS}
	rep := Summarize([]result.Record{r}, Meta{Workload: w})
	if rep.Engine == nil || rep.Engine.N != 1 || math.Abs(rep.Engine.DeltaMs.P50-2) > 0.01 {
		t.Errorf("engine agreement %+v", rep.Engine)
	}
}

// TestRatesShareTheRunWindow: two requests sent 100ms apart, both meeting
// their SLO. Every per-second figure but offered divides by the run window
// (first send → last end), so goodput (2 met) can never exceed achieved;
// over the send window achieved was 1 gap / 100ms = 10 req/s against a
// goodput of 2 / 250ms = 8. The window is never shorter than the schedule
// needs for its 2 arrivals (2 / 10 req/s = 200ms): with the end right
// after the last send (151ms) the rates were 13.2 req/s, above the 10
// offered.
func TestRatesShareTheRunWindow(t *testing.T) {
	w := testWorkload(t)
	for _, tc := range []struct {
		name string
		ttft int64
	}{{"tail after the last send", 100}, {"end right after the last send", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			recs := []result.Record{rec(0, "lo", 0, tc.ttft, 5), rec(1, "lo", 100, tc.ttft, 5)}
			rep := Summarize(recs, Meta{Workload: w})
			dur := float64(100+tc.ttft+50) / 1000
			if math.Abs(rep.Duration-dur) > 1e-9 {
				t.Fatalf("duration %v, want %v", rep.Duration, dur)
			}
			if want := 2 / max(dur, 0.2); math.Abs(rep.AchievedRPS-want) > 1e-9 || math.Abs(rep.RequestGoodput-want) > 1e-9 || math.Abs(rep.RequestThroughput-want) > 1e-9 {
				t.Errorf("achieved %v, throughput %v, goodput %v; want all %v", rep.AchievedRPS, rep.RequestThroughput, rep.RequestGoodput, want)
			}
			if rep.RequestGoodput > rep.RequestThroughput || rep.RequestThroughput > rep.AchievedRPS || rep.AchievedRPS > rep.OfferedRPS {
				t.Errorf("goodput %v ≤ throughput %v ≤ achieved %v ≤ offered %v does not hold", rep.RequestGoodput, rep.RequestThroughput, rep.AchievedRPS, rep.OfferedRPS)
			}
			if math.Abs(rep.OfferedRPS-10) > 1e-9 {
				t.Errorf("offered %v, want the schedule's 10 req/s", rep.OfferedRPS)
			}
		})
	}
}

// A dead port: 20 requests at 10 req/s, each failing 1ms after it was
// sent. Nothing was achieved (failures are not achievements; achieved
// once came out at 10.5 req/s, above the 10 offered), and the run says
// why it is invalid.
func TestDeadTargetAchievesNothing(t *testing.T) {
	w := testWorkload(t)
	var recs []result.Record
	for i := range 20 {
		sent := int64(i) * 100 * msNS
		recs = append(recs, result.Record{Index: i, Class: "lo", IntendedNS: sent, SentNS: sent, DoneNS: sent + msNS,
			Status: result.StatusUnreachable, Error: "dial tcp 127.0.0.1:1: connect: connection refused"})
	}
	recs[3].Status, recs[3].Code, recs[3].Error = result.StatusError, 502, "HTTP 502: bad gateway"
	rep := Summarize(recs, Meta{Workload: w})
	if math.Abs(rep.OfferedRPS-10) > 1e-9 || rep.AchievedRPS != 0 || rep.RequestThroughput != 0 {
		t.Errorf("offered %v, achieved %v, throughput %v; want 10, 0, 0", rep.OfferedRPS, rep.AchievedRPS, rep.RequestThroughput)
	}
	want := []string{"no request completed: 1 error, 19 unreachable; first error: dial tcp 127.0.0.1:1: connect: connection refused"}
	if rep.Valid || !slices.Equal(rep.InvalidReasons, want) {
		t.Errorf("valid %v, reasons %q; want %q", rep.Valid, rep.InvalidReasons, want)
	}
	// The same requests all completing: achieved stays at or below offered
	// although the last one ended 1ms after it was sent.
	for i := range recs {
		recs[i].Status, recs[i].Error, recs[i].OutputTokens = result.StatusOK, "", 1
		recs[i].FirstTokenNS, recs[i].ChunkNS = recs[i].DoneNS, []int64{recs[i].DoneNS}
	}
	rep = Summarize(recs, Meta{Workload: w})
	if rep.AchievedRPS > rep.OfferedRPS || math.Abs(rep.AchievedRPS-10) > 1e-9 {
		t.Errorf("achieved %v, offered %v: want achieved = offered = 10", rep.AchievedRPS, rep.OfferedRPS)
	}
}
