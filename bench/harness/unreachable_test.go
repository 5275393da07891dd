package harness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/proctest"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

func quick(t *testing.T, q Quick) *workload.Workload {
	t.Helper()
	w, err := workload.Compile(QuickSpec(q), workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A run against a dead port stops after UnreachableAttempts failed
// connections instead of running its whole minute, says why, and reports
// nothing achieved.
func TestRunStopsOnUnreachableTarget(t *testing.T) {
	w := quick(t, Quick{Rate: 100, Arrival: "constant", Duration: time.Minute, PromptTokens: 8, MaxTokens: 4})
	start := time.Now()
	rep, recs, err := Run(context.Background(), Options{Workload: w, Target: "http://" + proctest.FreeAddr(t)})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("error %v, want ErrUnreachable naming the connection error", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("gave up after %s", took)
	}
	if rep.Valid || rep.Completed != 0 || rep.AchievedRPS != 0 || rep.Requests[result.StatusUnreachable] < UnreachableAttempts-1 {
		t.Errorf("report: valid %v, completed %d, achieved %v, requests %v", rep.Valid, rep.Completed, rep.AchievedRPS, rep.Requests)
	}
	if len(recs) > 200 {
		t.Errorf("%d requests sent to a dead port", len(recs))
	}
	joined := strings.Join(rep.InvalidReasons, "; ")
	for _, want := range []string{"stopped early: target unreachable", "unreachable; first error: ", "connection refused"} {
		if !strings.Contains(joined, want) {
			t.Errorf("invalid reasons %q lack %q", joined, want)
		}
	}
}

// The watch is off as soon as the target answers, even with errors: a
// target that fails every request still runs its course.
func TestReachabilityWatch(t *testing.T) {
	refused := func(doneMs int64) *result.Record {
		return &result.Record{Status: result.StatusUnreachable, DoneNS: doneMs * int64(time.Millisecond), Error: "connection refused"}
	}
	for _, tc := range []struct {
		name string
		recs []*result.Record
		stop int // index of the record that stops the run; -1: none
	}{
		{"attempts", func() []*result.Record {
			var rs []*result.Record
			for i := range UnreachableAttempts {
				rs = append(rs, refused(int64(i)))
			}
			return rs
		}(), UnreachableAttempts - 1},
		{"grace", []*result.Record{refused(100), refused(2000), refused(5099), refused(5100)}, 3},
		{"answered first", []*result.Record{{Status: result.StatusError, Code: 500}, refused(0), refused(6000)}, -1},
		{"cancelled ignored", []*result.Record{{Status: result.StatusCancelled}, refused(0), refused(6000)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u reachability
			got := -1
			for i, r := range tc.recs {
				if err := u.observe(r); err != nil && got < 0 {
					got = i
				}
			}
			if got != tc.stop {
				t.Errorf("stopped at record %d, want %d", got, tc.stop)
			}
		})
	}
	// A live target that answers is never given up on.
	srv := benchtest.Start(t, benchtest.Config{})
	w := quick(t, Quick{Rate: 200, Arrival: "constant", Requests: 30, PromptTokens: 8, MaxTokens: 2})
	rep, _, err := Run(context.Background(), Options{Workload: w, Target: srv.HTTPURL})
	if err != nil || rep.Completed != 30 {
		t.Errorf("live target: %v, %d completed", err, rep.Completed)
	}
}
