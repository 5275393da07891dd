package e2e

import (
	"net/http"
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
)

// bins builds the llmesh binary once for the whole package, without -race:
// the processes under test run as they would in production.
var bins proctest.Builder

func TestMain(m *testing.M) {
	// Idle keep-alive connections to processes that are gone are closed
	// before the leak check.
	proctest.Main(m, bins.Close, http.DefaultTransport.(*http.Transport).CloseIdleConnections)
}

// llmesh is the path of the built llmesh binary.
func llmesh(t testing.TB) string {
	t.Helper()
	return bins.Build(t, "llmesh", "../cmd/llmesh")
}

// start runs `llmesh args...` until the test ends.
func start(t *testing.T, name string, args ...string) *proctest.Proc {
	t.Helper()
	return proctest.Start(t, name, llmesh(t), args...)
}
