package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
)

// mesh describes the mesh configs the tests write: one listener in front of
// one sim, an OpenAI pool and a gRPC pool, one class.
type mesh struct {
	// HTTPEngine and GRPCEngine are the sim's host:port listeners.
	HTTPEngine, GRPCEngine string
	// Policy and MaxInflight are both pools' scheduler settings.
	Policy      string
	MaxInflight int
	// TTFT is the class's TTFT SLO (a Go duration string, written verbatim
	// so a test can write an invalid one).
	TTFT string
	// ServerTiming turns the server-timing header on.
	ServerTiming bool
	// SchedulerService, when set, is the shared scheduler's host:port.
	SchedulerService string
}

// yaml renders the config. Listener and admin addresses are port 0: the
// processes print what they bound.
func (m mesh) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, `listeners:
  - name: main
    address: 127.0.0.1:0
    routes:
      - {name: openai, match: {path_prefix: /v1/}, pool: engine}
      - {name: grpc, match: {path_prefix: /}, pool: engine-grpc}
pools:
  - name: engine
    protocol: openai
    endpoints: [%[1]s]
    capacity: {max_inflight: %[3]d}
    scheduler: {policy: %[4]s}
  - name: engine-grpc
    protocol: grpc
    endpoints: [%[2]s]
    capacity: {max_inflight: %[3]d}
    scheduler: {policy: %[4]s}
classes:
  - name: interactive
    priority: 0
    slo: {ttft: %[5]s, tpot: 200ms}
    queue: {max_length: 1000, max_wait: 2m}
default_class: interactive
telemetry:
  prometheus: {enabled: true}
  server_timing: %[6]t
admin:
  address: 127.0.0.1:0
`, m.HTTPEngine, m.GRPCEngine, m.MaxInflight, m.Policy, m.TTFT, m.ServerTiming)
	if m.SchedulerService != "" {
		fmt.Fprintf(&b, "scheduler_service:\n  address: %s\n  failure_mode: fail_closed\n  timeout: 30s\n", m.SchedulerService)
	}
	return b.String()
}

// newMesh is the default mesh in front of sim.
func newMesh(sim *proctest.Sim) mesh {
	return mesh{
		HTTPEngine: strings.TrimPrefix(sim.URL, "http://"), GRPCEngine: sim.GRPC,
		Policy: "fifo", MaxInflight: 16, TTFT: "2s",
	}
}

// writeMesh writes m into a new file in a fresh directory and returns its
// path.
func writeMesh(t *testing.T, m mesh) string {
	t.Helper()
	return proctest.WriteTemp(t, "mesh.yaml", m.yaml())
}
