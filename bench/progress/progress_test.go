package progress

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/bench/runner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuietWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	stop := Start(context.Background(), &buf, "run", 10, &runner.Live{})
	stop()
	if buf.Len() != 0 {
		t.Errorf("wrote %q to a non-terminal", buf.String())
	}
}

func TestLine(t *testing.T) {
	got := Line(runner.Snapshot{Sent: 5, InFlight: 2, Done: 3, Failed: 1, Classes: []string{"a", "b"}, TTFTP99Ms: map[string]float64{"a": 12.4, "b": 800}})
	want := "sent 5  in flight 2  done 3  errors 1  a p99 TTFT 12 ms  b p99 TTFT 800 ms"
	if got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
}
