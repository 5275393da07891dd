package gpu

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// On a machine without a GPU this checks the graceful path; on one with a
// GPU (LLMESH_EXPECT_GPU=1) it checks that real readings come back.
func TestStartStop(t *testing.T) {
	s, note := Start(context.Background(), 20*time.Millisecond, nil)
	if s == nil {
		if !strings.HasPrefix(note, "no GPU telemetry: ") {
			t.Errorf("note %q lacks the standard prefix", note)
		}
		if os.Getenv("LLMESH_EXPECT_GPU") == "1" {
			t.Fatalf("expected a GPU: %s", note)
		}
		g, n := s.Stop() // nil sampler is fine
		if g != nil || n != "" {
			t.Errorf("nil Stop = %v, %q", g, n)
		}
		t.Log(note)
		return
	}
	time.Sleep(200 * time.Millisecond) // let the sampler take a few readings
	g, _ := s.Stop()
	if g == nil || len(g.Devices) == 0 {
		t.Fatal("no devices")
	}
	for _, d := range g.Devices {
		t.Logf("GPU %d %s: %d samples, SM util mean %.1f%% max %.1f%%, mem util %.1f%%, mem used max %.0f/%.0f MiB, power mean %.1f W max %.1f W, SM clock %.0f MHz, mem clock %.0f MHz",
			d.Index, d.Name, d.Samples, d.SMUtilMean, d.SMUtilMax, d.MemUtilMean, d.MemUsedMaxMiB, d.MemTotalMiB, d.PowerMeanW, d.PowerMaxW, d.SMClockMeanMHz, d.MemClockMeanMHz)
		if d.Samples < 2 || d.Name == "" || d.MemTotalMiB <= 0 || d.PowerMaxW <= 0 || d.SMClockMeanMHz <= 0 {
			t.Errorf("implausible readings: %+v", d)
		}
	}
}
