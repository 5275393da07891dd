package control

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/llmesh/llmesh/config"
)

// BuildOptions tune the generated Envoy resources. The zero value is usable.
type BuildOptions struct {
	// LibraryPath is where Envoy loads llmesh-filter.so from; "" means
	// DefaultLibraryPath.
	LibraryPath string
}

func (o BuildOptions) libraryPath() string {
	if o.LibraryPath == "" {
		return DefaultLibraryPath
	}
	return o.LibraryPath
}

// Resources is one complete set of Envoy resources, by xDS type URL.
type Resources map[resource.Type][]types.Resource

const (
	// defaultHeadersKB is Envoy's default max_request_headers_kb.
	defaultHeadersKB = 60
	// maxHeadersKB is the largest value Envoy accepts.
	maxHeadersKB = 8192
	// routeConfigPrefix names a listener's RouteConfiguration.
	routeConfigPrefix = "llmesh."
)

// Build turns a compiled mesh config into Envoy LDS, RDS, CDS and EDS
// resources. It is pure: the same config gives the same resources, in a
// stable order.
func Build(cfg *config.Config, opts BuildOptions) (Resources, error) {
	em, err := envoyMesh(cfg)
	if err != nil {
		return nil, err
	}
	mesh, err := meshJSON(em)
	if err != nil {
		return nil, err
	}
	res := Resources{}
	arms := map[*config.Pool][]config.ArmPool{}
	for _, ap := range cfg.ArmPools() {
		arms[ap.Experiment.Pool] = append(arms[ap.Experiment.Pool], ap)
	}
	// Cluster names the pools (and their arms) take, which the ext_proc
	// data plane's clusters must not reuse.
	taken := map[string]bool{}
	golangPools := usesGolang(cfg)
	for _, p := range cfg.Pools {
		// The pool's cluster, then one per experiment arm (same endpoints).
		for _, name := range append([]string{p.Name}, armNames(arms[p])...) {
			taken[name] = true
			if !golangPools {
				// Only the golang filter sends requests to the pools'
				// clusters; ext_proc listeners send them to the picked
				// address.
				continue
			}
			c, cla := buildCluster(name, p)
			res[resource.ClusterType] = append(res[resource.ClusterType], c)
			if cla != nil {
				res[resource.EndpointType] = append(res[resource.EndpointType], cla)
			}
		}
	}
	for _, l := range cfg.Listeners {
		if l.DataPlane == config.DataPlaneExtProc {
			if err := buildExtProc(res, cfg, l, taken); err != nil {
				return nil, fmt.Errorf("control: listener %q: %w", l.Name, err)
			}
			continue
		}
		rc, err := buildRoutes(l)
		if err != nil {
			return nil, fmt.Errorf("control: listener %q: %w", l.Name, err)
		}
		res[resource.RouteType] = append(res[resource.RouteType], rc)
		ln, err := buildListener(cfg, mesh, l, opts)
		if err != nil {
			return nil, fmt.Errorf("control: listener %q: %w", l.Name, err)
		}
		res[resource.ListenerType] = append(res[resource.ListenerType], ln)
	}
	return res, nil
}

// adsSource points Envoy back at the ADS stream for RDS and EDS.
func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

// buildCluster makes the cluster for a pool (or an arm of it, under
// another name). Pools whose endpoints are all IP addresses use EDS, so
// endpoint changes do not restart the cluster; others use STRICT_DNS with
// inline endpoints because EDS carries addresses, not names.
func buildCluster(name string, p *config.Pool) (*cluster.Cluster, *endpoint.ClusterLoadAssignment) {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	lbs := make([]*endpoint.LbEndpoint, 0, len(p.Endpoints))
	allIPs := true
	for _, e := range p.Endpoints {
		if _, err := netip.ParseAddr(e.Host); err != nil {
			allIPs = false
		}
		lbs = append(lbs, &endpoint.LbEndpoint{
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: socketAddress(e.Host, e.Port),
			}},
		})
	}
	cla.Endpoints = []*endpoint.LocalityLbEndpoints{{LbEndpoints: lbs}}

	opts := &upstreamhttp.HttpProtocolOptions{}
	if p.Protocol == config.ProtocolGRPC {
		// gRPC needs HTTP/2 upstream; the engine speaks h2c.
		opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &core.Http2ProtocolOptions{},
				},
			},
		}
	} else {
		opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{
					HttpProtocolOptions: &core.Http1ProtocolOptions{},
				},
			},
		}
	}
	c := &cluster.Cluster{
		Name:           name,
		ConnectTimeout: durationpb.New(p.ConnectTimeout),
		LbPolicy:       cluster.Cluster_LEAST_REQUEST,
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(opts),
		},
		// The scheduler bounds what is in flight; Envoy's default circuit
		// breakers (1024) must not undercut it.
		CircuitBreakers: &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
			MaxConnections:     wrapperspb.UInt32(uint32(max(1024, 2*p.MaxInflight))),
			MaxPendingRequests: wrapperspb.UInt32(uint32(max(1024, 2*p.MaxInflight))),
			MaxRequests:        wrapperspb.UInt32(uint32(max(1024, 2*p.MaxInflight))),
		}}},
	}
	honourOverride(c, p)
	if allIPs {
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
		c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource()}
		return c, cla
	}
	c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STRICT_DNS}
	c.LoadAssignment = cla
	return c, nil
}

