package workload

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/trace"
)

func load(t *testing.T, y string) (*Workload, error) {
	t.Helper()
	s, err := Parse([]byte(y))
	if err != nil {
		return nil, err
	}
	s.Default()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return Compile(s, CompileOptions{BaseDir: "testdata"})
}

const minimal = `
requests: 1000
arrival: {process: poisson, rate: 100}
classes:
  - name: a
    prompt_tokens: {value: 10}
    output_tokens: {value: 5}
`

func TestValidationErrorsNameFields(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`protocol: http3`, `protocol: "http3" must be one of`},
		{`arrival: {process: poisson, rate: -1}`, `arrival.rate: -1 must be in (0, 1000000]`},
		{`arrival: {process: closed}`, `arrival.concurrency: 0 must be in [1, 100000]`},
		{`arrival: {process: trace}`, `arrival.trace: must name`},
		{`arrival: {process: zipf}`, `arrival.process: "zipf" must be one of`},
		{`classes: [{name: a, share: 1, slo: {ttft: -5ms}, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`, `classes[0].slo.ttft: "-5ms" must be positive`},
		{`classes: [{name: a, prompt_tokens: {kind: uniform, min: 10, max: 5}, output_tokens: {value: 1}}]`, `classes[0].prompt_tokens.max: 5 must be ≥ min (10)`},
		{`classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 0, kind: fixed}}]`, `classes[0].output_tokens.value: 0 must be in [1,`},
		{`classes: [{name: a, prompt_tokens: {kind: trace}, output_tokens: {value: 1}}]`, `classes[0].prompt_tokens.kind: "trace" needs arrival.process trace`},
		{`classes: [{name: a, prompt_tokens: {kind: lognormal, median: 0}, output_tokens: {value: 1}}]`, `classes[0].prompt_tokens.median: 0 must be in [1,`},
		{`classes: [{name: a, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}, {name: a, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`, `classes[1].name: "a" duplicates classes[0].name`},
		{`classes: [{name: a, share: 0, prompt_tokens: {value: 1}, output_tokens: {value: 1}}, {name: b, share: 0, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`, `at least one class needs a positive share`},
		{`classes: [{name: a, attainment_target: 2, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`, `classes[0].attainment_target: 2 must be in (0, 1]`},
		{`classes: [{name: a, headers: {"bad name": x}, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`, `classes[0].headers: "bad name" is not a valid header name`},
		{`classes: []`, `classes: at least one class is needed`},
		{`duration: soon`, `"soon" is not a duration`},
		{`colour: blue`, `colour: unknown field (known: arrival, classes,`},
		{`classes: [{name: a, shar: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`, `classes[0].shar: unknown field (did you mean "share"?) (line 1)`},
		{`arrival: {rate: fast}`, `arrival.rate: must be a number, got "fast"`},
		{`timeout: 5`, `timeout: "5" is not a duration like "250ms" (line 1)`},
	} {
		y := tc.yaml
		if !strings.Contains(y, "requests:") && !strings.Contains(y, "duration:") {
			y += "\nrequests: 10"
		}
		if !strings.Contains(y, "arrival:") {
			y += "\narrival: {rate: 1}"
		}
		if !strings.Contains(y, "classes:") {
			y += "\nclasses: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]"
		}
		_, err := load(t, y)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\n  got  %v\n  want error containing %q", tc.yaml, err, tc.want)
		}
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	_, err := load(t, `protocol: x
arrival: {process: poisson, rate: 0}
classes: [{name: "", prompt_tokens: {kind: nope}, output_tokens: {}}]`)
	if err == nil {
		t.Fatal("want errors")
	}
	for _, w := range []string{"protocol:", "duration, requests", "arrival.rate", "classes[0].name", "classes[0].prompt_tokens.kind", "classes[0].output_tokens.kind"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

func items(w *Workload) []Item {
	var out []Item
	src := w.Source()
	for {
		it, ok := src.Next()
		if !ok || len(out) > 1_000_000 {
			return out
		}
		out = append(out, it)
	}
}

func TestSourceDeterministic(t *testing.T) {
	w, err := load(t, minimal)
	if err != nil {
		t.Fatal(err)
	}
	a, b := items(w), items(w)
	if len(a) != 1000 {
		t.Fatalf("got %d items, want 1000", len(a))
	}
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("two sources differ (-first +second)\n%s", d)
	}
}

