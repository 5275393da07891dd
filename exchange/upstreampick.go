package exchange

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// A pick made upstream: when llmesh runs behind another endpoint picker
// (the Gateway API Inference Extension's endpoint picker protocol, as
// llm-d's picker speaks it), the gateway in front has already chosen the
// request's endpoint and says so in a request header and, in Envoy, in
// the dynamic metadata its ext_proc filter received. A pool with
// accept_upstream_pick sends such a request there and admits it against
// that endpoint's limits (scheduler.Request.Pin); both hosts read the pick
// with UpstreamPick. The names are the protocol's (epp/protocol.go).
const (
	// PickHeader carries the upstream pick.
	PickHeader = "x-gateway-destination-endpoint"
	// PickNamespace and PickKey are where Envoy's dynamic metadata holds
	// it.
	PickNamespace = "envoy.lb"
	PickKey       = "x-gateway-destination-endpoint"
	// maxPickLen bounds the value read: the protocol's list of endpoints
	// (the pick and its fallbacks) is short.
	maxPickLen = 4096
)

// errPickNotInPool: the upstream picker chose an endpoint the request's
// pool does not have (the picker and the mesh disagree on the pool's
// endpoints). A malformed pick is ErrBadRequest.
var errPickNotInPool = errors.New("upstream pick is not an endpoint of the pool")

// UpstreamPick returns the endpoint picked upstream for a request: the
// value of the dynamic metadata (metadata, from Envoy's envoy.lb namespace;
// "" when absent or outside Envoy) or else of the PickHeader header (h may
// be nil). The metadata wins because the gateway's ext_proc filter sets it
// and a client cannot; the header is what the picker set too, and what a
// gateway forwards. The value is the protocol's list of endpoints, the
// pick first and fallbacks after commas: the first is taken, the
// fallbacks are not used. No pick gives "", nil. A pick that is not
// host:port is an error wrapping ErrBadRequest (400); one that inPool does
// not know, errPickNotInPool (503).
func UpstreamPick(h Headers, metadata string, inPool func(endpoint string) bool) (string, error) {
	v, from := metadata, PickNamespace+" metadata "+PickKey
	if v == "" && h != nil {
		v, from = h.Get(PickHeader), PickHeader
	}
	if v == "" {
		return "", nil
	}
	if len(v) > maxPickLen {
		return "", fmt.Errorf("%w: %s: %d bytes, more than %d", ErrBadRequest, from, len(v), maxPickLen)
	}
	first, _, _ := strings.Cut(v, ",")
	ep := strings.TrimSpace(first)
	host, port, err := net.SplitHostPort(ep)
	if err != nil || host == "" {
		return "", fmt.Errorf("%w: %s: %q must be host:port", ErrBadRequest, from, ep)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%w: %s: %q has an invalid port", ErrBadRequest, from, ep)
	}
	if !inPool(ep) {
		return "", fmt.Errorf("%w: %s: %q", errPickNotInPool, from, ep)
	}
	return ep, nil
}

// PickMetadata is the pick in Envoy's dynamic metadata namespace
// PickNamespace (ns, as the host reads it; nil when absent): the string
// under PickKey, "" when there is none. Any other type is an error
// wrapping ErrBadRequest.
func PickMetadata(ns map[string]any) (string, error) {
	v, ok := ns[PickKey]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s metadata %s: %T, want a string", ErrBadRequest, PickNamespace, PickKey, v)
	}
	return s, nil
}
