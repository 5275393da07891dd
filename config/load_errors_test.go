package config

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A mesh with three mistakes of different kinds (an unknown field, which
// the strict decoding finds, and two bad values, which compiling finds) is
// reported whole: every problem with its field path, none twice.
func TestLoadReportsEveryProblem(t *testing.T) {
	data, err := os.ReadFile("../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	for _, r := range [][2]string{
		{"    priority: 10\n", "    priorty: 10\n"},                                                                // classes[1]
		{"      max_inflight: 32\n      max_inflight_tokens", "      max_inflight: -3\n      max_inflight_tokens"}, // pools[0]
		{"      aging: 10s\n      preemption", "      aging: tenseconds\n      preemption"},                        // pools[0]
	} {
		if !strings.Contains(src, r[0]) {
			t.Fatalf("examples/mesh.yaml no longer has %q", r[0])
		}
		src = strings.Replace(src, r[0], r[1], 1)
	}
	_, err = Load([]byte(src))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Load: %v, want Errors", err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Path)
	}
	want := []string{"classes[1].priorty", "pools[0].scheduler.aging", "pools[0].capacity.max_inflight"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s\n%v", diff, err)
	}
}

// A problem the strict decoding reports is not reported again by the
// compiler: a value of the wrong type, and a typo of a required field.
func TestLoadDoesNotRepeatAProblem(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"wrong type", "pools:\n  - name: p\n    protocol: openai\n    endpoints: [127.0.0.1:1]\n    capacity: {max_inflight: lots}\n",
			[]string{"pools[0].capacity.max_inflight"}},
		{"typo of a required field", "pools:\n  - nmae: p\n    protocol: openai\n    endpoints: [127.0.0.1:1]\n",
			[]string{"pools[0].nmae"}},
		{"typo and an unrelated problem", "pools:\n  - nmae: p\n    protocol: openai\n    endpoints: [127.0.0.1:1]\nclasses:\n  - name: c\n    slo: {ttft: -5ms}\n",
			[]string{"pools[0].nmae", "classes[0].slo.ttft"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Load: %v, want Errors", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Path)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%v", diff, err)
			}
		})
	}
}
