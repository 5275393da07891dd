package framed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/schedulerv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func frame(payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	return append(b, payload...)
}

func serverConnOver(t *testing.T, wire []byte) *ServerConn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	go func() {
		_, _ = b.Write(wire)
		b.Close()
	}()
	return newConn[*schedulerv1.SessionRequest, *schedulerv1.SessionResponse](context.Background(), a, bufio.NewReader(a), Keepalive,
		func() *schedulerv1.SessionRequest { return new(schedulerv1.SessionRequest) })
}

func TestRecvFrames(t *testing.T) {
	m := &schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{
		{Lease: 7, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Id: "r1", Pool: "gpu", PromptTokens: 10}}},
		{Lease: 6, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{}}},
	}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c := serverConnOver(t, append(frame(b), frame(b)...))
	for i := 0; i < 2; i++ {
		got, err := c.Recv()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !proto.Equal(got, m) {
			t.Fatalf("frame %d: %v, want %v", i, got, m)
		}
	}
	if _, err := c.Recv(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestRecvRefusesBadFrames(t *testing.T) {
	long := binary.BigEndian.AppendUint32(nil, MaxFrame+1)
	for _, tc := range []struct {
		name, wire, want string
	}{
		{"too long", string(long), "frame length 4194305 is over 4194304"},
		{"cut length", "\x00\x00", "inside a frame's length"},
		{"cut body", string(frame([]byte{0x0a, 0x02, 0x08}))[:6], "inside a frame of 3 bytes"},
		{"not a message", string(frame([]byte{0xff, 0xff, 0xff})), "is not a SessionRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := serverConnOver(t, []byte(tc.wire)).Recv()
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want ErrProtocol with %q", err, tc.want)
			}
		})
	}
}

// The service pings a session that sent nothing for Idle; a client answers
// (its Recv does, unseen by the caller) and keeps the session; one that
// does not answer within Interval loses it.
func TestPingKeepsLiveSessions(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := NewMux(l, net.KeepAliveConfig{Enable: true, Idle: 50 * time.Millisecond, Interval: 50 * time.Millisecond, Count: 1})
	ended := make(chan error, 2)
	served := make(chan error, 1)
	go func() {
		served <- mux.Serve(context.Background(), func(c *ServerConn) error {
			_, err := c.Recv()
			ended <- err
			return err
		})
	}()
	defer func() {
		mux.Close()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A client that reads answers the pings: its session lives on.
	live, err := Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	go func() { _, _ = live.Recv() }()
	select {
	case err := <-ended:
		t.Fatalf("a client that answers pings lost its session: %v", err)
	case <-time.After(500 * time.Millisecond):
	}

	// A connection that never reads (so never answers) is closed.
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, Preface); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the silent session ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a session that did not answer its ping was not closed")
	}
}

// One listener serves gRPC and framed sessions: a gRPC health check and a
// framed session on the same address, a session's messages both ways, and
// the session's end when the client closes.
func TestMuxServesBothTransports(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := NewMux(l, net.KeepAliveConfig{})
	g := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	ended := make(chan error, 1)
	served := make(chan error, 1)
	go func() {
		served <- mux.Serve(context.Background(), func(c *ServerConn) error {
			for {
				m, err := c.Recv()
				if err != nil {
					ended <- err
					return err
				}
				id := m.GetLeases()[0].GetLease()
				if err := c.Send(&schedulerv1.SessionResponse{Leases: []*schedulerv1.LeaseResponse{
					{Lease: id, Msg: &schedulerv1.LeaseResponse_Admitted{Admitted: &schedulerv1.Admitted{Endpoint: "e1"}}}}}); err != nil {
					return err
				}
			}
		})
	}()
	gdone := make(chan struct{})
	go func() {
		defer close(gdone)
		_ = g.Serve(mux.Other())
	}()

	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health over the mux: %v %v", r, err)
	}
	cc.Close()

	fc, err := Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		if err := fc.Send(&schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{{Lease: id, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Pool: "gpu"}}}}}); err != nil {
			t.Fatal(err)
		}
		r, err := fc.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := r.GetLeases()[0]; got.GetLease() != id || got.GetAdmitted().GetEndpoint() != "e1" {
			t.Fatalf("answer %v for lease %d", got, id)
		}
	}
	fc.CloseSend()
	if err := <-ended; err != io.EOF {
		t.Fatalf("the session ended with %v, want io.EOF at the client's half-close", err)
	}
	fc.Close()

	// Closing the mux ends a live session and both servers.
	fc2, err := Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fc2.Close()
	if err := fc2.Send(&schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{{Lease: 1, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc2.Recv(); err != nil {
		t.Fatal(err)
	}
	g.Stop() // closes the mux through its listener
	<-gdone
	if err := <-served; err == nil {
		t.Fatal("Serve returned nil after its listener closed")
	}
	if <-ended == nil {
		t.Fatal("the live session did not end")
	}
	if _, err := fc2.Recv(); err == nil {
		t.Fatal("the client's Recv went on after the service stopped")
	}
}

func TestDialRefusesOtherPeers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Dial(ctx, l.Addr().String(), nil)
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "byte 0 of the preface") {
		t.Fatalf("Dial: %v, want a preface error", err)
	}
}

