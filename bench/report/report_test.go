package report

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/workload"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// sample builds a deterministic two-class report from synthetic records.
func sample(t *testing.T) *result.Report {
	t.Helper()
	s, err := workload.Parse([]byte(`
name: golden
model: llmesh-sim
requests: 600
arrival: {process: poisson, rate: 50}
primary: interactive=ttft_p99_ms
classes:
  - {name: interactive, priority: 0, share: 0.2, slo: {ttft: 200ms, tpot: 30ms}, attainment_target: 0.95, prompt_tokens: {value: 100}, output_tokens: {value: 20}}
  - {name: batch, priority: 10, share: 0.8, slo: {ttft: 2s, tpot: 100ms}, prompt_tokens: {value: 1000}, output_tokens: {value: 50}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []result.Record
	src := w.Source()
	for {
		it, ok := src.Next()
		if !ok {
			break
		}
		r := result.Record{Index: it.Index, Class: w.Classes[it.Class].Name, PromptTokens: it.PromptTokens, MaxTokens: it.MaxTokens,
			IntendedNS: int64(it.At), SentNS: int64(it.At) + int64(it.Index%7)*1000, OutputTokens: it.MaxTokens, Status: result.StatusOK}
		ttft := int64(50+(it.Index*37)%400) * int64(time.Millisecond)
		gap := int64(10+(it.Index*13)%40) * int64(time.Millisecond)
		t0 := r.SentNS + ttft
		for k := 0; k < it.MaxTokens; k++ {
			r.ChunkNS = append(r.ChunkNS, t0+int64(k)*gap)
		}
		r.FirstTokenNS = t0
		r.DoneNS = r.ChunkNS[len(r.ChunkNS)-1]
		switch it.Index % 50 {
		case 7:
			r = result.Record{Index: r.Index, Class: r.Class, IntendedNS: r.IntendedNS, SentNS: r.SentNS, DoneNS: r.SentNS + 1e6, Status: result.StatusRejected, Code: 429, Error: "HTTP 429"}
		case 9:
			r.Status, r.Error = result.StatusDropped, "stream ended without data: [DONE]"
		}
		recs = append(recs, r)
	}
	rep := stats.Summarize(recs, stats.Meta{Workload: w, Target: "http://127.0.0.1:8000", Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	rep.GPUNote = "no GPU telemetry: NVML library not found"
	rep.Primary, rep.PrimaryFrom = w.Spec.Primary(), "workload golden.yaml"
	return rep
}

func TestGolden(t *testing.T) {
	rep := sample(t)
	for _, f := range Formats {
		var buf bytes.Buffer
		if err := Render(&buf, rep, f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		path := filepath.Join("testdata", "report."+f+".golden")
		if *update {
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if d := cmp.Diff(string(want), buf.String()); d != "" {
			t.Errorf("%s differs from %s (-want +got):\n%s", f, path, d)
		}
	}
}

// A saved JSON report re-renders identically to the original.
func TestJSONRoundTrip(t *testing.T) {
	rep := sample(t)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Formats {
		var a, b bytes.Buffer
		if err := Render(&a, rep, f); err != nil {
			t.Fatal(err)
		}
		if err := Render(&b, back, f); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Errorf("%s differs after a JSON round trip", f)
		}
	}
	// vLLM bench serve field names are present.
	var raw bytes.Buffer
	_ = WriteJSON(&raw, rep)
	for _, k := range []string{`"request_throughput"`, `"p99_ttft_ms"`, `"median_tpot_ms"`, `"p99.9_e2el_ms"`, `"achieved_rps"`, `"schedule_lag_ms"`, `"slo_attainment"`, `"goodput_rps"`} {
		if !strings.Contains(raw.String(), k) {
			t.Errorf("JSON lacks %s", k)
		}
	}
}

func TestReadJSONRejects(t *testing.T) {
	for _, in := range []string{"", "{", `{"foo":1}`, "[]"} {
		if _, err := ReadJSON(strings.NewReader(in)); err == nil {
			t.Errorf("ReadJSON(%q) accepted", in)
		}
	}
	if err := Render(&bytes.Buffer{}, sample(t), "pdf"); err == nil || !strings.Contains(err.Error(), `format: "pdf"`) {
		t.Errorf("Render(pdf) = %v", err)
	}
}

func TestHTMLSelfContained(t *testing.T) {
	var buf bytes.Buffer
	if err := HTML(&buf, sample(t)); err != nil {
		t.Fatal(err)
	}
	h := buf.String()
	if n := strings.Count(h, `<figure class="chart"`); n != 4 {
		t.Errorf("%d charts, want 4", n)
	}
	for _, bad := range []string{"<script", "<link ", "src=", "href=", "url("} {
		if strings.Contains(h, bad) {
			t.Errorf("HTML references an external resource: %q", bad)
		}
	}
}

func FuzzReadJSON(f *testing.F) {
	f.Add(`{"overall":{},"classes":{"a":{"priority":1}}}`)
	f.Add(`{"overall":{"ttft_cdf":[[1,0.5]]},"classes":{},"timeline":[{"start_s":0}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		rep, err := ReadJSON(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, fm := range Formats {
			if err := Render(&bytes.Buffer{}, rep, fm); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestGPUSection(t *testing.T) {
	rep := sample(t)
	rep.GPUNote = ""
	rep.GPU = &result.GPU{Devices: []result.GPUDevice{{Index: 0, Name: "NVIDIA H200", Samples: 3, SMUtilMean: 50, SMUtilMax: 90, PowerMeanW: 300, PowerMaxW: 450,
		Series: [][3]float64{{0, 10, 200}, {0.5, 90, 450}, {1, 50, 300}}}}}
	var buf bytes.Buffer
	if err := HTML(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), `<figure class="chart"`); n != 6 {
		t.Errorf("%d charts with GPU telemetry, want 6", n)
	}
	buf.Reset()
	if err := Table(&buf, rep); err != nil || !strings.Contains(buf.String(), "GPU 0 NVIDIA H200: SM util mean 50% max 90%") {
		t.Errorf("table GPU line: %v\n%s", err, buf.String())
	}
}

// A run's HTML page carries its provenance, as its markdown does.
func TestHTMLProvenance(t *testing.T) {
	rep := sample(t)
	rep.Provenance = &provenance.Provenance{Builds: map[string]provenance.Build{"self": {Module: "github.com/llmesh/llmesh", SHA256: "0123456789abcdef"}},
		Files: map[string]string{"workload w.yaml": "fedcba9876543210"}, Seeds: []int64{7}, Host: provenance.Host{OS: "linux", Arch: "amd64", Cores: 2, LoadAvg: "0.10 0.20 0.30"}}
	var buf bytes.Buffer
	if err := HTML(&buf, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<details id="provenance">`, "build self", "sha256:fedcba987654", "<td>seeds</td>", "2 cores, load average 0.10 0.20 0.30"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

// The primary line appears in every text renderer when the run declared
// primaries, and nowhere when it did not (a quick run, an older file).
func TestPrimaryLine(t *testing.T) {
	rep := sample(t)
	const want = "primary metrics: interactive.ttft_p99_ms (from workload golden.yaml)"
	for _, f := range []string{"table", "markdown", "html"} {
		var buf bytes.Buffer
		if err := Render(&buf, rep, f); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%s lacks %q", f, want)
		}
	}
	rep.Primary, rep.PrimaryFrom = nil, ""
	for _, f := range Formats {
		var buf bytes.Buffer
		if err := Render(&buf, rep, f); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "primary") {
			t.Errorf("%s of a run without primaries mentions one", f)
		}
	}
}
