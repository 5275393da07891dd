package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
)

func TestPassAcceptEncodingForwardsClientValue(t *testing.T) {
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer up.Close()
	_, base := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL, PassAcceptEncoding: true}}})
	req := mustReq(context.Background(), base+"/v1/completions", `{"model":"m","prompt":"x"}`)
	req.Header.Set("Accept-Encoding", "br")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if s := <-got; s != "br" {
		t.Errorf("upstream Accept-Encoding = %q, want the client's br with PassAcceptEncoding", s)
	}
}

// A listener's limits in the mesh file reach the gateway's config; bad
// ones are refused naming the field.
func TestMeshListenerLimits(t *testing.T) {
	mesh := func(limits string) (*config.Config, error) {
		return config.Load([]byte(`
listeners:
  - name: main
    address: 127.0.0.1:0
    routes: [{pool: p}]
    limits: ` + limits + `
pools:
  - {name: p, protocol: openai, endpoints: [127.0.0.1:1]}
classes: [{name: default}]
`))
	}
	c, err := mesh(`{body_timeout: 5s, body_budget_bytes: 1048576, write_timeout: "off", max_conns_per_client: 8, max_streams_per_conn: -1}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMesh(c, "")
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{BodyTimeout: 5 * time.Second, BodyBudget: 1 << 20, ClientWriteTimeout: -1, MaxConnsPerClient: 8, MaxStreamsPerConn: -1}
	if cfg.Limits != want {
		t.Fatalf("limits %+v, want %+v", cfg.Limits, want)
	}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	for bad, field := range map[string]string{
		`{body_timeout: soon}`:       "listeners[0].limits.body_timeout",
		`{body_budget_bytes: 100}`:   "listeners[0].limits.body_budget_bytes",
		`{max_conns_per_client: -5}`: "listeners[0].limits.max_conns_per_client",
		`{max_streams_per_conn: -2}`: "listeners[0].limits.max_streams_per_conn",
	} {
		if _, err := mesh(bad); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("limits %s: error %v, want one naming %s", bad, err, field)
		}
	}
}
