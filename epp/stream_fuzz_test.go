package epp_test

import (
	"context"
	"io"
	"math/rand"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// memStream is an ext_proc server stream over a fixed list of messages.
type memStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   []*extprocv3.ProcessingRequest
	sent int
}

func (m *memStream) Context() context.Context { return m.ctx }
func (m *memStream) Send(*extprocv3.ProcessingResponse) error {
	m.sent++
	return nil
}
func (m *memStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(m.in) == 0 {
		return nil, io.EOF
	}
	r := m.in[0]
	m.in = m.in[1:]
	return r, nil
}

// Any sequence of ext_proc messages, in any order, with any bodies and
// subsets, leaves the scheduler as it found it once the stream ends: no
// lease kept, nothing queued; and the picker never panics.
func FuzzStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4})
	f.Add([]byte{0x10, 1, 1, 0x13, 3, 4, 4})
	f.Add([]byte{0x20, 0x31, 2, 5, 6, 4})
	f.Add([]byte{0, 0, 1, 1, 6, 5})
	p := startPicker(f, nil)
	f.Fuzz(func(t *testing.T, ops []byte) { runOps(t, p, ops) })
}

var (
	fuzzBodies  = [][]byte{[]byte(chatBody[:20]), []byte(chatBody[20:]), []byte(chatBody), []byte("{"), nil}
	fuzzSubsets = [][]any{nil, {ep1}, {"10.9.9.9:1"}, {"bad"}, {}}
)

// runOps plays the messages ops encode through p and checks the scheduler
// is left empty.
func runOps(t *testing.T, p *picker, ops []byte) {
	bodies, subsets := fuzzBodies, fuzzSubsets
	if len(ops) > 64 {
		ops = ops[:64]
	}
	var msgs []*extprocv3.ProcessingRequest
	for i, op := range ops {
		eos := op&0x80 != 0
		body := bodies[int(op>>4)%len(bodies)]
		var m *extprocv3.ProcessingRequest
		switch op % 7 {
		case 0:
			hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/chat/completions")},
				{Key: "x-llm-d-inference-objective", RawValue: []byte("batch")}}}
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
				RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}}}
			if s := subsets[int(op>>4)%len(subsets)]; s != nil {
				l, _ := structpb.NewList(s)
				m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
					"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-subset": structpb.NewListValue(l)}}}}
			}
		case 1:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: eos}}}
		case 2:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
		case 3:
			hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")},
				{Key: "content-type", RawValue: []byte("text/event-stream")}}}
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}}}
		case 4:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(sse(2)), EndOfStream: eos}}}
		case 5:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
		default:
			m = &extprocv3.ProcessingRequest{}
		}
		if i == 0 && op&0x40 != 0 {
			m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: modes[int(op>>4)%len(modes)].mode,
				ResponseBodyMode: modes[int(op>>5)%len(modes)].mode}
		}
		msgs = append(msgs, m)
	}
	_ = p.srv.Process(&memStream{ctx: context.Background(), in: msgs})
	for len(p.done) > 0 {
		<-p.done
	}
	if s := p.stats(); s.InFlight != 0 || s.Queued["interactive"]+s.Queued["batch"] != 0 {
		t.Fatalf("after the stream of ops %x: in flight %d, queued %v", ops, s.InFlight, s.Queued)
	}
}

// FuzzStream's property over a few thousand random sequences, in every
// test run (the fuzzer itself runs only with -fuzz).
func TestRandomStreams(t *testing.T) {
	p := startPicker(t, nil)
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 3000; i++ {
		ops := make([]byte, r.Intn(10))
		r.Read(ops)
		runOps(t, p, ops)
	}
}
