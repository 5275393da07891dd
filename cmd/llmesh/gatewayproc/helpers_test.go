package gatewayproc

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/testkit/gatewaytest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The request helpers of the gateway package's own tests (testkit/gatewaytest):
// the tests here send the same requests to a whole gateway process.
var (
	readSSE     = gatewaytest.ReadSSE
	sseUpstream = gatewaytest.SSEUpstream
	post        = gatewaytest.Post
	simMetric   = gatewaytest.SimMetric
	completion  = gatewaytest.Completion
	expMeshFor  = gatewaytest.ExpMeshFor
	complete    = gatewaytest.Complete
	mustReq     = gatewaytest.MustReq
)

// scrapes polls what needs an HTTP round trip (an admin /metrics, a
// completion) less often than the default: each check costs the gateway
// under test real work.
var scrapes = wait.Poll{Interval: 10 * time.Millisecond}

const (
	expMesh   = gatewaytest.ExpMesh
	relocMesh = gatewaytest.RelocMesh
)
