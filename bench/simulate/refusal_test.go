package simulate

import (
	"errors"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
)

// TestRefusalSplit: the statuses of refusals from a real machine are split
// as the real-time harness splits them, so a simulated report's queue_full
// and rejected counts mean what a measured one's do.
func TestRefusalSplit(t *testing.T) {
	m, err := scheduler.NewMachine(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: poolName, MaxInflight: 1, MaxInflightTokens: 100, Policy: priority.New()}},
		Classes: []scheduler.ClassConfig{{Name: "c", MaxQueue: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	arrive := func(prompt int) error {
		_, err := m.Arrive(now, scheduler.Request{Pool: poolName, Class: "c", PromptTokens: prompt, MaxTokens: 1})
		return err
	}
	if err := arrive(10); err != nil {
		t.Fatal(err)
	}
	full, tooBig := arrive(10), arrive(1000)
	for _, tc := range []struct {
		name string
		err  error
		want result.Status
	}{
		{"queue full", full, result.StatusQueueFull},
		{"over max_inflight_tokens", tooBig, result.StatusRejected},
		{"not a refusal", errors.New("engine broke"), result.StatusError},
	} {
		if got := refusal(tc.err); got != tc.want {
			t.Errorf("%s (%v): %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}
