package epp_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// llmdEnv names llm-d's endpoint picker binary for the cross-implementation
// suite; scripts/llmd-epp/build.sh builds it.
const llmdEnv = "LLMD_EPP_BIN"

// llmdConfig is llm-d's EndpointPickerConfig for the suite: endpoints from a
// file (its file-discovery plugin, no Kubernetes), the engines' metrics
// scraped from the sims' /metrics, and the queue and KV-cache scorers with
// the max-score picker, as llm-d's load-aware examples configure them.
const llmdConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - name: file-discovery
    type: file-discovery
    parameters:
      path: %q
      watchFile: false
  - name: metrics-source
    type: metrics-data-source
  - name: metrics-extractor
    type: core-metrics-extractor
  - name: queue-scorer
    type: queue-scorer
  - name: kv-cache-scorer
    type: kv-cache-utilization-scorer
  - name: max-score-picker
    type: max-score-picker
  - name: single-profile-handler
    type: single-profile-handler
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
        weight: 1
      - pluginRef: kv-cache-scorer
        weight: 1
      - pluginRef: max-score-picker
dataLayer:
  injectDefaults: false
  discovery:
    pluginRef: file-discovery
  sources:
    - pluginRef: metrics-source
      extractors:
        - pluginRef: metrics-extractor
`

// startLlmdTarget starts llm-d's picker (LLMD_EPP_BIN) on loopback with the
// two sims as its endpoints file, plaintext, and waits for its readiness.
// Without LLMD_EPP_BIN it returns the reason the column is not run.
func startLlmdTarget(t *testing.T, sims [2]*simtest.Sim) (*eppTarget, string) {
	bin := os.Getenv(llmdEnv)
	if bin == "" {
		return nil, llmdEnv + " is not set (build llm-d's EPP with scripts/llmd-epp/build.sh, then " + llmdEnv + "=$PWD/bin/llmd-epp)"
	}
	eps := [2]string{simHost(t, sims[0]), simHost(t, sims[1])}
	dir := t.TempDir()
	endpoints := "endpoints:\n"
	for i, ep := range eps {
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			t.Fatal(err)
		}
		endpoints += fmt.Sprintf("  - name: sim-%d\n    address: %q\n    port: %q\n", i, host, port)
	}
	epFile := filepath.Join(dir, "endpoints.yaml")
	cfgFile := filepath.Join(dir, "epp.yaml")
	if err := os.WriteFile(epFile, []byte(endpoints), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(llmdConfig, epFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, healthAddr, metricsAddr := proctest.FreeAddr(t), proctest.FreeAddr(t), proctest.FreeAddr(t)
	proc := proctest.Start(t, "llm-d epp", bin,
		"--config-file="+cfgFile,
		"--pool-name=sims", "--pool-namespace=llmesh-conformance",
		"--grpc-port="+proctest.Port(t, grpcAddr),
		"--grpc-health-port="+proctest.Port(t, healthAddr),
		"--metrics-port="+proctest.Port(t, metricsAddr),
		"--secure-serving=false", "--enable-pprof=false",
		"--grpc-max-recv-msg-size=8MiB", "--grpc-max-send-msg-size=8MiB")
	dial := func(addr string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	tg := &eppTarget{
		client: epptest.ForwardMetadata(extprocv3.NewExternalProcessorClient(dial(grpcAddr))),
		health: healthpb.NewHealthClient(dial(healthAddr)),
		eps:    eps, model: sims[0].Model,
	}
	proctest.Poll{Timeout: 60 * time.Second, Interval: 50 * time.Millisecond}.Until(t, "llm-d EPP readiness", func() (bool, string) {
		r, err := tg.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: "readiness"})
		if err != nil {
			return false, err.Error()
		}
		return r.GetStatus() == healthpb.HealthCheckResponse_SERVING, r.GetStatus().String()
	}, proc)
	return tg, ""
}
