package main

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/proctest"
)

// `bench run` against a dead port stops early with exit 1 and the cause,
// and its report achieves nothing (it once ran the whole duration and
// reported more achieved than offered, with 0 ok).
func TestBenchRunDeadTarget(t *testing.T) {
	start := time.Now()
	out, _, err := benchMain(t, "run", "--target", "http://"+proctest.FreeAddr(t), "--rate", "50", "--duration", "60s", "--warmup", "0s", "--quiet")
	if exitCodeOf(err) != 1 || !strings.Contains(err.Error(), "target unreachable") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("exit %d, %v; want 1 naming the unreachable target", exitCodeOf(err), err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("ran %s against a dead port", took)
	}
	if !strings.Contains(out, "achieved 0.00 req/s") {
		t.Errorf("report does not say nothing was achieved:\n%s", out)
	}
}

// `bench ab` against dead targets says why, not only INVALID.
func TestBenchABDeadTargets(t *testing.T) {
	addr := "http://" + proctest.FreeAddr(t)
	_, stderr, err := benchMain(t, "ab", "--a", addr, "--b", addr, "--rate", "50", "--duration", "60s", "--warmup", "0s", "--repeats", "1", "--quiet")
	if exitCodeOf(err) != 1 || !strings.Contains(err.Error(), "arm A") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("exit %d, %v; want 1 naming arm A and the connection error", exitCodeOf(err), err)
	}
	if !strings.Contains(stderr, "unreachable; first error: ") {
		t.Errorf("the run's line lacks the counts and the first error:\n%s", stderr)
	}
}
