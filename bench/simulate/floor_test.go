package simulate

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The floor row: the urgent class never queues there, no admission policy
// beats it by much, the JSON carries it under floor.<load>, and the engine's
// per-sequence prefill cap moves it.
func TestFloor(t *testing.T) {
	w := testWorkload(t)
	res, err := Evaluate(w, []string{"priority", "preemptive"}, []float64{1.3}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	f := res.Floor["1.3"]
	if f == nil || f.UrgentClass != "interactive" || !(f.UrgentP99TTFT > 0) {
		t.Fatalf("floor %+v", f)
	}
	if f.UrgentQueueP99 != 0 {
		t.Errorf("the urgent class queued in the floor run: queue p99 %v ms", f.UrgentQueueP99)
	}
	for _, c := range res.Compare() {
		t.Logf("%s: p99 %.1f ms = %.2fx floor %.1f ms", c.Policy, c.UrgentP99TTFT, c.FloorRatio, f.UrgentP99TTFT)
		if c.FloorRatio != c.UrgentP99TTFT/f.UrgentP99TTFT {
			t.Errorf("%s: floor ratio %v", c.Policy, c.FloorRatio)
		}
		if c.Policy == "priority" && c.FloorRatio < 1 {
			t.Errorf("priority below the floor: %.2fx", c.FloorRatio)
		}
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Floor map[string]struct {
			P99 float64 `json:"urgent_p99_ttft_ms"`
		} `json:"floor"`
		Comparison []struct {
			FloorRatio float64 `json:"urgent_p99_ttft_floor_ratio"`
		} `json:"comparison"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Floor["1.3"].P99 != f.UrgentP99TTFT || len(doc.Comparison) != 2 || doc.Comparison[0].FloorRatio <= 0 {
		t.Errorf("JSON floor %+v comparison %+v", doc.Floor, doc.Comparison)
	}

	o := testOptions()
	o.Engine.LongPrefillTokenThreshold = 512
	capped, err := Evaluate(w, []string{"priority"}, []float64{1.3}, o)
	if err != nil {
		t.Fatal(err)
	}
	g := capped.Floor["1.3"]
	t.Logf("floor %.1f ms; with long_prefill_token_threshold 512: %.1f ms", f.UrgentP99TTFT, g.UrgentP99TTFT)
	if g.UrgentP99TTFT == f.UrgentP99TTFT {
		t.Error("the prefill chunk cap did not move the floor")
	}
	if capped.Engine.LongPrefillTokenThreshold != 512 {
		t.Errorf("engine info %+v", capped.Engine)
	}
}
