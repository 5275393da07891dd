package epp

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the endpoint picker protocol
// (gateway-api-inference-extension, docs/proposals/004-endpoint-picker-protocol).
const (
	// DestinationHeader carries the picked endpoint to the data plane.
	DestinationHeader = "x-gateway-destination-endpoint"
	// LBNamespace is the metadata namespace of the pick (dynamic metadata
	// of the response) and of the served endpoint (metadata context of the
	// request).
	LBNamespace = "envoy.lb"
	// DestinationKey is the pick's key in LBNamespace.
	DestinationKey = "x-gateway-destination-endpoint"
	// ServedKey is where the data plane reports, in LBNamespace of the
	// metadata context, the endpoint that served the request.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace is the filter metadata namespace of the subset the
	// data plane restricts the pick to.
	SubsetNamespace = "envoy.lb.subset_hint"
	// SubsetKey is the subset's key in SubsetNamespace: a list of ip:port.
	SubsetKey = "x-gateway-destination-endpoint-subset"
	// ObjectiveHeader is llm-d's de-facto header naming the request's
	// InferenceObjective; llmesh reads it as a class name.
	ObjectiveHeader = "x-llm-d-inference-objective"
)

// ErrBadEndpoint: an endpoint is not in ip:port (or host:port) form.
var ErrBadEndpoint = errors.New("endpoint must be host:port")

// ParseEndpoint checks one endpoint of the protocol, host:port with a port
// in 1..65535, and returns it trimmed of spaces.
func ParseEndpoint(s string) (string, error) {
	s = strings.TrimSpace(s)
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrBadEndpoint, truncate(s, 64), err)
	}
	if host == "" {
		return "", fmt.Errorf("%w: %q: empty host", ErrBadEndpoint, truncate(s, 64))
	}
	if strings.ContainsAny(host, " \t,") {
		return "", fmt.Errorf("%w: %q: bad host", ErrBadEndpoint, truncate(s, 64))
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%w: %q: port must be 1..65535", ErrBadEndpoint, truncate(s, 64))
	}
	return s, nil
}

// ParseEndpointList parses the protocol's comma-separated list
// "ip:port,ip:port,…"; every element must be an endpoint.
func ParseEndpointList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		ep, err := ParseEndpoint(p)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, ep)
	}
	return out, nil
}

// Subset reads the subset the data plane gave in md's filter metadata
// (SubsetNamespace/SubsetKey): a list of endpoint strings, or one string
// with a comma-separated list. present is false when the key is absent;
// an empty list is present (and leaves nothing to pick from). Errors name
// the key and the bad element.
func Subset(md *corev3.Metadata) (subset []string, present bool, err error) {
	if md == nil {
		return nil, false, nil
	}
	ns := md.GetFilterMetadata()[SubsetNamespace]
	if ns == nil {
		return nil, false, nil
	}
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return nil, false, nil
	}
	path := SubsetNamespace + "." + SubsetKey
	switch k := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		vals := k.ListValue.GetValues()
		out := make([]string, 0, len(vals))
		for i, e := range vals {
			s, ok := e.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, true, fmt.Errorf("%s[%d]: must be a string \"ip:port\"", path, i)
			}
			ep, err := ParseEndpoint(s.StringValue)
			if err != nil {
				return nil, true, fmt.Errorf("%s[%d]: %w", path, i, err)
			}
			out = append(out, ep)
		}
		return out, true, nil
	case *structpb.Value_StringValue:
		out, err := ParseEndpointList(k.StringValue)
		if err != nil {
			return nil, true, fmt.Errorf("%s%w", path, err)
		}
		return out, true, nil
	case *structpb.Value_NullValue:
		return nil, true, nil
	}
	return nil, true, fmt.Errorf("%s: must be a list of \"ip:port\" strings", path)
}

// Served reads the endpoint the data plane reports as having served the
// request (LBNamespace/ServedKey of the metadata context); "" when absent.
func Served(md *corev3.Metadata) string {
	ns := md.GetFilterMetadata()[LBNamespace]
	if ns == nil {
		return ""
	}
	return ns.GetFields()[ServedKey].GetStringValue()
}

// destinationMetadata is the dynamic metadata of a pick:
// {"envoy.lb": {"x-gateway-destination-endpoint": endpoint}}.
func destinationMetadata(endpoint string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationKey: structpb.NewStringValue(endpoint),
		}}),
	}}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
