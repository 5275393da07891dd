package inferencepool_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/epp/inferencepool"
	"github.com/llmesh/llmesh/scheduler/pools"
)

type pickerRecord struct{ sets [][]string }

func (p *pickerRecord) SetEndpoints(pool string, eps []string) error {
	p.sets = append(p.sets, eps)
	return nil
}

// schedEndpoints is the scheduler's endpoints of pool sims and whether each
// is drained.
func schedEndpoints(t *testing.T, s *pools.MeshSet) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, ps := range s.Stats() {
		if ps.Name == "sims" {
			for _, e := range ps.Endpoints {
				out[e.Name] = e.Drained
			}
		}
	}
	return out
}

func TestMeshSet(t *testing.T) {
	base, err := config.LoadFile("../../examples/mesh-epp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := pools.NewMesh(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := &pickerRecord{}
	m := &inferencepool.Mesh{Base: base, Pool: "sims", Sched: s, Picker: p}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		eps  []string
		want map[string]bool
	}{
		{[]string{"10.0.0.1:8000", "10.0.0.2:8000"}, map[string]bool{"10.0.0.1:8000": false, "10.0.0.2:8000": false}},
		{nil, map[string]bool{"10.0.0.1:8000": true, "10.0.0.2:8000": true}},
		{[]string{"10.0.0.1:8000", "10.0.0.2:8000"}, map[string]bool{"10.0.0.1:8000": false, "10.0.0.2:8000": false}},
		{[]string{"10.0.0.3:8000"}, map[string]bool{"10.0.0.3:8000": false}},
	}
	for i, st := range steps {
		if err := m.Set(st.eps); err != nil {
			t.Fatalf("step %d: Set(%q): %v", i, st.eps, err)
		}
		if diff := cmp.Diff(st.want, schedEndpoints(t, s)); diff != "" {
			t.Errorf("step %d: scheduler endpoints (drained) (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(st.eps, p.sets[len(p.sets)-1]); diff != "" {
			t.Errorf("step %d: picker endpoints (-want +got):\n%s", i, diff)
		}
	}
	if err := (&inferencepool.Mesh{Base: base, Pool: "nope", Sched: s}).Check(); err == nil {
		t.Error("Check of a pool the mesh lacks: no error")
	}
}
