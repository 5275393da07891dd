// Command llmesh-filter is llmesh as an Envoy golang HTTP filter: built
// with `make filter` (go build -buildmode=c-shared) into llmesh-filter.so,
// loaded by Envoy contrib v1.36 through envoy.filters.http.golang with
// plugin_name "llmesh". See docs/envoy.md.
//
// Only this package imports the SDK's registration package: its init calls
// into Envoy, so no test binary may import it.
package main

import (
	"github.com/envoyproxy/envoy/contrib/golang/filters/http/source/go/pkg/http"

	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/envoyfilter/process"
)

// Process-wide: every config Envoy parses shares the scheduler set (or the
// shared-service clients) and the OTLP pipelines of identical settings.
var (
	schedulers = &process.Schedulers{}
	telemetry  = &process.Telemetry{}
)

func init() {
	p := envoyfilter.New(process.Env(schedulers, telemetry))
	http.RegisterHttpFilterFactoryAndConfigParser(envoyfilter.Name, p.Factory, p)
}

// main is required by -buildmode=c-shared and never runs.
func main() {}
