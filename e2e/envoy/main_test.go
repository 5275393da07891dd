package envoy_test

import (
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
)

// bins builds llmesh-filter.so (c-shared, so cgo) and llmesh once for all
// the real-Envoy tests.
var bins = proctest.Builder{Env: []string{"CGO_ENABLED=1"}}

func TestMain(m *testing.M) { proctest.Main(m, bins.Close) }
