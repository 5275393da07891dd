package gateway

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// Each arm schedules with its own policy: with the arm's one slot taken,
// a batch request and then an urgent one wait; the fifo arm admits them in
// arrival order, the priority arm serves the urgent one first.
func TestExperimentArmPoliciesDiffer(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(50))
	mesh, err := config.Load([]byte(expMeshFor(s, "")))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMesh(mesh, "")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pools.NewMesh(mesh, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	cls, err := exchange.NewClassifierFromConfig(mesh)
	if err != nil {
		t.Fatal(err)
	}
	// The order that matters is the order of admission: the order in which
	// clients finish reading also depends on when each client goroutine
	// runs, and a lease is released when the upstream body ends, before
	// the response's last write to the client.
	admitted := &admissionOrder{Admitter: ms}
	_, gw := startGateway(t, cfg, WithAdmitter(admitted), WithClassifier(cls))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	waiting := func(pool string, n int) {
		t.Helper()
		wait.UntilNil(t, fmt.Sprintf("pool %s to have %d waiting", pool, n), func() error {
			st := ms.Stats()
			for _, ps := range st {
				q := 0
				for _, v := range ps.Queued {
					q += v
				}
				if ps.Name == pool && q == n {
					return nil
				}
			}
			return fmt.Errorf("stats %+v", st)
		})
	}
	for _, tc := range []struct {
		arm   string
		first string
	}{{"fifo", "batch"}, {"prio", "urgent"}} {
		t.Run(tc.arm, func(t *testing.T) {
			pool := config.ArmPoolName("sim", tc.arm)
			admitted.reset()
			var wg sync.WaitGroup
			send := func(class string, maxTokens int) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					arm, code := complete(t, ctx, gw, s.Model, maxTokens, map[string]string{"x-arm": tc.arm, "x-class": class})
					if arm != tc.arm || code != 200 {
						t.Errorf("%s request: arm %q status %d", class, arm, code)
					}
				}()
			}
			send("holder", 64) // takes the arm's only slot for a while
			wait.Until(t, "the holder admitted", func() bool {
				return ms.Stats()[poolIndex(t, ms, pool)].InFlight == 1
			})
			send("batch", 2)
			waiting(pool, 1)
			send("urgent", 2)
			waiting(pool, 2)
			wg.Wait()
			// The holder ("holder" is no class: the default, batch) was
			// admitted before the others were sent.
			if got := admitted.classes(); len(got) != 3 || got[1] != tc.first {
				t.Errorf("admission order by class %v, want the holder then %s", got, tc.first)
			}
		})
	}
}

// admissionOrder records the class of every request its Admitter admits,
// in the order of admission.
type admissionOrder struct {
	scheduler.Admitter
	mu    sync.Mutex
	order []string
}

func (a *admissionOrder) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	lease, err := a.Admitter.Admit(ctx, req)
	if err == nil {
		a.mu.Lock()
		a.order = append(a.order, req.Class)
		a.mu.Unlock()
	}
	return lease, err
}

func (a *admissionOrder) reset() {
	a.mu.Lock()
	a.order = nil
	a.mu.Unlock()
}

func (a *admissionOrder) classes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.order...)
}

func poolIndex(t *testing.T, ms *pools.MeshSet, pool string) int {
	t.Helper()
	for i, ps := range ms.Stats() {
		if ps.Name == pool {
			return i
		}
	}
	t.Fatalf("no pool %q", pool)
	return -1
}

// ConfigFromMesh gives every arm a pool of its own on the pool's upstream,
// named as control names the Envoy cluster; clashes and missing arm pools
// are errors naming the field.
func TestConfigFromMeshArmPools(t *testing.T) {
	src := strings.Replace(strings.Replace(expMesh, "ENGINE", "127.0.0.1:9", 1), "EXTRA", "", 1)
	mesh, err := config.Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMesh(mesh, "")
	if err != nil {
		t.Fatal(err)
	}
	up := "http://127.0.0.1:9"
	want := []Pool{
		{Name: "sim", Protocol: OpenAI, Upstream: up},
		{Name: "sim.arm-fifo", Protocol: OpenAI, Upstream: up, Experiment: "ab", Arm: "fifo"},
		{Name: "sim.arm-prio", Protocol: OpenAI, Upstream: up, Experiment: "ab", Arm: "prio"},
	}
	if diff := cmp.Diff(want, cfg.Pools); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	for i, r := range cfg.Routes {
		if r.Experiment != mesh.Experiment("ab") {
			t.Errorf("routes[%d] not split by experiment ab", i)
		}
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if exp, arm := g.Arm("sim.arm-prio"); exp != "ab" || arm != "prio" {
		t.Errorf("Arm(sim.arm-prio) = %q, %q", exp, arm)
	}
	if exp, arm := g.Arm("sim"); exp != "" || arm != "" {
		t.Errorf("Arm(sim) = %q, %q, want none", exp, arm)
	}

	// A pool already called like an arm pool.
	clash, err := config.Load([]byte(strings.Replace(src, "classes:", `  - name: sim.arm-prio
    protocol: openai
    endpoints: [127.0.0.1:9]
classes:`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ConfigFromMesh(clash, ""); err == nil || !strings.Contains(err.Error(), `needs pool name "sim.arm-prio", which is already taken`) {
		t.Errorf("clash: %v", err)
	}
	// A route split by an experiment whose arm pools are missing.
	cfg.Pools = cfg.Pools[:2]
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), `routes[0].experiment: arm "prio" needs pool "sim.arm-prio"`) {
		t.Errorf("missing arm pool: %v", err)
	}
}

// The example mesh files build in the gateway, arms included.
func TestExampleMeshesBuildArms(t *testing.T) {
	for _, name := range []string{"mesh.yaml", "mesh-shared-scheduler.yaml"} {
		t.Run(name, func(t *testing.T) {
			mesh, err := config.LoadFile(filepath.Join("..", "examples", name))
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckMesh(mesh, ""); err != nil {
				t.Fatal(err)
			}
			cfg, err := ConfigFromMesh(mesh, "")
			if err != nil {
				t.Fatal(err)
			}
			ms, err := pools.NewMesh(mesh, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			have := map[string]bool{}
			for _, p := range ms.Pools() {
				have[p] = true
			}
			for _, p := range cfg.Pools {
				if !have[p.Name] {
					t.Errorf("gateway pool %q has no scheduler pool", p.Name)
				}
			}
			for _, e := range mesh.Experiments {
				for _, a := range e.Arms {
					if !have[config.ArmPoolName(e.Pool.Name, a.Name)] {
						t.Errorf("experiment %s arm %s has no pool", e.Name, a.Name)
					}
				}
			}
		})
	}
}
