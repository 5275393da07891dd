package control

import (
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/testkit/wait"
)

// The protocol's names are repeated here (control does not import the
// picker); they must be the picker's.
func TestExtProcNamesArePickers(t *testing.T) {
	if DestinationHeader != epp.DestinationHeader || LBNamespace != epp.LBNamespace || SubsetNamespace != epp.SubsetNamespace {
		t.Fatalf("control's protocol names (%s, %s, %s) differ from epp's (%s, %s, %s)",
			DestinationHeader, LBNamespace, SubsetNamespace, epp.DestinationHeader, epp.LBNamespace, epp.SubsetNamespace)
	}
}

func loadFile(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func byName[T proto.Message](t *testing.T, res Resources, typ resource.Type, name string) T {
	t.Helper()
	for _, r := range res[typ] {
		if cache.GetResourceName(r) == name {
			return r.(T)
		}
	}
	var zero T
	t.Fatalf("no %s %q", typ, name)
	return zero
}

// managerOf unpacks a listener's HTTP connection manager.
func managerOf(t *testing.T, l *listener.Listener) *hcm.HttpConnectionManager {
	t.Helper()
	var m hcm.HttpConnectionManager
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func TestBuildExtProc(t *testing.T) {
	cfg := loadFile(t, "testdata/ext-proc.yaml")
	res, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, res)
	if _, err := NewSnapshot("1", res); err != nil {
		t.Fatal(err)
	}
	want := map[resource.Type][]string{
		resource.ListenerType: {"std", "contrib"},
		resource.RouteType:    {"llmesh.std", "llmesh.contrib"},
		// The golang listener needs the pools' clusters; the ext_proc one
		// its picker and one ORIGINAL_DST cluster per upstream protocol.
		resource.ClusterType:  {"sims", "sims-grpc", "llmesh.epp.std", "llmesh.picked.std", "llmesh.picked-grpc.std"},
		resource.EndpointType: {"sims", "sims-grpc"},
	}
	for typ, w := range want {
		if diff := cmp.Diff(w, names(res[typ])); diff != "" {
			t.Errorf("%s names (-want +got):\n%s", typ, diff)
		}
	}

	m := managerOf(t, byName[*listener.Listener](t, res, resource.ListenerType, "std"))
	var filters []string
	var ext extprocv3.ExternalProcessor
	for _, f := range m.GetHttpFilters() {
		filters = append(filters, f.GetName())
		if f.GetName() == ExtProcFilterName {
			if err := f.GetTypedConfig().UnmarshalTo(&ext); err != nil {
				t.Fatal(err)
			}
		}
	}
	if diff := cmp.Diff([]string{"envoy.filters.http.ext_proc", "envoy.filters.http.router"}, filters); diff != "" {
		t.Fatalf("http filters (-want +got):\n%s", diff)
	}
	if m.GetRds().GetRouteConfigName() != "llmesh.std" {
		t.Errorf("route config %q", m.GetRds().GetRouteConfigName())
	}
	pm := ext.GetProcessingMode()
	if pm.GetRequestHeaderMode() != extprocv3.ProcessingMode_SEND || pm.GetResponseHeaderMode() != extprocv3.ProcessingMode_SEND ||
		pm.GetRequestBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		pm.GetResponseBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND || pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		t.Errorf("processing mode %v: full duplex bodies with trailers sent", pm)
	}
	if diff := cmp.Diff([]string{"envoy.lb.subset_hint", "envoy.lb"}, ext.GetMetadataOptions().GetForwardingNamespaces().GetUntyped()); diff != "" {
		t.Errorf("forwarded namespaces (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"envoy.lb"}, ext.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()); diff != "" {
		t.Errorf("received namespaces (-want +got):\n%s", diff)
	}
	if ext.GetFailureModeAllow() || ext.GetMessageTimeout().AsDuration() != 40*time.Second {
		t.Errorf("failure_mode_allow %v, message_timeout %v; want false, 40s", ext.GetFailureModeAllow(), ext.GetMessageTimeout().AsDuration())
	}
	if got := ext.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != "llmesh.epp.std" {
		t.Errorf("ext_proc calls cluster %q", got)
	}

	// The picker: HTTP/2, TLS verified against the CA with Envoy's client
	// certificate, found by DNS.
	picker := byName[*cluster.Cluster](t, res, resource.ClusterType, "llmesh.epp.std")
	if picker.GetType() != cluster.Cluster_STRICT_DNS {
		t.Errorf("picker cluster type %v, want STRICT_DNS for a name", picker.GetType())
	}
	if !isH2(t, picker) {
		t.Error("picker cluster is not HTTP/2")
	}
	var utc tlsv3.UpstreamTlsContext
	if err := picker.GetTransportSocket().GetTypedConfig().UnmarshalTo(&utc); err != nil {
		t.Fatalf("picker transport socket: %v", err)
	}
	vc := utc.GetCommonTlsContext().GetValidationContext()
	if utc.GetSni() != "epp.llmesh.svc" || vc.GetTrustedCa().GetFilename() != "/etc/envoy/epp-ca.pem" ||
		vc.GetMatchTypedSubjectAltNames()[0].GetMatcher().GetExact() != "epp.llmesh.svc" ||
		utc.GetCommonTlsContext().GetTlsCertificates()[0].GetPrivateKey().GetFilename() != "/etc/envoy/envoy-key.pem" {
		t.Errorf("picker TLS %v", &utc)
	}

	// The routes: the mesh's matches, each to the ORIGINAL_DST cluster of
	// its pool's protocol.
	rc := byName[*route.RouteConfiguration](t, res, resource.RouteType, "llmesh.std")
	var got []string
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		got = append(got, r.GetMatch().GetPrefix()+" → "+r.GetRoute().GetCluster())
		if len(r.GetTypedPerFilterConfig()) != 0 {
			t.Errorf("route %s has a per-filter config: the golang filter is not on this listener", r.GetName())
		}
	}
	if diff := cmp.Diff([]string{"/v1/ → llmesh.picked.std", "/ → llmesh.picked-grpc.std"}, got); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	for name, h2 := range map[string]bool{"llmesh.picked.std": false, "llmesh.picked-grpc.std": true} {
		c := byName[*cluster.Cluster](t, res, resource.ClusterType, name)
		if c.GetType() != cluster.Cluster_ORIGINAL_DST || c.GetLbPolicy() != cluster.Cluster_CLUSTER_PROVIDED ||
			!c.GetOriginalDstLbConfig().GetUseHttpHeader() || c.GetOriginalDstLbConfig().GetHttpHeaderName() != "x-gateway-destination-endpoint" {
			t.Errorf("%s: want ORIGINAL_DST by x-gateway-destination-endpoint, got %v", name, c)
		}
		if isH2(t, c) != h2 {
			t.Errorf("%s: HTTP/2 %v, want %v", name, !h2, h2)
		}
	}
	if c := byName[*cluster.Cluster](t, res, resource.ClusterType, "llmesh.picked.std"); c.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue() != 1400 {
		t.Errorf("circuit breaker %v, want 2 × the pool's max_inflight", c.GetCircuitBreakers())
	}
	if c := byName[*cluster.Cluster](t, res, resource.ClusterType, "llmesh.picked-grpc.std"); c.GetConnectTimeout().AsDuration() != 3*time.Second {
		t.Errorf("grpc connect timeout %v, want the pool's 3s", c.GetConnectTimeout().AsDuration())
	}
}

