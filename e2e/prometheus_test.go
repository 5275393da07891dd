package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
)

// TestPrometheusScrape runs a real Prometheus server scraping the gateway's
// admin /metrics and the sim's /metrics every second, drives traffic
// through the gateway, and queries Prometheus's HTTP API until the gateway's
// TTFT histogram (gen_ai_server_time_to_first_token_seconds, docs/metrics.md)
// and the engine's (vllm:time_to_first_token_seconds) both count every
// request: the exported names and formats survive a real scraper.
func TestPrometheusScrape(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus; `make e2e-deps` installs it): skipping the real-Prometheus scrape test")
	}
	sim := startSim(t, "sim")
	gw := startGateway(t, "gateway", "--upstream", sim.URL, "--grpc-upstream", sim.GRPC)

	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: llmesh-gateway
    static_configs: [{targets: [%q]}]
  - job_name: llmesh-sim
    static_configs: [{targets: [%q]}]
`, gw.Admin, sim.URL[len("http://"):])
	cfgPath := proctest.WriteTemp(t, "prometheus.yml", cfg)
	promAddr := proctest.FreeAddr(t)
	prom := proctest.Start(t, "prometheus", promBin, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr, "--log.level=warn")
	promURL := "http://" + promAddr
	proctest.WaitHTTP(t, promURL+"/-/ready", prom)

	const requests = 10
	b := runBench(t, gw.URL(), "--model", sim.Model, "--requests", strconv.Itoa(requests),
		"--concurrency", "4", "--prompt-tokens", "64", "--max-tokens", "16")
	b.checkAllOK(t, requests, 16)

	for _, q := range []string{
		`sum(gen_ai_server_time_to_first_token_seconds_count{job="llmesh-gateway"})`,
		`sum({__name__="vllm:time_to_first_token_seconds_count",job="llmesh-sim"})`,
	} {
		var got float64
		proctest.WaitFor(t, "Prometheus to answer "+q+" with the request count", func() bool {
			v, ok := promQuery(promURL, q)
			got = v
			return ok && v >= requests
		}, prom, gw.Proc, sim.Proc)
		if got != requests {
			t.Errorf("%s = %v, want %d", q, got, requests)
		}
	}
	// Both targets were scraped as healthy.
	if v, ok := promQuery(promURL, `sum(up{job=~"llmesh-gateway|llmesh-sim"})`); !ok || v != 2 {
		t.Errorf("sum(up) over both jobs = %v (ok %v), want 2", v, ok)
	}
}

// promQuery runs an instant query that yields one sample and returns its
// value; ok is false while Prometheus has no such sample yet.
func promQuery(base, query string) (float64, bool) {
	body, err := proctest.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return 0, false
	}
	var resp struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(body), &resp) != nil || resp.Status != "success" || len(resp.Data.Result) != 1 {
		return 0, false
	}
	s, _ := resp.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}
