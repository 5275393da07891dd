package gatewayproc

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/testkit/gatewaytest"
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

const (
	expMesh   = gatewaytest.ExpMesh
	relocMesh = gatewaytest.RelocMesh
)
