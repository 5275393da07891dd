package epptest

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// ForwardMetadata wraps a picker's client so that every message of a
// stream carries the metadata context the stream has had so far, as Envoy
// sends it: Envoy attaches the forwarded namespaces of the stream's dynamic
// metadata to the headers, each body chunk and the trailers alike
// (Filter::addDynamicMetadata, called from buildHeaderRequest,
// setupBodyChunk and sendTrailers in the Envoy module's
// source/extensions/filters/http/ext_proc/ext_proc.cc, v1.36). A Driver
// on the bare client sends each key once, on the message that introduces
// it; a picker that reads the metadata of the last message only (llm-d's
// does) needs this. Keys are merged per namespace, later values winning.
func ForwardMetadata(c extprocv3.ExternalProcessorClient) extprocv3.ExternalProcessorClient {
	return forwarding{c}
}

type forwarding struct {
	extprocv3.ExternalProcessorClient
}

func (f forwarding) Process(ctx context.Context, opts ...grpc.CallOption) (extprocv3.ExternalProcessor_ProcessClient, error) {
	s, err := f.ExternalProcessorClient.Process(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &forwardingStream{ExternalProcessor_ProcessClient: s}, nil
}

// forwardingStream is used by one goroutine, as a Driver's Call is.
type forwardingStream struct {
	extprocv3.ExternalProcessor_ProcessClient
	md map[string]*structpb.Struct
}

func (s *forwardingStream) Send(m *extprocv3.ProcessingRequest) error {
	for ns, st := range m.GetMetadataContext().GetFilterMetadata() {
		if s.md == nil {
			s.md = map[string]*structpb.Struct{}
		}
		acc := s.md[ns]
		if acc == nil {
			acc = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			s.md[ns] = acc
		}
		for k, v := range st.GetFields() {
			acc.Fields[k] = v
		}
	}
	if len(s.md) > 0 {
		m = proto.Clone(m).(*extprocv3.ProcessingRequest)
		fm := make(map[string]*structpb.Struct, len(s.md))
		for ns, st := range s.md {
			fm[ns] = proto.Clone(st).(*structpb.Struct)
		}
		m.MetadataContext = &corev3.Metadata{FilterMetadata: fm}
	}
	return s.ExternalProcessor_ProcessClient.Send(m)
}
