package control

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// newAny packs m deterministically (map fields in key order), so the same
// config always gives the same bytes, hash and version.
func newAny(m proto.Message) (*anypb.Any, error) {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}

// mustAny packs a message we built ourselves; failing means a programming
// error (an unregistered type), not bad input.
func mustAny(m proto.Message) *anypb.Any {
	a, err := newAny(m)
	if err != nil {
		panic(fmt.Sprintf("control: pack %T: %v", m, err))
	}
	return a
}

// typeOrder is the order resources are listed and hashed in.
var typeOrder = []resource.Type{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

// Hash is a short stable digest of the resources, part of every version so
// that a restarted control plane never reuses a version for different
// content (Envoy skips a response whose version it already has).
func Hash(res Resources) string {
	h := sha256.New()
	for _, t := range typeOrder {
		rs := append([]types.Resource(nil), res[t]...)
		sort.Slice(rs, func(i, j int) bool { return cache.GetResourceName(rs[i]) < cache.GetResourceName(rs[j]) })
		for _, r := range rs {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
			if err != nil {
				panic(fmt.Sprintf("control: marshal %T: %v", r, err))
			}
			fmt.Fprintf(h, "%s\x00%d\x00", t, len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// NewSnapshot wraps resources in a snapshot and checks that it is
// consistent: every route config and EDS cluster a listener or cluster
// refers to is in it.
func NewSnapshot(version string, res Resources) (*cache.Snapshot, error) {
	s, err := cache.NewSnapshot(version, res)
	if err != nil {
		return nil, fmt.Errorf("control: snapshot: %w", err)
	}
	if err := s.Consistent(); err != nil {
		return nil, fmt.Errorf("control: snapshot %s is inconsistent: %w", version, err)
	}
	return s, nil
}