// The mux closes a connection that sends a wrong preface, and one that
// sends nothing within SniffTimeout is not waited for by Close.
func TestMuxRefusesBadPreface(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := NewMux(l, net.KeepAliveConfig{})
	served := make(chan error, 1)
	go func() {
		served <- mux.Serve(context.Background(), func(c *ServerConn) error {
			t.Error("a session was served for a wrong preface")
			return nil
		})
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "LLMESH-SESSION/9\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Fatalf("the mux answered %d bytes to a wrong preface", n)
	}
	mux.Close()
	<-served
}

// Send and Recv agree, and a message too large for a frame is refused
// without writing anything.
func TestSendRoundTrip(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	cli := newConn[*schedulerv1.SessionResponse, *schedulerv1.SessionRequest](context.Background(), a, bufio.NewReader(a), Keepalive,
		func() *schedulerv1.SessionResponse { return new(schedulerv1.SessionResponse) })
	srv := newConn[*schedulerv1.SessionRequest, *schedulerv1.SessionResponse](context.Background(), b, bufio.NewReader(b), Keepalive,
		func() *schedulerv1.SessionRequest { return new(schedulerv1.SessionRequest) })
	m := &schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{{Lease: 1, Msg: &schedulerv1.LeaseRequest_Progress{Progress: &schedulerv1.Progress{FirstToken: true, Tokens: 3}}}}}
	go func() { _ = cli.Send(m) }()
	got, err := srv.Recv()
	if err != nil || !proto.Equal(got, m) {
		t.Fatalf("%v %v, want %v", got, err, m)
	}
	huge := &schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{{Lease: 1, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Id: string(bytes.Repeat([]byte("x"), MaxFrame))}}}}}
	if err := cli.Send(huge); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a %d-byte message: %v, want ErrProtocol", proto.Size(huge), err)
	}
}

// Any byte string read as frames: an error or messages, never a panic, and
// what was read re-encodes to a frame that reads back the same.
func FuzzRecv(f *testing.F) {
	ok, _ := proto.Marshal(&schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{{Lease: 3, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{Outcome: 2}}}}})
	f.Add(frame(ok))
	f.Add(append(frame(ok), frame(ok)...))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	f.Fuzz(func(t *testing.T, wire []byte) {
		r := bufio.NewReader(bytes.NewReader(wire))
		var hdr [4]byte
		var buf []byte
		for {
			b, err := readFrame(r, hdr[:], buf)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("error %v is neither io.EOF nor ErrProtocol", err)
				}
				return
			}
			if len(b) > MaxFrame {
				t.Fatalf("a frame of %d bytes was accepted", len(b))
			}
			m := new(schedulerv1.SessionRequest)
			if proto.Unmarshal(b, m) != nil {
				continue
			}
			again, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			m2 := new(schedulerv1.SessionRequest)
			if len(again) > 0 {
				if err := proto.Unmarshal(again, m2); err != nil || !proto.Equal(m, m2) {
					t.Fatalf("re-encoded message reads back as %v (%v), want %v", m2, err, m)
				}
			}
			buf = b[:0]
		}
	})
}

// flakyListener fails its first Accept with a temporary error, as a
// process out of file descriptors sees.
type flakyListener struct {
	net.Listener
	failed bool
}

type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

func (f *flakyListener) Accept() (net.Conn, error) {
	if !f.failed {
		f.failed = true
		return nil, tempErr{}
	}
	return f.Listener.Accept()
}

// A temporary Accept failure does not stop the mux: the next connection
// is served.
func TestMuxOutlivesTemporaryAcceptErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := NewMux(&flakyListener{Listener: l}, net.KeepAliveConfig{})
	served := make(chan error, 1)
	go func() {
		served <- mux.Serve(context.Background(), func(c *ServerConn) error {
			_, err := c.Recv()
			return err
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fc, err := Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		t.Fatalf("after a temporary Accept error: %v", err)
	}
	fc.Close()
	mux.Close()
	<-served
}