func isH2(t *testing.T, c *cluster.Cluster) bool {
	t.Helper()
	var o upstreamhttp.HttpProtocolOptions
	if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&o); err != nil {
		t.Fatalf("%s: %v", c.GetName(), err)
	}
	return o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
}

// A mesh whose listeners are all ext_proc has no pool clusters (nothing
// routes to them), and a picker at an IP address is a STATIC cluster,
// plaintext.
func TestBuildExtProcOnly(t *testing.T) {
	cfg, err := config.Load([]byte(`
listeners:
  - name: main
    address: 127.0.0.1:8081
    data_plane: ext_proc
    ext_proc: {address: 127.0.0.1:9002, failure_mode_allow: true}
    routes: [{pool: sims}]
pools:
  - {name: sims, protocol: openai, endpoints: [127.0.0.1:8000, 127.0.0.1:8001]}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, res)
	if _, err := NewSnapshot("1", res); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"llmesh.epp.main", "llmesh.picked.main"}, names(res[resource.ClusterType])); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if len(res[resource.EndpointType]) != 0 {
		t.Errorf("endpoints %v, want none", names(res[resource.EndpointType]))
	}
	picker := byName[*cluster.Cluster](t, res, resource.ClusterType, "llmesh.epp.main")
	if picker.GetType() != cluster.Cluster_STATIC || picker.GetTransportSocket() != nil {
		t.Errorf("picker cluster %v: want STATIC, plaintext", picker)
	}
	m := managerOf(t, byName[*listener.Listener](t, res, resource.ListenerType, "main"))
	var ext extprocv3.ExternalProcessor
	if err := m.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&ext); err != nil {
		t.Fatal(err)
	}
	if !ext.GetFailureModeAllow() || ext.GetMessageTimeout().AsDuration() != config.DefaultExtProcMessageTimeout {
		t.Errorf("failure_mode_allow %v, message_timeout %v", ext.GetFailureModeAllow(), ext.GetMessageTimeout().AsDuration())
	}
	if strings.Contains(string(renderResources(t, res)), "golang") {
		t.Error("an ext_proc-only mesh mentions the golang filter")
	}
}

// Adding an ext_proc listener leaves the golang listeners' resources as
// they were, byte for byte.
func TestExtProcLeavesGolangListenersAlone(t *testing.T) {
	mixed := loadFile(t, "testdata/ext-proc.yaml")
	src := *mixed.Source
	src.Listeners = src.Listeners[1:]
	alone, err := config.Compile(&src)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(mixed, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(alone, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range typeOrder {
		for _, r := range b[typ] {
			name := cache.GetResourceName(r)
			other := byName[proto.Message](t, a, typ, name)
			if typ == resource.ListenerType {
				// The filter's mesh config lists every listener; compare
				// the rest.
				continue
			}
			if !proto.Equal(r, other) {
				t.Errorf("%s %s differs with an ext_proc listener beside it", typ, name)
			}
		}
	}
}

func TestExtProcClusterNameClash(t *testing.T) {
	cfg, err := config.Load([]byte(`
listeners:
  - name: main
    address: 127.0.0.1:8081
    data_plane: ext_proc
    ext_proc: {address: 127.0.0.1:9002}
    routes: [{pool: llmesh.epp.main}]
pools:
  - {name: llmesh.epp.main, protocol: openai, endpoints: [127.0.0.1:8000]}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(cfg, BuildOptions{})
	if err == nil || !strings.Contains(err.Error(), `listener "main": cluster name "llmesh.epp.main" of the ext_proc data plane is already a pool's`) {
		t.Fatalf("err = %v", err)
	}
}

// An Envoy node on a real ADS stream gets the ext_proc data plane: the
// listener with the ext_proc filter, its routes and its clusters, no EDS,
// exactly as Build makes them, and ACKs them.
func TestADSServesExtProc(t *testing.T) {
	const mesh = `
listeners:
  - name: main
    address: 127.0.0.1:8081
    data_plane: ext_proc
    ext_proc: {address: 127.0.0.1:9002, message_timeout: 20s}
    routes: [{pool: sims}]
pools:
  - {name: sims, protocol: openai, endpoints: [127.0.0.1:8000, 127.0.0.1:8001]}
`
	p := startPlane(t, mesh, nil)
	a := dialADS(t, p.xds, "envoy-std", nil)
	want := map[string][]string{
		resource.ClusterType:  {"llmesh.epp.main", "llmesh.picked.main"},
		resource.ListenerType: {"main"},
		resource.RouteType:    {"llmesh.main"},
	}
	version := p.srv.Version()
	for _, typ := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
		var names []string
		if typ == resource.RouteType {
			names = want[typ]
		}
		a.subscribe(typ, names...)
		r := a.next(typ)
		if r.GetVersionInfo() != version {
			t.Errorf("%s version %q, want %q", typ, r.GetVersionInfo(), version)
		}
		if diff := cmp.Diff(want[typ], resourceNames(t, r)); diff != "" {
			t.Errorf("%s resources (-want +got):\n%s", typ, diff)
		}
		a.answer(r, names, "")
	}
	wait.Until(t, "ACKs recorded", func() bool {
		ns := p.srv.Nodes()
		if len(ns) != 1 || ns[0].ID != "envoy-std" || len(ns[0].Types) != 3 {
			return false
		}
		for _, ts := range ns[0].Types {
			if ts.Acked != version || ts.Nacked != "" {
				return false
			}
		}
		return true
	})
	built, err := Build(p.srv.Config(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
		for _, any := range a.last[typ].GetResources() {
			m, err := any.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(m, byName[proto.Message](t, built, typ, cache.GetResourceName(m))) {
				t.Errorf("served %s %s differs from Build's", typ, cache.GetResourceName(m))
			}
		}
	}
	var l listener.Listener
	if err := a.last[resource.ListenerType].GetResources()[0].UnmarshalTo(&l); err != nil {
		t.Fatal(err)
	}
	var ext extprocv3.ExternalProcessor
	if err := managerOf(t, &l).GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&ext); err != nil {
		t.Fatalf("the served listener's first filter is not ext_proc: %v", err)
	}
	if ext.GetMessageTimeout().AsDuration() != 20*time.Second || ext.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "llmesh.epp.main" {
		t.Errorf("served ext_proc config %v", &ext)
	}
}