func TestArrivalRates(t *testing.T) {
	for _, tc := range []struct {
		arrival string
		cvLo    float64
		cvHi    float64
	}{
		{"{process: constant, rate: 50}", 0, 1e-6},
		{"{process: poisson, rate: 50}", 0.9, 1.1},
		{"{process: gamma, rate: 50, burstiness: 0.25}", 1.8, 2.2}, // cv = 1/sqrt(k)
		{"{process: gamma, rate: 50, burstiness: 4}", 0.45, 0.55},
	} {
		w, err := load(t, strings.Replace(minimal, "{process: poisson, rate: 100}", tc.arrival, 1)+"\nseed: 7\n")
		if err != nil {
			t.Fatal(err)
		}
		w.Spec.Requests = 20000
		its := items(w)
		var gaps []float64
		for i := 1; i < len(its); i++ {
			gaps = append(gaps, (its[i].At - its[i-1].At).Seconds())
		}
		mean, sd := meanSD(gaps)
		if math.Abs(mean-0.02) > 0.001 {
			t.Errorf("%s: mean gap %.4fs, want 0.02s", tc.arrival, mean)
		}
		if cv := sd / mean; cv < tc.cvLo || cv > tc.cvHi {
			t.Errorf("%s: coefficient of variation %.3f, want [%g, %g]", tc.arrival, cv, tc.cvLo, tc.cvHi)
		}
	}
}

func meanSD(xs []float64) (float64, float64) {
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)))
}

func TestDurationAndWarmup(t *testing.T) {
	w, err := load(t, `
duration: 10s
warmup: {duration: 2s, requests: 5}
arrival: {process: constant, rate: 10}
classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`)
	if err != nil {
		t.Fatal(err)
	}
	its := items(w)
	var warm, measured int
	for _, it := range its {
		if it.Warmup {
			warm++
			if it.At >= 2*time.Second && it.Index >= 5 {
				t.Errorf("item %d at %v marked warm-up", it.Index, it.At)
			}
		} else {
			measured++
		}
	}
	if warm != 20 || measured != 100 {
		t.Errorf("warm-up %d, measured %d; want 20 and 100", warm, measured)
	}
}

func TestClassSharesAndLengths(t *testing.T) {
	w, err := load(t, `
requests: 20000
arrival: {rate: 10}
classes:
  - {name: hi, share: 1, prompt_tokens: {kind: uniform, min: 5, max: 9}, output_tokens: {kind: lognormal, median: 100, sigma: 0.5, max: 300}}
  - {name: lo, share: 3, prompt_tokens: {kind: empirical, trace: small.csv}, output_tokens: {kind: empirical, trace: small.csv, min: 2}}`)
	if err != nil {
		t.Fatal(err)
	}
	counts := [2]int{}
	var outs []float64
	for _, it := range items(w) {
		counts[it.Class]++
		if it.Class == 0 {
			if it.PromptTokens < 5 || it.PromptTokens > 9 || it.MaxTokens < 1 || it.MaxTokens > 300 {
				t.Fatalf("hi item out of bounds: %+v", it)
			}
			outs = append(outs, math.Log(float64(it.MaxTokens)))
		} else if it.MaxTokens < 2 || (it.PromptTokens != 374 && it.PromptTokens != 396 && it.PromptTokens != 879 && it.PromptTokens != 91) {
			t.Fatalf("lo item not from trace: %+v", it)
		}
	}
	if f := float64(counts[0]) / 20000; math.Abs(f-0.25) > 0.015 {
		t.Errorf("share of hi = %.3f, want 0.25", f)
	}
	m, _ := meanSD(outs)
	if med := math.Exp(m); med < 95 || med > 105 {
		t.Errorf("lognormal geometric mean %.1f, want ~100", med)
	}
}

func TestTraceReplayAndScale(t *testing.T) {
	w, err := load(t, `
arrival: {process: trace, trace: small.csv, time_scale: 0.5}
classes: [{name: a, prompt_tokens: {kind: trace}, output_tokens: {kind: trace}}]`)
	if err != nil {
		t.Fatal(err)
	}
	its := items(w)
	if len(its) != 4 {
		t.Fatalf("%d items, want 4", len(its))
	}
	if its[0].At != 0 || its[0].PromptTokens != 374 || its[0].MaxTokens != 44 {
		t.Errorf("first item %+v", its[0])
	}
	want := time.Duration(float64(4314579000) * 0.5)
	if its[1].At != want {
		t.Errorf("second item at %v, want %v", its[1].At, want)
	}
	fast := items(w.ScaleRate(2))
	if fast[1].At != want/2 {
		t.Errorf("ScaleRate(2): second item at %v, want %v", fast[1].At, want/2)
	}
}

func TestClosedLoop(t *testing.T) {
	w, err := load(t, `
requests: 7
arrival: {process: closed, concurrency: 3}
classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}}]`)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Closed() || len(items(w)) != 7 || w.ScaleRate(2).Spec.Arrival.Concurrency != 6 {
		t.Errorf("closed loop: closed=%v items=%d", w.Closed(), len(items(w)))
	}
}

func TestStandardWorkloads(t *testing.T) {
	files, _ := filepath.Glob("../workloads/*.yaml")
	if len(files) == 0 {
		t.Fatal("no workloads in bench/workloads")
	}
	for _, f := range files {
		w, err := LoadFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if n := len(items(w)); n == 0 {
			t.Errorf("%s: no items", f)
		}
	}
	w, err := LoadFile("../workloads/mixed-priority.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{w.Classes[0].Name, w.Classes[1].Name}; !cmp.Equal(got, []string{"interactive", "batch"}) || w.Classes[0].Priority >= w.Classes[1].Priority {
		t.Errorf("mixed-priority classes %v priorities %d, %d", got, w.Classes[0].Priority, w.Classes[1].Priority)
	}
}

func TestLoadFileErrorsNameFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(p, []byte("requests: 1\narrival: {process: trace, trace: missing.csv}\nclasses: [{name: a, prompt_tokens: {kind: trace}, output_tokens: {kind: trace}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(p)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml: arrival.trace:") || !strings.Contains(err.Error(), "missing.csv") {
		t.Errorf("err = %v", err)
	}
}

func FuzzWorkload(f *testing.F) {
	f.Add([]byte(minimal))
	if b, err := os.ReadFile("../workloads/mixed-priority.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("duration: 1s\narrival: {process: gamma, rate: 1e6, burstiness: 0.001}\nclasses: [{name: a, prompt_tokens: {kind: lognormal, median: 1e7, sigma: 10}, output_tokens: {kind: uniform, min: 1, max: 10000000}}]"))
	f.Add([]byte("requests: 3\narrival: {process: closed, concurrency: 2}\nclasses: [{name: a, prompt_tokens: {kind: empirical, trace: small.csv}, output_tokens: {value: 1}}]"))
	f.Add([]byte("arrival: {process: trace, trace: small.csv}\nclasses: [{name: a}]"))
	f.Add([]byte(minimal + "primary: a=ttft_p99_ms\n"))
	f.Add([]byte(minimal + "primary: [a=goodput_rps, a=nosuch, =, b=slo_attainment]\n"))
	f.Add([]byte(minimal + "primary: {a: [1]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		s.Default()
		if s.Validate() != nil {
			return
		}
		for c, m := range s.Primary() {
			if !slices.ContainsFunc(s.Classes, func(k ClassSpec) bool { return k.Name == c }) {
				t.Fatalf("valid primary names class %q, not one of the workload's", c)
			}
			if _, _, err := ParsePrimary(c + "=" + m); err != nil {
				t.Fatalf("valid primary %s=%s: %v", c, m, err)
			}
		}
		w, err := Compile(s, CompileOptions{BaseDir: "testdata"})
		if err != nil {
			return
		}
		src := w.Source()
		var last time.Duration
		for i := 0; i < 200; i++ {
			it, ok := src.Next()
			if !ok {
				break
			}
			if it.At < last || it.PromptTokens < 0 || it.MaxTokens < 1 || it.MaxTokens > MaxLength || it.Class < 0 || it.Class >= len(w.Classes) {
				t.Fatalf("bad item %+v (previous at %v)", it, last)
			}
			last = it.At
		}
	})
}

func TestWithTrace(t *testing.T) {
	w, err := load(t, `
requests: 1000
arrival: {rate: 10}
classes:
  - {name: hi, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}
  - {name: lo, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}`)
	if err != nil {
		t.Fatal(err)
	}
	rows := []trace.Row{{At: 0, PromptTokens: 10, OutputTokens: 0}, {At: time.Second, PromptTokens: 20, OutputTokens: 5}, {At: 3 * time.Second, PromptTokens: 30, OutputTokens: 6}}
	its := items(w.WithTrace(rows))
	if len(its) != 3 {
		t.Fatalf("%d items, want 3", len(its))
	}
	want := []Item{{Index: 0, At: 0, PromptTokens: 10, MaxTokens: 1}, {Index: 1, At: time.Second, PromptTokens: 20, MaxTokens: 5}, {Index: 2, At: 3 * time.Second, PromptTokens: 30, MaxTokens: 6}}
	for i := range its {
		its[i].Class = 0
	}
	if d := cmp.Diff(want, its); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
	if items(w)[0].PromptTokens != 1 {
		t.Error("WithTrace changed the original workload")
	}
}

func TestWithMooncakeCarriesHashIDs(t *testing.T) {
	w, err := load(t, `
requests: 10
arrival: {rate: 10}
classes:
  - {name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}}`)
	if err != nil {
		t.Fatal(err)
	}
	rows := []trace.MooncakeRow{
		{Row: trace.Row{At: 0, PromptTokens: 600, OutputTokens: 3}, HashIDs: []uint64{1, 2}},
		{Row: trace.Row{At: time.Second, PromptTokens: 100, OutputTokens: 4}, HashIDs: []uint64{1}},
	}
	its := items(w.WithMooncake(rows))
	if len(its) != 2 {
		t.Fatalf("%d items, want 2", len(its))
	}
	if d := cmp.Diff([]trace.Segment{{ID: 1, Tokens: 512}, {ID: 2, Tokens: 88}}, its[0].Segments); d != "" {
		t.Errorf("item 0 segments (-want +got)\n%s", d)
	}
	if its[1].PromptTokens != 100 || its[1].MaxTokens != 4 || len(its[1].Segments) != 1 {
		t.Errorf("item 1 = %+v", its[1])
	}
	if items(w)[0].Segments != nil {
		t.Error("WithMooncake changed the original workload")
	}
}