func socketAddress(host string, port int) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address:       host,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

// buildRoutes makes a listener's RouteConfiguration: config routes in
// order; a route on a pool with an experiment becomes one route per arm
// with header matches (unless an arm is active) followed by the route
// itself, split over the arms' clusters by weight.
func buildRoutes(l *config.Listener) (*route.RouteConfiguration, error) {
	var routes []*route.Route
	for _, r := range l.Routes {
		e := r.Experiment
		if e == nil {
			rt, err := envoyRoute(r.ID, r, nil, r.Pool.Name)
			if err != nil {
				return nil, err
			}
			routes = append(routes, rt)
			continue
		}
		if e.Active == nil {
			for _, a := range e.Arms {
				if len(a.Headers) == 0 {
					continue
				}
				rt, err := envoyRoute(r.ID+"/arm-"+a.Name, r, a.Headers, armPoolName(r.Pool.Name, a.Name))
				if err != nil {
					return nil, err
				}
				routes = append(routes, rt)
			}
		}
		var split []*config.Arm
		switch {
		case e.Active != nil:
			split = []*config.Arm{e.Active}
		case e.TotalWeight() == 0:
			split = []*config.Arm{e.Arms[0]}
		default:
			for _, a := range e.Arms {
				if a.Weight > 0 {
					split = append(split, a)
				}
			}
		}
		if len(split) == 1 {
			rt, err := envoyRoute(r.ID, r, nil, armPoolName(r.Pool.Name, split[0].Name))
			if err != nil {
				return nil, err
			}
			routes = append(routes, rt)
			continue
		}
		rt, err := envoyRoute(r.ID, r, nil, r.Pool.Name)
		if err != nil {
			return nil, err
		}
		wc := &route.WeightedCluster{}
		for _, a := range split {
			name := armPoolName(r.Pool.Name, a.Name)
			pf, err := routeFilterConfig(name, r.Class)
			if err != nil {
				return nil, err
			}
			wc.Clusters = append(wc.Clusters, &route.WeightedCluster_ClusterWeight{
				Name:                 name,
				Weight:               wrapperspb.UInt32(uint32(a.Weight)),
				TypedPerFilterConfig: map[string]*anypb.Any{GolangFilterName: pf},
			})
		}
		rt.GetRoute().ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
		routes = append(routes, rt)
	}
	return &route.RouteConfiguration{
		Name: routeConfigPrefix + l.Name,
		VirtualHosts: []*route.VirtualHost{{
			Name:    l.Name,
			Domains: []string{"*"},
			Routes:  routes,
		}},
	}, nil
}

// envoyRoute is one Envoy route sending r's matches (plus extra headers) to
// cluster, with the per-route filter config naming the same pool.
func envoyRoute(name string, r *config.Route, extra map[string]string, cluster string) (*route.Route, error) {
	pf, err := routeFilterConfig(cluster, r.Class)
	if err != nil {
		return nil, err
	}
	m := &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: r.PathPrefix}}
	m.Headers = append(headerMatchers(r.Headers), headerMatchers(extra)...)
	m.Headers = append(m.Headers, protocolMatcher(r.Match().GRPC))
	return &route.Route{
		Name:  name,
		Match: m,
		Action: &route.Route_Route{Route: &route.RouteAction{
			ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster},
			// Generations stream for minutes: no overall route timeout;
			// stalls are caught by the stream idle timeout.
			Timeout: durationpb.New(0),
		}},
		TypedPerFilterConfig: map[string]*anypb.Any{GolangFilterName: pf},
	}, nil
}

// protocolMatcher makes Envoy route by the rule both llmesh hosts route by
// (config.RouteMatch): a route to a gRPC pool takes gRPC requests only
// (content-type application/grpc…), a route to any other pool the rest,
// requests without a content-type included.
func protocolMatcher(grpc bool) *route.HeaderMatcher {
	return &route.HeaderMatcher{
		Name: "content-type",
		HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "application/grpc"},
		}},
		InvertMatch:               !grpc,
		TreatMissingHeaderAsEmpty: !grpc,
	}
}

