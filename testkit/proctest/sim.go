package proctest

import (
	"regexp"
	"testing"
)

// Sim is a running `llmesh sim` process.
type Sim struct {
	*Proc
	// URL is the OpenAI HTTP base (http://127.0.0.1:port), GRPC the gRPC
	// listener's host:port, Model the served model name.
	URL, GRPC, Model string
}

// The lines `llmesh sim` prints once it listens (cmd/llmesh/sim.go).
var (
	simModelRE = regexp.MustCompile(`llmesh sim: model (\S+),`)
	simHTTPRE  = regexp.MustCompile(`llmesh sim: http on (http://\S+)`)
	simGRPCRE  = regexp.MustCompile(`llmesh sim: grpc on (\S+)`)
)

// StartSim runs `bin sim` (bin is a built llmesh) with its HTTP and gRPC
// listeners on 127.0.0.1:0 plus extra flags, reads the addresses it
// printed, and waits until it answers /health.
func StartSim(t testing.TB, bin, name string, extra ...string) *Sim {
	t.Helper()
	args := append([]string{"sim", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"}, extra...)
	p := Start(t, name, bin, args...)
	s := &Sim{Proc: p}
	s.Model = p.WaitOutput(t, simModelRE)[1]
	s.URL = p.WaitOutput(t, simHTTPRE)[1]
	s.GRPC = p.WaitOutput(t, simGRPCRE)[1]
	WaitHTTP(t, s.URL+"/health", p)
	return s
}
