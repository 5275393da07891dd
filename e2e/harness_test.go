package e2e

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
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

// metricSum sums every sample of one metric (all label sets) in Prometheus
// text exposition; found is false when no sample has that name.
func metricSum(text, name string) (sum float64, found bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer name with this prefix
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}
