package promtext_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/testkit/promtext"
)

const exposition = `# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="length",model_name="m"} 3
vllm:request_success_total{finished_reason="stop",model_name="m"} 4
vllm:num_requests_running{model_name="m"} 2 1700000000000
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 5
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.25
vllm:time_to_first_token_seconds_count{model_name="m"} 5
llmesh_label_with_brace{msg="a } b"} 7
llmesh_unlabelled 1e3
llmesh_bad{x="y"} notanumber
`

func TestSum(t *testing.T) {
	for _, tc := range []struct {
		name  string
		want  float64
		found bool
	}{
		{"vllm:request_success_total", 7, true},        // every label set
		{"vllm:num_requests_running", 2, true},         // a timestamp after the value
		{"vllm:time_to_first_token_seconds", 0, false}, // only longer names
		{"vllm:time_to_first_token_seconds_sum", 0.25, true},
		{"llmesh_label_with_brace", 7, true}, // a brace inside a label value
		{"llmesh_unlabelled", 1000, true},
		{"llmesh_bad", 0, false}, // the value does not parse
		{"llmesh_absent", 0, false},
		{"", 0, false},
	} {
		got, found := promtext.Sum(exposition, tc.name)
		if got != tc.want || found != tc.found {
			t.Errorf("Sum(%q) = %v, %v; want %v, %v", tc.name, got, found, tc.want, tc.found)
		}
	}
}

// FuzzSum: any text is read without a panic, and a sample line written
// for a name and value is read back among arbitrary lines of other names.
func FuzzSum(f *testing.F) {
	f.Add(exposition, "vllm:request_success_total", `{a="b"}`, 2.5)
	f.Add("", "x", "", 0.0)
	f.Add("x{\nx 1", "x", `{le="+Inf"}`, -1.0)
	f.Fuzz(func(t *testing.T, text, name, labels string, v float64) {
		promtext.Sum(text, name)
		if !validName(name) || strings.ContainsAny(labels, "\n") || math.IsNaN(v) ||
			(labels != "" && (labels[0] != '{' || labels[len(labels)-1] != '}')) {
			return
		}
		var other strings.Builder
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(line, name) {
				other.WriteString(line + "\n")
			}
		}
		doc := other.String() + fmt.Sprintf("%s%s %v\n", name, labels, v)
		got, found := promtext.Sum(doc, name)
		if !found || got != v {
			t.Fatalf("Sum(%q) = %v, %v over %q; want %v", name, got, found, doc, v)
		}
	})
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
