package simulate

import (
	"strconv"

	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
)

// Floor is the admission floor at one load: the most urgent class's P99
// TTFT under the most extreme admission on the same engine. The urgent
// class never queues in the scheduler (it has as many slots of its own as
// the pool has for the others) and the other classes get one prompt in
// prefill at a time (max_prefill_tokens 1, priority order, capacity
// static), so the engine steps an urgent request waits for and shares are
// as short as admission can make them. What is left is the engine: the
// step in flight and the urgent prompt's own prefill next to the running
// decodes. No admission policy gets the urgent P99 below it, only the
// engine's settings (Engine) move it; batch work starves there, so only
// the urgent figures are reported.
type Floor struct {
	UrgentClass   string  `json:"urgent_class"`
	UrgentP99TTFT float64 `json:"urgent_p99_ttft_ms"`
	// UrgentQueueP99 is the urgent class's scheduler queueing in the floor
	// run (0 when it never queued, as the floor intends).
	UrgentQueueP99      float64 `json:"urgent_queue_p99_ms"`
	UrgentEngineWaitP99 float64 `json:"urgent_engine_wait_p99_ms"`
	UrgentPrefillP99    float64 `json:"urgent_prefill_p99_ms"`
}

// floorOptions is o turned into the floor's pool: static capacity, the
// others' slots as before plus as many again held for the urgent class,
// one non-urgent prompt in prefill at a time.
func floorOptions(o Options) Options {
	o.ReserveUrgent = o.MaxInflight
	o.MaxInflight *= 2
	o.MaxPrefillTokens = 1
	o.MetricsInterval = -1
	o.StaticBounds = true
	return o
}

// floorRun measures the floor of w (already scaled to the load).
func floorRun(w *workload.Workload, load float64, o Options) (*Floor, error) {
	run, err := simulate(w, priority.New(), load, floorOptions(o))
	if err != nil {
		return nil, err
	}
	urgent := urgentClass(w)
	f := &Floor{UrgentClass: urgent}
	if c := run.Classes[urgent]; c != nil {
		f.UrgentP99TTFT = c.TTFTMs.P99
	}
	if b, ok := run.Sim.Breakdown[urgent]; ok {
		f.UrgentQueueP99, f.UrgentEngineWaitP99, f.UrgentPrefillP99 = b.QueueMs.P99, b.EngineWaitMs.P99, b.PrefillMs.P99
	}
	return f, nil
}

// urgentClass is the name of w's most urgent class (lowest priority value,
// the first of equals).
func urgentClass(w *workload.Workload) string {
	best := 0
	for i, c := range w.Classes {
		if c.Priority < w.Classes[best].Priority {
			best = i
		}
	}
	return w.Classes[best].Name
}

// loadKey is a load factor as a JSON object key: the shortest decimal that
// reads back as the same number ("1", "0.9").
func loadKey(load float64) string { return strconv.FormatFloat(load, 'g', -1, 64) }
