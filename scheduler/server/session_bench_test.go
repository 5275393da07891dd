package server

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
)

// BenchmarkSessionLease is the service's own cost of one lease on a
// Session stream, without gRPC's transport: one op is one received
// message with the previous lease's Progress and Done and a new Start
// (what a busy proxy sends), decoded as the service's gRPC server would
// (benchCodec), handled, and its Admitted answer sent. With -benchmem the
// allocations are the service's per lease.
func BenchmarkSessionLease(b *testing.B) {
	set, err := NewSchedulers(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 1 << 20, Policy: preemptive.New()}},
		Classes: []scheduler.ClassConfig{{Name: "premium"}, {Name: "bulk", Priority: 20, Preemptible: true}},
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	msgs := make([][]byte, b.N)
	for i := range msgs {
		id := uint64(i + 1)
		m := &schedulerv1.SessionRequest{}
		if i > 0 {
			m.Leases = append(m.Leases,
				&schedulerv1.LeaseRequest{Lease: id - 1, Msg: &schedulerv1.LeaseRequest_Progress{Progress: &schedulerv1.Progress{FirstToken: true, Tokens: 1}}},
				&schedulerv1.LeaseRequest{Lease: id - 1, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{}}})
		}
		m.Leases = append(m.Leases, &schedulerv1.LeaseRequest{Lease: id, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{
			Pool: "gpu", Class: []string{"premium", "bulk"}[i%2], PromptTokens: 1000, MaxTokens: 200, AgeNs: 1000}}})
		if msgs[i], err = proto.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	st := &benchStream{ctx: context.Background(), msgs: msgs}
	srv := New(set, nil)
	b.ReportAllocs()
	b.ResetTimer()
	if err := srv.Session(st); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if st.answers != b.N {
		b.Fatalf("%d answers to %d Starts", st.answers, b.N)
	}
}

// benchStream is a Session stream that hands the service prepared
// messages and counts its answers.
type benchStream struct {
	ctx     context.Context
	msgs    [][]byte
	next    int
	answers int
}

var _ schedulerv1.Scheduler_SessionServer = (*benchStream)(nil)

func (s *benchStream) RecvMsg(m any) error {
	if s.next == len(s.msgs) {
		return io.EOF
	}
	s.next++
	return benchCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(s.msgs[s.next-1])}, m)
}

func (s *benchStream) Recv() (*schedulerv1.SessionRequest, error) {
	m := new(schedulerv1.SessionRequest)
	if err := s.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (s *benchStream) Send(m *schedulerv1.SessionResponse) error { return s.SendMsg(m) }

func (s *benchStream) SendMsg(m any) error {
	out, err := benchCodec.Marshal(m)
	if err != nil {
		return err
	}
	out.Free()
	s.answers += len(m.(*schedulerv1.SessionResponse).GetLeases())
	return nil
}

func (s *benchStream) Context() context.Context     { return s.ctx }
func (s *benchStream) SetHeader(metadata.MD) error  { return nil }
func (s *benchStream) SendHeader(metadata.MD) error { return nil }
func (s *benchStream) SetTrailer(metadata.MD)       {}

var _ grpc.ServerStream = (*benchStream)(nil)
