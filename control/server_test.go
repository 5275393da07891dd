package control

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/goleak"
	status "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLimit = 30 * time.Second

// plane is a control plane running on loopback for one test, with its
// admin API served as cmd/llmesh/controlproc serves it.
type plane struct {
	t     *testing.T
	srv   *Server
	xds   string
	admin string
}

func startPlane(t *testing.T, configYAML string, tlsCfg *tls.Config) *plane {
	t.Helper()
	p := &plane{t: t}
	srv, err := New(loadYAML(t, configYAML), Options{TLS: tlsCfg, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p.srv = srv
	xl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.xds, p.admin = xl.Addr().String(), al.Addr().String()
	hs := &http.Server{Handler: srv.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ctx, xl) }()
	go func() {
		if err := hs.Serve(al); err != http.ErrServerClosed {
			done <- err
			return
		}
		done <- nil
	}()
	t.Cleanup(func() {
		cancel()
		hs.Close()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
	})
	return p
}

func loadYAML(t *testing.T, src string) *config.Config {
	t.Helper()
	c, err := config.Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// reload gives the server src as a changed file's config.
func (p *plane) reload(src string) error { return p.srv.Reload(loadYAML(p.t, src)) }

func exampleYAML(t *testing.T) string {
	b, err := os.ReadFile("../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// adsStream is a real ADS client stream with a receiving goroutine, so
// waits can time out.
type adsStream struct {
	t       *testing.T
	node    *core.Node
	stream  discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	resps   chan *discovery.DiscoveryResponse
	pending []*discovery.DiscoveryResponse
	last    map[string]*discovery.DiscoveryResponse
}

func dialADS(t *testing.T, addr, nodeID string, creds credentials.TransportCredentials) *adsStream {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := &adsStream{
		t: t, stream: stream, node: &core.Node{Id: nodeID, Cluster: "test"},
		resps: make(chan *discovery.DiscoveryResponse, 64),
		last:  map[string]*discovery.DiscoveryResponse{},
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(a.resps)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			a.resps <- r
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		conn.Close()
	})
	return a
}

// subscribe sends the initial request for a type.
func (a *adsStream) subscribe(typeURL string, names ...string) {
	a.t.Helper()
	if err := a.stream.Send(&discovery.DiscoveryRequest{Node: a.node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		a.t.Fatal(err)
	}
}

// answer ACKs (nack == "") or NACKs the last response of its type.
func (a *adsStream) answer(r *discovery.DiscoveryResponse, names []string, nack string) {
	a.t.Helper()
	req := &discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce(), ResourceNames: names}
	if nack == "" {
		req.VersionInfo = r.GetVersionInfo()
		a.last[r.GetTypeUrl()] = r
	} else {
		req.VersionInfo = a.last[r.GetTypeUrl()].GetVersionInfo()
		req.ErrorDetail = &status.Status{Code: 3, Message: nack}
	}
	if err := a.stream.Send(req); err != nil {
		a.t.Fatal(err)
	}
}

// next returns the next response of typeURL.
func (a *adsStream) next(typeURL string) *discovery.DiscoveryResponse {
	a.t.Helper()
	for i, r := range a.pending {
		if r.GetTypeUrl() == typeURL {
			a.pending = append(a.pending[:i], a.pending[i+1:]...)
			return r
		}
	}
	timeout := time.After(waitLimit)
	for {
		select {
		case r, ok := <-a.resps:
			if !ok {
				a.t.Fatalf("stream closed waiting for %s", typeURL)
			}
			if r.GetTypeUrl() == typeURL {
				return r
			}
			a.pending = append(a.pending, r)
		case <-timeout:
			a.t.Fatalf("no %s response within %v", typeURL, waitLimit)
		}
	}
}

func resourceNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cache.GetResourceName(m))
	}
	sort.Strings(out)
	return out
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func TestADSServesResources(t *testing.T) {
	p := startPlane(t, exampleYAML(t), nil)
	a := dialADS(t, p.xds, "envoy-1", nil)
	want := map[string][]string{
		resource.ClusterType:  {"sim", "sim-grpc", "sim.arm-fifo", "sim.arm-preemptive"},
		resource.EndpointType: {"sim", "sim-grpc", "sim.arm-fifo", "sim.arm-preemptive"},
		resource.ListenerType: {"main"},
		resource.RouteType:    {"llmesh.main"},
	}
	version := p.srv.Version()
	// Envoy's order: CDS, then EDS for the clusters, LDS, then RDS.
	for _, typ := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		var names []string
		if typ == resource.EndpointType || typ == resource.RouteType {
			names = want[typ]
		}
		a.subscribe(typ, names...)
		r := a.next(typ)
		if r.GetVersionInfo() != version {
			t.Errorf("%s version %q, want %q", typ, r.GetVersionInfo(), version)
		}
		got := resourceNames(t, r)
		if strings.Join(got, ",") != strings.Join(want[typ], ",") {
			t.Errorf("%s resources %v, want %v", typ, got, want[typ])
		}
		a.answer(r, names, "")
	}
	// The served clusters are the ones Build makes, byte for byte.
	res, err := Build(p.srv.Config(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "ACKs recorded", func() bool {
		ns := p.srv.Nodes()
		if len(ns) != 1 || ns[0].ID != "envoy-1" || len(ns[0].Types) != 4 {
			return false
		}
		for _, ts := range ns[0].Types {
			if ts.Acked != version || ts.Nacked != "" {
				return false
			}
		}
		return true
	})
	built := map[string]proto.Message{}
	for _, r := range res[resource.ClusterType] {
		built[cache.GetResourceName(r)] = r
	}
	for _, any := range a.last[resource.ClusterType].GetResources() {
		var c cluster.Cluster
		if err := any.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&c, built[c.GetName()]) {
			t.Errorf("served cluster %s differs from Build's", c.GetName())
		}
	}
}

