package config_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
)

// TestPoolResume: pools[].preemption.resume defaults to continue, accepts
// the three modes, and names the field, the value and the closest mode on
// a typo.
func TestPoolResume(t *testing.T) {
	cfg, err := config.Load([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Pools[0].Resume; got != config.ResumeContinue {
		t.Errorf("default resume %q, want %q", got, config.ResumeContinue)
	}
	for _, v := range config.KnownResume {
		cfg, err := config.Load([]byte(minimal + "    preemption: {resume: " + v + "}\n"))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got := cfg.Pools[0].Resume; got != v {
			t.Errorf("resume %q compiled to %q", v, got)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{"    preemption: {resume: requeu}\n", `pools[0].preemption.resume: "requeu" is not a known resume mode (did you mean "requeue"?)`},
		{"    preemption: {resume: never}\n", `pools[0].preemption.resume: "never" is not a known resume mode (known: continue, requeue, off)`},
		{"    preemption: {resum: off}\n", `pools[0].preemption.resum: unknown field (did you mean "resume"?) (line 10)`},
	} {
		if diff := cmp.Diff([]string{tc.want}, errorLines(t, minimal+tc.src)); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	}
}
