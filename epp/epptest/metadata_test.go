package epptest_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/epp/epptest"
)

// recorder is an ext_proc server that keeps, per message, the subset hint
// and served keys of its metadata context, and answers as a full duplex
// picker that picks "10.0.0.1:8000" once the body has ended.
type recorder struct {
	extprocv3.UnimplementedExternalProcessorServer
	seen chan []string
}

func (r *recorder) Process(s extprocv3.ExternalProcessor_ProcessServer) error {
	var seen []string
	defer func() { r.seen <- seen }()
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		fm := m.GetMetadataContext().GetFilterMetadata()
		subset := fm["envoy.lb.subset_hint"].GetFields()["x-gateway-destination-endpoint-subset"].GetListValue().GetValues()
		s0 := "-"
		if len(subset) > 0 {
			s0 = subset[0].GetStringValue()
		}
		served := fm["envoy.lb"].GetFields()["x-gateway-destination-endpoint-served"].GetStringValue()
		seen = append(seen, s0+"|"+served)
		switch {
		case m.GetRequestBody().GetEndOfStream():
			if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{}}}); err != nil {
				return err
			}
			if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
						Body: m.GetRequestBody().GetBody(), EndOfStream: true}}}}}}}); err != nil {
				return err
			}
		case m.GetResponseHeaders() != nil:
			if err := s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}}); err != nil {
				return err
			}
		}
	}
}

// Every message after the one that brings a key carries it, as Envoy sends
// the stream's metadata; without the wrapper only that message does.
func TestForwardMetadata(t *testing.T) {
	rec := &recorder{seen: make(chan []string, 2)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, rec)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	bare := extprocv3.NewExternalProcessorClient(conn)
	for _, tc := range []struct {
		name   string
		client extprocv3.ExternalProcessorClient
		want   []string
	}{
		// request headers, 2 body chunks, response headers (with served).
		{"bare", bare, []string{"10.0.0.2:8000|", "-|", "-|", "-|10.0.0.2:8000"}},
		{"forwarded", epptest.ForwardMetadata(bare), []string{"10.0.0.2:8000|", "10.0.0.2:8000|", "10.0.0.2:8000|", "10.0.0.2:8000|10.0.0.2:8000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d := &epptest.Driver{Client: tc.client, RequestMode: epptest.FullDuplex, ResponseMode: epptest.FullDuplex}
			call, _, err := d.Start(ctx, epptest.Request{Headers: map[string]string{":method": "POST"},
				Chunks: [][]byte{[]byte("ab"), []byte("cd")}, Subset: []string{"10.0.0.2:8000"}, SubsetSet: true})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := call.Relay(epptest.Response{Status: 200, Served: "10.0.0.2:8000"})
			if err != nil || rep.Immediate != nil {
				t.Fatalf("relay: %v %+v", err, rep)
			}
			if diff := cmp.Diff(tc.want, <-rec.seen); diff != "" {
				t.Fatalf("metadata per message (-want +got):\n%s", diff)
			}
		})
	}
}
