package workload

import (
	"maps"
	"strings"
	"testing"
)

const twoClasses = `
requests: 10
arrival: {rate: 10}
classes:
  - {name: interactive, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}
  - {name: batch, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}
`

func TestPrimary(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       map[string]string
		errs       []string // each must appear in the error; none: valid
	}{
		{name: "none", yaml: "", want: nil},
		{name: "scalar", yaml: "primary: interactive=ttft_p99_ms", want: map[string]string{"interactive": "ttft_p99_ms"}},
		{name: "list", yaml: "primary: [interactive=ttft_p99_ms, batch=goodput_rps]",
			want: map[string]string{"interactive": "ttft_p99_ms", "batch": "goodput_rps"}},
		{name: "block list with spaces", yaml: "primary:\n  - ' interactive = slo_attainment '", want: map[string]string{"interactive": "slo_attainment"}},
		{name: "metric typo", yaml: "primary: interactive=ttft_p99",
			errs: []string{`primary[0]: "interactive=ttft_p99": metric "ttft_p99" is not one of ttft_p99_ms, tpot_p99_ms, slo_attainment, goodput_rps (did you mean "ttft_p99_ms"?)`}},
		{name: "unknown metric", yaml: "primary: interactive=latency",
			errs: []string{`primary[0]: "interactive=latency": metric "latency" is not one of ttft_p99_ms, tpot_p99_ms, slo_attainment, goodput_rps`}},
		{name: "class typo", yaml: "primary: interactiv=ttft_p99_ms",
			errs: []string{`primary[0]: "interactiv=ttft_p99_ms": no class "interactiv" in the workload (did you mean "interactive"?)`}},
		{name: "no equals", yaml: "primary: interactive.ttft_p99_ms", errs: []string{`primary[0]: "interactive.ttft_p99_ms": want CLASS=METRIC`}},
		{name: "empty metric", yaml: "primary: [batch=goodput_rps, 'interactive=']", errs: []string{`primary[1]: "interactive=": want CLASS=METRIC`}},
		{name: "twice per class", yaml: "primary: [batch=goodput_rps, batch=ttft_p99_ms]",
			errs: []string{`primary[1]: "batch=ttft_p99_ms": class "batch" already has a primary (primary[0])`}},
		{name: "both wrong", yaml: "primary: nosuch=nosuch",
			errs: []string{`metric "nosuch"`, `no class "nosuch"`}},
		{name: "mapping", yaml: "primary: {class: interactive, metric: ttft_p99_ms}", errs: []string{"want CLASS=METRIC or a list of them"}},
		{name: "nested list", yaml: "primary: [[a]]", errs: []string{"want CLASS=METRIC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := load(t, twoClasses+tc.yaml)
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if got := w.Spec.Primary(); !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
					t.Fatalf("Primary() = %v, want %v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.errs)
			}
			for _, e := range tc.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q\nlacks %q", err, e)
				}
			}
		})
	}
}

// The shipped workloads declare their primaries where one is obvious.
func TestShippedPrimary(t *testing.T) {
	w, err := LoadFile("../workloads/mixed-priority.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Spec.Primary(); got["interactive"] != "ttft_p99_ms" {
		t.Fatalf("mixed-priority primary = %v, want interactive=ttft_p99_ms", got)
	}
}