// subscribeAll subscribes to all four types and ACKs the first responses.
func subscribeAll(t *testing.T, a *adsStream) map[string]*discovery.DiscoveryResponse {
	t.Helper()
	out := map[string]*discovery.DiscoveryResponse{}
	for _, typ := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
		var names []string
		if typ == resource.RouteType {
			names = []string{"llmesh.main"}
		}
		a.subscribe(typ, names...)
		r := a.next(typ)
		a.answer(r, names, "")
		out[typ] = r
	}
	return out
}

// A reload bumps the version; one that does not build is rejected (shown
// by /version) and the old snapshot stays. cmd/llmesh/controlproc tests
// the file watcher that calls Reload.
func TestReloadBumpsVersionAndInvalidKeepsOld(t *testing.T) {
	src := exampleYAML(t)
	p := startPlane(t, src, nil)
	a := dialADS(t, p.xds, "envoy-1", nil)
	first := subscribeAll(t, a)
	v1 := first[resource.ClusterType].GetVersionInfo()

	// A valid change: the gRPC pool gets a second endpoint.
	changed := replaceOnce(t, src, "endpoints: [127.0.0.1:9000]", "endpoints: [127.0.0.1:9000, 127.0.0.2:9000]")
	if err := p.reload(changed); err != nil {
		t.Fatal(err)
	}
	r := a.next(resource.ClusterType)
	v2 := r.GetVersionInfo()
	if v2 == v1 || !strings.HasPrefix(v2, "2-") {
		t.Fatalf("version after change = %q (was %q), want 2-…", v2, v1)
	}
	a.answer(r, nil, "")

	// A config that loads but does not build: rejected; the old snapshot stays.
	const clash = `
pools:
  - {name: p, protocol: openai, endpoints: ["127.0.0.1:1"]}
  - {name: p.arm-x, protocol: openai, endpoints: ["127.0.0.1:2"]}
experiments:
  - {name: e, pool: p, arms: [{name: x}]}
`
	if err := p.reload(clash); err == nil {
		t.Fatal("a config that does not build was applied")
	}
	var vi VersionInfo
	getJSON(t, "http://"+p.admin+"/version", &vi)
	if !strings.Contains(vi.LastError, `needs pool name "p.arm-x", which is already taken`) || vi.Rejected != 1 {
		t.Errorf("/version after the rejected change: %+v", vi)
	}
	if vi.Version != v2 || p.srv.Version() != v2 {
		t.Fatalf("version after invalid change = %q, want %q kept", vi.Version, v2)
	}
	// The stream got nothing new: a later valid change is the next response.
	fixed := replaceOnce(t, changed, "max_inflight: 32\n    scheduler:\n      policy: priority", "max_inflight: 16\n    scheduler:\n      policy: priority")
	if err := p.reload(fixed); err != nil {
		t.Fatal(err)
	}
	r = a.next(resource.ClusterType)
	if !strings.HasPrefix(r.GetVersionInfo(), "3-") {
		t.Fatalf("version after fix = %q, want 3-…", r.GetVersionInfo())
	}
	var after VersionInfo
	getJSON(t, "http://"+p.admin+"/version", &after)
	if after.LastError != "" || after.Rejected != 1 {
		t.Errorf("after recovery: %+v", after)
	}
}

