package control

import (
	"fmt"
	"net/netip"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
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

// A listener with data_plane ext_proc runs on a standard Envoy: the
// ext_proc filter asks the endpoint picker (llmesh epp, docs/epp.md) for
// each request's endpoint, and ORIGINAL_DST clusters send the request to
// the address the picker put in the destination header, as the Gateway API
// Inference Extension's gateways do and as envoy-extproc.yaml does.
// epp/protocol.go defines the protocol's names; control does not import the
// picker, so they are repeated here and a test keeps the two in step.
const (
	// ExtProcFilterName is Envoy's ext_proc HTTP filter.
	ExtProcFilterName = "envoy.filters.http.ext_proc"
	// DestinationHeader carries the picked endpoint.
	DestinationHeader = "x-gateway-destination-endpoint"
	// LBNamespace is the metadata namespace of the pick and of the served
	// endpoint; SubsetNamespace the one of the subset a gateway restricts
	// the pick to.
	LBNamespace     = "envoy.lb"
	SubsetNamespace = "envoy.lb.subset_hint"
	// pickerCluster, pickedCluster and pickedGRPCCluster prefix a listener's
	// name to name its picker's cluster and its ORIGINAL_DST clusters
	// (HTTP/1.1 for OpenAI pools, HTTP/2 for gRPC pools).
	pickerCluster     = "llmesh.epp."
	pickedCluster     = "llmesh.picked."
	pickedGRPCCluster = "llmesh.picked-grpc."
	// grpcServiceTimeout bounds the picker's gRPC stream setup.
	grpcServiceTimeout = 60 * time.Second
	// connectTimeout reaches the picker.
	pickerConnectTimeout = 2 * time.Second
)

// usesGolang reports whether any listener runs the golang filter, which
// needs the pools' clusters. A config without listeners keeps them (as
// before data_plane existed).
func usesGolang(cfg *config.Config) bool {
	if len(cfg.Listeners) == 0 {
		return true
	}
	for _, l := range cfg.Listeners {
		if l.DataPlane != config.DataPlaneExtProc {
			return true
		}
	}
	return false
}

// extProcClusterNames are the clusters an ext_proc listener adds, which
// must not be a pool's (or an arm's) cluster name.
func extProcClusterNames(l *config.Listener) []string {
	return []string{pickerCluster + l.Name, pickedCluster + l.Name, pickedGRPCCluster + l.Name}
}

// buildExtProc adds an ext_proc listener's resources to res: its route
// config, the picker's cluster, the ORIGINAL_DST clusters its routes need,
// and the listener.
func buildExtProc(res Resources, cfg *config.Config, l *config.Listener, taken map[string]bool) error {
	for _, n := range extProcClusterNames(l) {
		if taken[n] {
			return fmt.Errorf("cluster name %q of the ext_proc data plane is already a pool's", n)
		}
	}
	var needHTTP, needGRPC bool
	var routes []*route.Route
	for _, r := range l.Routes {
		grpc := r.Match().GRPC
		name := pickedCluster + l.Name
		if grpc {
			needGRPC, name = true, pickedGRPCCluster+l.Name
		} else {
			needHTTP = true
		}
		m := &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: r.PathPrefix}}
		m.Headers = append(headerMatchers(r.Headers), protocolMatcher(grpc))
		routes = append(routes, &route.Route{
			Name:  r.ID,
			Match: m,
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier: &route.RouteAction_Cluster{Cluster: name},
				Timeout:          durationpb.New(0),
			}},
		})
	}
	res.add(&route.RouteConfiguration{
		Name:         routeConfigPrefix + l.Name,
		VirtualHosts: []*route.VirtualHost{{Name: l.Name, Domains: []string{"*"}, Routes: routes}},
	})
	res.add(buildPickerCluster(l))
	if needHTTP {
		res.add(buildPickedCluster(pickedCluster+l.Name, l, false))
	}
	if needGRPC {
		res.add(buildPickedCluster(pickedGRPCCluster+l.Name, l, true))
	}
	x := l.ExtProc
	ext := &extprocv3.ExternalProcessor{
		GrpcService: &core.GrpcService{
			TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: pickerCluster + l.Name}},
			Timeout:         durationpb.New(grpcServiceTimeout),
		},
		FailureModeAllow: x.FailureModeAllow,
		// The picker holds a request's headers answer while the request
		// queues: the timeout outlasts the classes' max_wait (config).
		MessageTimeout: durationpb.New(x.MessageTimeout),
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			RequestTrailerMode:  extprocv3.ProcessingMode_SEND,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
		},
		MetadataOptions: &extprocv3.MetadataOptions{
			ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{SubsetNamespace, LBNamespace}},
			ReceivingNamespaces:  &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{LBNamespace}},
		},
	}
	manager := &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: l.Name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: routeConfigPrefix + l.Name,
		}},
		HttpFilters: []*hcm.HttpFilter{
			{Name: ExtProcFilterName, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(ext)}},
			{Name: wellknown.Router, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
		StreamIdleTimeout: durationpb.New(streamIdle(cfg)),
		AccessLog:         accessLogs(),
	}
	host := l.Host
	if host == "" {
		host = "0.0.0.0"
	}
	res.add(&listener.Listener{
		Name:    l.Name,
		Address: socketAddress(host, l.Port),
		FilterChains: []*listener.FilterChain{{
			Filters: []*listener.Filter{{
				Name:       wellknown.HTTPConnectionManager,
				ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(manager)},
			}},
		}},
	})
	return nil
}

