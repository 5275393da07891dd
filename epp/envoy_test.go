package epp_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/epp"
)

// envoy-extproc.yaml is a bootstrap a standard Envoy accepts as far as its
// API types go (every typed config decodes into go-control-plane's types,
// unknown fields rejected): the ext_proc filter calls the picker's cluster
// in full duplex mode with the protocol's metadata namespaces, and an
// ORIGINAL_DST cluster routes by the picker's header. No contrib filter.
func TestEnvoyExtProcConfig(t *testing.T) {
	raw, err := os.ReadFile("../envoy-extproc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), ".contrib.") || strings.Contains(string(raw), "envoy.filters.http.golang") {
		t.Fatal("envoy-extproc.yaml must run on a standard Envoy: no contrib extension")
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("not an Envoy v3 bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("bootstrap fails the API's validation rules: %v", err)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	var hcm hcmv3.HttpConnectionManager
	ls := bs.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 {
		t.Fatalf("want one listener with one filter chain, got %d", len(ls))
	}
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var names []string
	var ext extprocfilterv3.ExternalProcessor
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
		if f.GetName() == "envoy.filters.http.ext_proc" {
			if err := f.GetTypedConfig().UnmarshalTo(&ext); err != nil {
				t.Fatalf("ext_proc typed config: %v", err)
			}
		}
	}
	if strings.Join(names, ",") != "envoy.filters.http.ext_proc,envoy.filters.http.router" {
		t.Fatalf("http filters %v, want ext_proc then router", names)
	}
	pc := ext.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	picker := clusters[pc]
	if picker == nil || picker.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
		t.Fatalf("ext_proc cluster %q missing or not HTTP/2", pc)
	}
	pm := ext.GetProcessingMode()
	if pm.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		pm.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		pm.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND || pm.GetResponseTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
		t.Fatalf("processing mode %v: full duplex bodies need trailers sent", pm)
	}
	fwd := ext.GetMetadataOptions().GetForwardingNamespaces().GetUntyped()
	recv := ext.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()
	if !contains(fwd, epp.SubsetNamespace) || !contains(fwd, epp.LBNamespace) || !contains(recv, epp.LBNamespace) {
		t.Fatalf("metadata namespaces forwarded %v, received %v", fwd, recv)
	}
	route := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	dst := clusters[route.GetCluster()]
	if dst.GetType() != clusterv3.Cluster_ORIGINAL_DST || dst.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED ||
		!dst.GetOriginalDstLbConfig().GetUseHttpHeader() || dst.GetOriginalDstLbConfig().GetHttpHeaderName() != epp.DestinationHeader {
		t.Fatalf("route cluster %q: want ORIGINAL_DST by %s, got %v", route.GetCluster(), epp.DestinationHeader, dst)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