func TestNACKRecorded(t *testing.T) {
	p := startPlane(t, exampleYAML(t), nil)
	a := dialADS(t, p.xds, "envoy-nack", nil)
	a.subscribe(resource.ListenerType)
	r := a.next(resource.ListenerType)
	a.answer(r, nil, "golang filter failed to parse plugin config")
	var got struct {
		Version string       `json:"version"`
		Nodes   []NodeStatus `json:"nodes"`
	}
	wait.Until(t, "NACK in /nodes", func() bool {
		getJSON(t, "http://"+p.admin+"/nodes", &got)
		return len(got.Nodes) == 1 && len(got.Nodes[0].Types) == 1 && got.Nodes[0].Types[0].Nacked != ""
	})
	ts := got.Nodes[0].Types[0]
	if got.Nodes[0].ID != "envoy-nack" || ts.TypeURL != resource.ListenerType || ts.Nacked != r.GetVersionInfo() ||
		ts.Error != "golang filter failed to parse plugin config" || ts.Acked != "" || ts.Sent != r.GetVersionInfo() {
		t.Errorf("node status = %+v", got.Nodes[0])
	}
}

func TestSwitchActiveArm(t *testing.T) {
	p := startPlane(t, exampleYAML(t), nil)
	a := dialADS(t, p.xds, "envoy-1", nil)
	first := subscribeAll(t, a)
	if n := countWeighted(t, first[resource.RouteType]); n != 2 {
		t.Fatalf("weighted routes before the switch = %d, want 2", n)
	}

	post := func(path, body string) (int, map[string]string) {
		resp, err := http.Post("http://"+p.admin+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]string
		json.NewDecoder(resp.Body).Decode(&out) //nolint:errcheck // checked by callers
		return resp.StatusCode, out
	}
	// A cross-site request as a browser sends it from another site
	// (adminapi.Guard): refused, nothing published.
	xs, _ := http.NewRequest(http.MethodPost, "http://"+p.admin+"/experiments/policy-ab/active?arm=fifo", strings.NewReader("x"))
	xs.Header.Set("Content-Type", "text/plain")
	xs.Header.Set("Origin", "http://evil.example")
	xres, err := http.DefaultClient.Do(xs)
	if err != nil {
		t.Fatal(err)
	}
	xres.Body.Close()
	if xres.StatusCode != http.StatusForbidden || !strings.HasPrefix(p.srv.Version(), "1-") || p.srv.Config().Experiment("policy-ab").Active != nil {
		t.Fatalf("cross-site switch: %d, version %s, active %v; want 403 and nothing published", xres.StatusCode, p.srv.Version(), p.srv.Config().Experiment("policy-ab").Active)
	}
	if code, out := post("/experiments/policy-ab/active", `{"arm": "nope"}`); code != http.StatusBadRequest || !strings.Contains(out["error"], `no arm "nope"`) {
		t.Errorf("unknown arm: %d %v", code, out)
	}
	if code, out := post("/experiments/policy-ab/active", `{"arn": "fifo"}`); code != http.StatusBadRequest || !strings.Contains(out["error"], "unknown field") {
		t.Errorf("bad body: %d %v", code, out)
	}
	code, out := post("/experiments/policy-ab/active", `{"arm": "preemptive"}`)
	if code != http.StatusOK || !strings.HasPrefix(out["version"], "2-") {
		t.Fatalf("switch: %d %v", code, out)
	}
	r := a.next(resource.RouteType)
	if r.GetVersionInfo() != out["version"] {
		t.Errorf("route version %q, want %q", r.GetVersionInfo(), out["version"])
	}
	if n := countWeighted(t, r); n != 0 {
		t.Errorf("weighted routes after the switch = %d, want 0", n)
	}
	if got := clustersOf(t, r); strings.Join(got, ",") != "sim.arm-preemptive,sim.arm-preemptive,sim-grpc" {
		t.Errorf("clusters after the switch = %v", got)
	}
	var ex struct {
		Experiments []ExperimentInfo `json:"experiments"`
	}
	getJSON(t, "http://"+p.admin+"/experiments", &ex)
	if len(ex.Experiments) != 1 || ex.Experiments[0].Active != "preemptive" || !ex.Experiments[0].Switched {
		t.Errorf("experiments = %+v", ex.Experiments)
	}

	// The switch survives a file reload.
	a.answer(r, []string{"llmesh.main"}, "")
	src := replaceOnce(t, exampleYAML(t), "max_inflight: 32\n      max_inflight_tokens", "max_inflight: 31\n      max_inflight_tokens")
	if err := p.reload(src); err != nil {
		t.Fatal(err)
	}
	if v := p.srv.Version(); !strings.HasPrefix(v, "3-") {
		t.Fatalf("version after the reload = %q, want 3-…", v)
	}
	if e := p.srv.Config().Experiment("policy-ab"); e.Active == nil || e.Active.Name != "preemptive" {
		t.Error("switch lost on reload")
	}

	// DELETE drops the switch.
	req, _ := http.NewRequest(http.MethodDelete, "http://"+p.admin+"/experiments/policy-ab/active", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if e := p.srv.Config().Experiment("policy-ab"); e.Active != nil || !strings.HasPrefix(p.srv.Version(), "4-") {
		t.Errorf("after DELETE: active=%v version=%s", e.Active, p.srv.Version())
	}
}

func routesOf(t *testing.T, r *discovery.DiscoveryResponse) []*route.Route {
	t.Helper()
	var rc route.RouteConfiguration
	if err := r.GetResources()[0].UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	return rc.GetVirtualHosts()[0].GetRoutes()
}

func countWeighted(t *testing.T, r *discovery.DiscoveryResponse) int {
	n := 0
	for _, rt := range routesOf(t, r) {
		if rt.GetRoute().GetWeightedClusters() != nil {
			n++
		}
	}
	return n
}

func clustersOf(t *testing.T, r *discovery.DiscoveryResponse) []string {
	var out []string
	for _, rt := range routesOf(t, r) {
		out = append(out, rt.GetRoute().GetCluster())
	}
	return out
}

func TestAdminConfigAndHealth(t *testing.T) {
	p := startPlane(t, exampleYAML(t), nil)
	resp, err := http.Get("http://" + p.admin + "/config")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Llmesh-Version") != p.srv.Version() || !strings.Contains(string(b), "name: policy-ab") {
		t.Errorf("/config: version %q body %.200s", resp.Header.Get("X-Llmesh-Version"), b)
	}
	if _, err := config.Load(b); err != nil {
		t.Errorf("/config output does not load back: %v", err)
	}
	resp, err = http.Get("http://" + p.admin + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// tWriter sends log lines to the test log, shown only when a test fails.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// replaceOnce replaces old in s, failing when the example no longer has it.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("%q occurs %d times; update the test to the example", old, strings.Count(s, old))
	}
	return strings.Replace(s, old, new, 1)
}

