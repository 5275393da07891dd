package pools_test

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
)

const configMesh = `
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:8000]
    capacity: {max_inflight: 16, max_inflight_tokens: 32768}
    scheduler:
      policy: preemptive
      batch_window: 5ms
      aging: 2s
      max_prefill_tokens: 4096
      reserve_urgent: 2
      preemption: {min_lower_inflight: 2, min_run_time: 50ms, max_per_request: 1, target: 0.75}
classes:
  - name: interactive
    priority: 0
    slo: {ttft: 300ms, tpot: 30ms}
    queue: {max_length: 100, max_wait: 5s}
  - name: batch
    priority: 10
    slo: {ttft: 10s, tpot: 100ms}
    preemptible: true
default_class: batch
experiments:
  - name: ab
    pool: gpu
    arms:
      - {name: strict, scheduler: {preemption: {target: 0.5}}}
      - {name: fifo, scheduler: {policy: fifo}}
`

// TestConfig: a mesh pool's and class's settings reach the scheduler
// config, an arm pool carries its overrides on top of the pool's settings.
func TestConfig(t *testing.T) {
	c, err := config.Load([]byte(configMesh))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pools.Config(c)
	if err != nil {
		t.Fatal(err)
	}
	p := got.Pools[0]
	if p.Name != "gpu" || p.MaxInflight != 16 || p.MaxInflightTokens != 32768 || p.Policy.Name() != "preemptive" ||
		p.BatchWindow != 5*time.Millisecond || p.Aging != 2*time.Second || p.MaxPrefillTokens != 4096 || p.ReserveUrgent != 2 ||
		p.Preemption != (scheduler.PreemptionConfig{MinLowerInflight: 2, MinRunTime: 50 * time.Millisecond, MaxPerRequest: 1, Target: 0.75, AbortProbe: 5 * time.Minute}) {
		t.Errorf("pool %+v", p)
	}
	if got.DefaultClass != "batch" || len(got.Classes) != 2 {
		t.Fatalf("classes %+v default %q", got.Classes, got.DefaultClass)
	}
	if ic := got.Classes[0]; ic.TTFT != 300*time.Millisecond || ic.TPOT != 30*time.Millisecond || ic.MaxQueue != 100 || ic.MaxWait != 5*time.Second || ic.Preemptible {
		t.Errorf("interactive %+v", ic)
	}
	if _, err := scheduler.NewMachine(got); err != nil {
		t.Fatal(err)
	}
	// An arm's scheduler: its overrides on top of the pool's settings.
	strict, fifo := got.Pools[1], got.Pools[2]
	if strict.Policy.Name() != "preemptive" || strict.MaxPrefillTokens != 4096 || strict.ReserveUrgent != 2 ||
		strict.Preemption != (scheduler.PreemptionConfig{MinLowerInflight: 2, MinRunTime: 50 * time.Millisecond, MaxPerRequest: 1, Target: 0.5, AbortProbe: 5 * time.Minute}) {
		t.Errorf("arm strict %+v", strict)
	}
	if fifo.Policy.Name() != "fifo" || fifo.Preemption.Target != 0.75 {
		t.Errorf("arm fifo %+v", fifo)
	}
	if _, err := scheduler.FromMesh(c, func(string) (scheduler.Policy, error) { return nil, errUnknown }); err == nil ||
		!strings.Contains(err.Error(), "pools[0].scheduler: policy") {
		t.Fatalf("unknown policy: %v", err)
	}
}

var errUnknown = &unknownErr{}

type unknownErr struct{}

func (*unknownErr) Error() string { return "unknown" }

// TestConfigArmPools: one pool per experiment arm after the mesh's own,
// with the experiment pool's capacity; a mesh that already spells an arm
// pool out (as the Envoy filter's does) keeps its own, not two.
func TestConfigArmPools(t *testing.T) {
	c, err := config.Load([]byte(configMesh))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pools.Config(c)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got.Pools {
		names = append(names, p.Name)
	}
	if want := "gpu gpu.arm-strict gpu.arm-fifo"; strings.Join(names, " ") != want {
		t.Fatalf("pools %q, want %q", names, want)
	}
	strict, fifo := got.Pools[1], got.Pools[2]
	if strict.MaxInflight != 16 || strict.MaxInflightTokens != 32768 || strict.Policy.Name() != "preemptive" || strict.Preemption.Target != 0.5 {
		t.Errorf("arm pool strict %+v", strict)
	}
	if fifo.Policy.Name() != "fifo" || fifo.Preemption.Target != 0.75 {
		t.Errorf("arm pool fifo %+v", fifo)
	}
	spelled, err := config.Load([]byte(`
pools:
  - {name: gpu, protocol: openai, endpoints: [127.0.0.1:8000], capacity: {max_inflight: 16}}
  - {name: gpu.arm-fifo, protocol: openai, endpoints: [127.0.0.1:8001], capacity: {max_inflight: 3}}
classes: [{name: batch}]
experiments:
  - {name: ab, pool: gpu, arms: [{name: strict}, {name: fifo, scheduler: {policy: fifo}}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := pools.Config(spelled)
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, p := range sp.Pools {
		names = append(names, p.Name)
	}
	if want := "gpu gpu.arm-fifo gpu.arm-strict"; strings.Join(names, " ") != want {
		t.Errorf("spelled-out arm pool: pools %q, want %q", names, want)
	}
	if own := sp.Pools[1]; own.MaxInflight != 3 {
		t.Errorf("the mesh's own gpu.arm-fifo was replaced: %+v", own)
	}
	if _, err := scheduler.NewMachine(got); err != nil {
		t.Fatal(err)
	}
}