// buildPickerCluster is the picker's cluster: gRPC over HTTP/2, TLS when
// configured; STATIC for an IP address, STRICT_DNS for a name (a
// Kubernetes Service), the endpoint inline.
func buildPickerCluster(l *config.Listener) *cluster.Cluster {
	x := l.ExtProc
	name := pickerCluster + l.Name
	typ := cluster.Cluster_STRICT_DNS
	if _, err := netip.ParseAddr(x.Host); err == nil {
		typ = cluster.Cluster_STATIC
	}
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: typ},
		ConnectTimeout:       durationpb.New(pickerConnectTimeout),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(protocolOptions(true)),
		},
		LoadAssignment: &endpoint.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpoint.LocalityLbEndpoints{{LbEndpoints: []*endpoint.LbEndpoint{{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: socketAddress(x.Host, x.Port)}},
			}}}},
		},
	}
	if t := x.TLS; t != nil {
		sni := t.ServerName
		if sni == "" {
			sni = x.Host
		}
		common := &tlsv3.CommonTlsContext{
			// gRPC over TLS negotiates h2 by ALPN.
			AlpnProtocols: []string{"h2"},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa:                 &core.DataSource{Specifier: &core.DataSource_Filename{Filename: t.CAFile}},
				MatchTypedSubjectAltNames: sanMatchers(sni),
			}},
		}
		if t.CertFile != "" {
			common.TlsCertificates = []*tlsv3.TlsCertificate{{
				CertificateChain: &core.DataSource{Specifier: &core.DataSource_Filename{Filename: t.CertFile}},
				PrivateKey:       &core.DataSource{Specifier: &core.DataSource_Filename{Filename: t.KeyFile}},
			}}
		}
		c.TransportSocket = &core.TransportSocket{
			Name: wellknown.TransportSocketTLS,
			ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlsv3.UpstreamTlsContext{
				Sni:              sni,
				CommonTlsContext: common,
			})},
		}
	}
	return c
}

// buildPickedCluster is an ORIGINAL_DST cluster sending each request to the
// address in the destination header the picker set. Its connect timeout
// and circuit breakers cover the pools the listener routes to.
func buildPickedCluster(name string, l *config.Listener, grpc bool) *cluster.Cluster {
	var timeout time.Duration
	inflight := 0
	seen := map[*config.Pool]bool{}
	for _, r := range l.Routes {
		if r.Match().GRPC != grpc || seen[r.Pool] {
			continue
		}
		seen[r.Pool] = true
		timeout = max(timeout, r.Pool.ConnectTimeout)
		inflight += r.Pool.MaxInflight
	}
	limit := wrapperspb.UInt32(uint32(max(1024, 2*inflight)))
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		LbPolicy:             cluster.Cluster_CLUSTER_PROVIDED,
		ConnectTimeout:       durationpb.New(timeout),
		LbConfig: &cluster.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &cluster.Cluster_OriginalDstLbConfig{
			UseHttpHeader:  true,
			HttpHeaderName: DestinationHeader,
		}},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(protocolOptions(grpc)),
		},
		CircuitBreakers: &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
			MaxConnections: limit, MaxPendingRequests: limit, MaxRequests: limit,
		}}},
	}
}

// protocolOptions is explicit HTTP/2 (h2) or HTTP/1.1 upstream.
func protocolOptions(h2 bool) *upstreamhttp.HttpProtocolOptions {
	if h2 {
		return &upstreamhttp.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &core.Http2ProtocolOptions{}},
			},
		}}
	}
	return &upstreamhttp.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &core.Http1ProtocolOptions{}},
		},
	}}
}

// sanMatchers makes Envoy check that the picker's certificate names sni:
// a DNS name, or an IP address.
func sanMatchers(sni string) []*tlsv3.SubjectAltNameMatcher {
	typ := tlsv3.SubjectAltNameMatcher_DNS
	if _, err := netip.ParseAddr(sni); err == nil {
		typ = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	return []*tlsv3.SubjectAltNameMatcher{{
		SanType: typ,
		Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: sni}},
	}}
}

// add files r under its xDS type.
func (res Resources) add(r types.Resource) {
	var typ resource.Type
	switch r.(type) {
	case *listener.Listener:
		typ = resource.ListenerType
	case *route.RouteConfiguration:
		typ = resource.RouteType
	case *cluster.Cluster:
		typ = resource.ClusterType
	case *endpoint.ClusterLoadAssignment:
		typ = resource.EndpointType
	default:
		panic(fmt.Sprintf("control: no xDS type for %T", r))
	}
	res[typ] = append(res[typ], r)
}