// TestConcurrentSwitchesAndReloads races admin switches against
// reloads; versions must keep rising and every snapshot must be served
// consistently (checked by -race and by the final state).
func TestConcurrentSwitchesAndReloads(t *testing.T) {
	src := exampleYAML(t)
	p := startPlane(t, src, nil)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 21; i++ { // ends with "" (split)
			arm := []string{"fifo", "preemptive", ""}[i%3]
			if _, err := p.srv.SetActiveArm("policy-ab", arm); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 10; i++ {
			s := replaceOnce(t, src, "max_inflight: 32\n      max_inflight_tokens", fmt.Sprintf("max_inflight: %d\n      max_inflight_tokens", 40+i))
			c, err := config.Load([]byte(s))
			if err != nil {
				t.Error(err)
				return
			}
			if err := p.srv.Reload(c); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	if got := p.srv.Config().Pool("sim").MaxInflight; got != 49 {
		t.Errorf("max_inflight after the last reload = %d, want 49", got)
	}
	seq := func(v string) int {
		n, _ := strconv.Atoi(v[:strings.IndexByte(v, '-')])
		return n
	}
	if got := seq(p.srv.Version()); got < 22 {
		t.Errorf("version sequence %d after 21 switches and reloads", got)
	}
	if e := p.srv.Config().Experiment("policy-ab"); e.Active != nil {
		t.Errorf("last switch was \"\" (split), active = %s", e.Active.Name)
	}
}