func headerMatchers(h map[string]string) []*route.HeaderMatcher {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]*route.HeaderMatcher, 0, len(names))
	for _, k := range names {
		out = append(out, &route.HeaderMatcher{
			Name: k,
			HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
				MatchPattern: &matcher.StringMatcher_Exact{Exact: h[k]},
			}},
		})
	}
	return out
}

// defaultBufferLimit is Envoy's default per_connection_buffer_limit_bytes.
const defaultBufferLimit = 1 << 20

// buffersBodies reports whether the filter may buffer whole request bodies
// (StopAndBuffer): to move a prompt from a header into a JSON body
// (relocation.http rules), or to read the model and the request's size
// before admission (classification rules on model, pools with
// max_inflight_tokens). It mirrors the filter's own decision in
// envoyfilter.
func buffersBodies(cfg *config.Config) bool {
	if len(cfg.Relocation.HTTP) > 0 {
		return true
	}
	for _, r := range cfg.Classification.Rules {
		if r.Model != "" {
			return true
		}
	}
	for _, p := range cfg.Pools {
		if p.MaxInflightTokens > 0 {
			return true
		}
	}
	return false
}

// bufferLimit is the listener's per_connection_buffer_limit_bytes, nil for
// Envoy's default. A body the filter buffers must fit Envoy's per-stream
// buffer, which is the connection's limit (beyond it Envoy answers 413), so
// when the filter may buffer bodies the limit is raised to
// relocation.max_body, the largest body the mesh accepts; it is never
// lowered below Envoy's default.
func bufferLimit(cfg *config.Config) (*wrapperspb.UInt32Value, error) {
	if !buffersBodies(cfg) {
		return nil, nil
	}
	n := cfg.Relocation.MaxBody
	if n <= 0 || uint64(n) > math.MaxUint32 {
		return nil, fmt.Errorf("relocation.max_body: %d must be in [1, %d] to size Envoy's per_connection_buffer_limit_bytes", n, uint64(math.MaxUint32))
	}
	return wrapperspb.UInt32(uint32(max(n, defaultBufferLimit))), nil
}

// headersKB is max_request_headers_kb: Envoy's default, raised so that the
// largest relocatable header fits with room for the rest.
func headersKB(r *config.Relocation) uint32 {
	if !r.Enabled() {
		return defaultHeadersKB
	}
	kb := (r.MaxValue()+1023)/1024 + defaultHeadersKB
	return uint32(min(kb, maxHeadersKB))
}

func armNames(aps []config.ArmPool) []string {
	names := make([]string, len(aps))
	for i, ap := range aps {
		names[i] = ap.Pool.Name
	}
	return names
}

func buildListener(cfg *config.Config, mesh json.RawMessage, l *config.Listener, opts BuildOptions) (*listener.Listener, error) {
	fc, err := filterConfig(mesh, l, opts)
	if err != nil {
		return nil, err
	}
	limit, err := bufferLimit(cfg)
	if err != nil {
		return nil, err
	}
	manager := &hcm.HttpConnectionManager{
		// AUTO serves HTTP/1.1 and h2c (gRPC) on one port.
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: l.Name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: routeConfigPrefix + l.Name,
		}},
		HttpFilters: []*hcm.HttpFilter{
			{Name: GolangFilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: fc}},
			{Name: wellknown.Router, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
		MaxRequestHeadersKb: wrapperspb.UInt32(headersKB(&cfg.Relocation)),
		// Requests wait in the scheduler's queue before any byte moves; the
		// idle timeout must outlast the longest class max wait.
		StreamIdleTimeout: durationpb.New(streamIdle(cfg)),
		AccessLog:         accessLogs(),
	}
	host := l.Host
	if host == "" {
		host = "0.0.0.0"
	}
	return &listener.Listener{
		Name:                          l.Name,
		Address:                       socketAddress(host, l.Port),
		PerConnectionBufferLimitBytes: limit,
		FilterChains: []*listener.FilterChain{{
			Filters: []*listener.Filter{{
				Name:       wellknown.HTTPConnectionManager,
				ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(manager)},
			}},
		}},
	}, nil
}

// streamIdle is Envoy's default 5 minutes, or more when a class may wait
// longer in the queue.
func streamIdle(cfg *config.Config) time.Duration {
	d := 5 * time.Minute
	for _, c := range cfg.Classes {
		d = max(d, c.MaxWait+time.Minute)
	}
	return d
}
