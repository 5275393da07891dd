package compare

import (
	"strings"
	"testing"
)

func TestParseGate(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{"interactive.ttft_p99_ms>+5%", "interactive.ttft_p99_ms>+5%", ""},
		{"batch.goodput_rps<-2%", "batch.goodput_rps<-2%", ""},
		{"batch.goodput_rps < -2.5 %", "batch.goodput_rps<-2.5%", ""},
		{"ttft>+5%", "", `metric "ttft" must be CLASS.METRIC`},
		{"a.b>5", "", "must end in %"},
		{"a.b=5%", "", "want METRIC>+N% or METRIC<-N%"},
		{"a.b>x%", "", "is not a percentage"},
		{"a.b>NaN%", "", "is not a percentage"},
	} {
		g, err := ParseGate(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || g.String() != c.want {
			t.Errorf("%q: %v %v, want %s", c.in, g, err, c.want)
		}
	}
}

func TestCheckGates(t *testing.T) {
	r, err := Judge([]Metric{
		{Name: "interactive.ttft_p99_ms", LowerBetter: true, Primary: true, A: []float64{100, 110, 90, 105}, B: []float64{110, 121, 100, 116}},
		{Name: "batch.goodput_rps", A: []float64{10, 11, 9, 10}, B: []float64{9.9, 11.2, 8.8, 10.05}},
	}, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	gates := []Gate{}
	for _, s := range []string{"interactive.ttft_p99_ms>+5%", "interactive.ttft_p99_ms>+20%", "batch.goodput_rps<-0.1%"} {
		g, err := ParseGate(s)
		if err != nil {
			t.Fatal(err)
		}
		gates = append(gates, g)
	}
	got, err := Check(r, gates)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false}
	for i, w := range want {
		if got[i].Breached != w {
			t.Errorf("gate %s: breached %v (%s), want %v", got[i].Gate, got[i].Breached, got[i].Reason, w)
		}
	}
	if !strings.Contains(got[2].Reason, "not significant") {
		t.Errorf("noisy goodput drop: %q, want 'not significant'", got[2].Reason)
	}
	if _, err := Check(r, []Gate{{Metric: "nosuch.x", Above: true, Percent: 5}}); err == nil || !strings.Contains(err.Error(), `no metric "nosuch.x"`) {
		t.Errorf("unknown metric: err %v", err)
	}
}

func FuzzParseGate(f *testing.F) {
	for _, s := range []string{"interactive.ttft_p99_ms>+5%", "batch.goodput_rps<-2%", "a.b>", ">5%", "a.b<1e309%", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGate(s)
		if err != nil {
			return
		}
		g2, err := ParseGate(g.String())
		if err != nil || g2 != g {
			t.Fatalf("%q -> %v -> %v, %v: not stable", s, g, g2, err)
		}
	})
}
