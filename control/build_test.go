package control

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/config"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func loadExample(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.LoadFile("../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func renderResources(t testing.TB, res Resources) []byte {
	t.Helper()
	b, err := Dump(res)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./control -run %s -update to create it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got); rerun with -update if intended:\n%s", path, diff)
	}
}

func TestBuildGolden(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"example", "../examples/mesh.yaml"},
		{"active-arm", "testdata/active-arm.yaml"},
		{"shared-scheduler", "../examples/mesh-shared-scheduler.yaml"},
		{"ext-proc", "testdata/ext-proc.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.LoadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Build(cfg, BuildOptions{})
			if err != nil {
				t.Fatal(err)
			}
			validate(t, res)
			if _, err := NewSnapshot("1", res); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".golden.json", renderResources(t, res))
		})
	}
}

// validate runs the protoc-gen-validate rules Envoy applies to every
// resource, so a field out of Envoy's accepted range fails here, not in a
// NACK.
func validate(t *testing.T, res Resources) {
	t.Helper()
	for typ, rs := range res {
		for _, r := range rs {
			v, ok := r.(interface{ ValidateAll() error })
			if !ok {
				t.Fatalf("%s %T has no ValidateAll", typ, r)
			}
			if err := v.ValidateAll(); err != nil {
				t.Errorf("%s %s: %v", typ, cache.GetResourceName(r), err)
			}
		}
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	cfg := loadExample(t)
	a, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if Hash(a) != Hash(b) {
		t.Fatal("same config, different hashes")
	}
	on, err := cfg.WithActiveArm("policy-ab", "preemptive")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Build(on, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if Hash(a) == Hash(c) {
		t.Fatal("switching the active arm did not change the resources")
	}
}

func names(rs []types.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, cache.GetResourceName(r))
	}
	return out
}

func TestBuildShape(t *testing.T) {
	res, err := Build(loadExample(t), BuildOptions{LibraryPath: "/lib/llmesh-filter.so"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[resource.Type][]string{
		resource.ListenerType: {"main"},
		resource.RouteType:    {"llmesh.main"},
		resource.ClusterType:  {"sim", "sim.arm-fifo", "sim.arm-preemptive", "sim-grpc"},
		resource.EndpointType: {"sim", "sim.arm-fifo", "sim.arm-preemptive", "sim-grpc"},
	}
	for typ, w := range want {
		if diff := cmp.Diff(w, names(res[typ])); diff != "" {
			t.Errorf("%s names (-want +got):\n%s", typ, diff)
		}
	}
	_ = proto.Clone
}

func TestBuildRejectsArmPoolNameClash(t *testing.T) {
	cfg, err := config.Load([]byte(`
pools:
  - {name: p, protocol: openai, endpoints: ["127.0.0.1:1"]}
  - {name: p.arm-x, protocol: openai, endpoints: ["127.0.0.1:2"]}
experiments:
  - {name: e, pool: p, arms: [{name: x}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(cfg, BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), `experiment "e" arm "x" needs pool name "p.arm-x", which is already taken`) {
		t.Fatalf("err = %v", err)
	}
}

func TestHeadersKB(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want uint32
	}{
		{"{}", 60},
		{"{http: [{header: x, max: 100000}]}", 98 + 60},
		{"{grpc: [{metadata: x, field: 1, max: 1073741824}], max_message: 1073741824}", 8192},
	} {
		cfg, err := config.Load([]byte("relocation: " + tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := headersKB(&cfg.Relocation); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.yaml, got, tc.want)
		}
	}
}

// BenchmarkBuild measures turning the example mesh into Envoy resources
// and a checked snapshot, the work done per config change.
func BenchmarkBuild(b *testing.B) {
	cfg := loadExample(b)
	b.ReportAllocs()
	for b.Loop() {
		res, err := Build(cfg, BuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := NewSnapshot("1-"+Hash(res), res); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBufferLimit: when the filter may buffer a whole request body, the
// listener's per_connection_buffer_limit_bytes (Envoy's per-stream buffer
// limit, 413 beyond it) covers relocation.max_body; otherwise Envoy's
// default stays.
func TestBufferLimit(t *testing.T) {
	const pools = "pools: [{name: p, protocol: openai, endpoints: [\"127.0.0.1:1\"]}]\n"
	for _, tc := range []struct {
		name, yaml string
		want       uint32 // 0: unset
	}{
		{"nothing buffers", pools, 0},
		{"grpc relocation streams", pools + "relocation: {grpc: [{metadata: x, field: 2}]}\n", 0},
		{"http relocation", pools + "relocation: {http: [{header: x-prompt}]}\n", config.DefaultRelocMaxBody},
		{"http relocation, larger max_body", pools + "relocation: {http: [{header: x-prompt}], max_body: 100000000}\n", 100000000},
		{"model rule, small max_body keeps the default", pools +
			"classes: [{name: a, priority: 0}]\nclassification: {rules: [{model: m, class: a}]}\nrelocation: {max_body: 4096}\n", defaultBufferLimit},
		{"token capacity", "pools: [{name: p, protocol: openai, endpoints: [\"127.0.0.1:1\"], capacity: {max_inflight: 2, max_inflight_tokens: 1000}}]\n", config.DefaultRelocMaxBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load([]byte(tc.yaml + "listeners: [{name: l, address: \"127.0.0.1:10000\", routes: [{match: {path_prefix: /}, pool: p}]}]\n"))
			if err != nil {
				t.Fatal(err)
			}
			res, err := Build(cfg, BuildOptions{})
			if err != nil {
				t.Fatal(err)
			}
			validate(t, res)
			l := res[resource.ListenerType][0].(*listener.Listener)
			got := l.GetPerConnectionBufferLimitBytes()
			switch {
			case tc.want == 0 && got != nil:
				t.Errorf("per_connection_buffer_limit_bytes = %d, want unset", got.GetValue())
			case tc.want != 0 && got.GetValue() != tc.want:
				t.Errorf("per_connection_buffer_limit_bytes = %v, want %d", got, tc.want)
			}
		})
	}
	t.Run("out of range", func(t *testing.T) {
		cfg, err := config.Load([]byte(pools + "relocation: {http: [{header: x-prompt}]}\n" +
			"listeners: [{name: l, address: \"127.0.0.1:10000\", routes: [{match: {path_prefix: /}, pool: p}]}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Relocation.MaxBody = 1 << 33 // past what config validation lets through
		_, err = Build(cfg, BuildOptions{})
		if err == nil || !strings.Contains(err.Error(), "relocation.max_body") || !strings.Contains(err.Error(), "per_connection_buffer_limit_bytes") {
			t.Fatalf("err = %v, want one naming relocation.max_body", err)
		}
	})
}
