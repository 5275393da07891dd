package framed

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/schedulerv1"
)

// A session its handler ends with an error tells the client why: the
// client's Recv returns the handler's gRPC status, even when the client
// had sent a frame the service never read.
func TestClosingFrameTellsWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := NewMux(l, net.KeepAliveConfig{})
	served := make(chan error, 1)
	go func() {
		served <- mux.Serve(context.Background(), func(c *ServerConn) error {
			if p, ok := peer.FromContext(c.Context()); !ok || p.Addr == nil || !strings.HasPrefix(p.Addr.String(), "127.0.0.1:") {
				return status.Errorf(codes.Internal, "no peer address in the session's context: %v", p)
			}
			if c.Token() == "good" {
				if _, err := c.Recv(); err != nil {
					return err
				}
				return errors.New("not a status error")
			}
			return status.Error(codes.Unauthenticated, "scheduler: the bearer token belongs to no identity")
		})
	}()
	defer func() {
		mux.Close()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := &schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{{Lease: 1, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Pool: "gpu"}}}}}
	for _, tc := range []struct {
		token string
		code  codes.Code
		msg   string
	}{
		{"bad", codes.Unauthenticated, "scheduler: the bearer token belongs to no identity"},
		{"good", codes.Unknown, "not a status error"},
	} {
		fc, err := DialToken(ctx, l.Addr().String(), nil, tc.token)
		if err != nil {
			t.Fatal(err)
		}
		if err := fc.Send(start); err != nil {
			t.Fatal(err)
		}
		_, err = fc.Recv()
		if st, ok := status.FromError(err); !ok || st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("token %s: Recv %v, want %v %q", tc.token, err, tc.code, tc.msg)
		}
		fc.Close()
	}
}

// Only the service sends closing frames: the service's reader refuses one.
func TestClosingFrameFromClientRefused(t *testing.T) {
	wire := frame(closingPayload(status.Error(codes.Internal, "x")))
	wire[0] |= 0x80
	_, err := serverConnOver(t, wire).Recv()
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "over") {
		t.Fatalf("%v, want ErrProtocol for the length", err)
	}
}

// A status's code and message survive a closing frame; a long message is
// cut and invalid UTF-8 replaced, never an error.
func TestClosingPayloadRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{status.Error(codes.ResourceExhausted, "scheduler: 3 sessions open"), codes.ResourceExhausted, "scheduler: 3 sessions open"},
		{errors.New("plain"), codes.Unknown, "plain"},
		{status.Error(codes.InvalidArgument, "bad \xff byte"), codes.InvalidArgument, "bad ? byte"},
		{status.Error(codes.OK, ""), codes.Unknown, ""},
		{status.Error(codes.Internal, strings.Repeat("x", 2*MaxClosing)), codes.Internal, strings.Repeat("x", maxClosingMessage)},
	} {
		b := closingPayload(tc.err)
		if len(b) > MaxClosing {
			t.Errorf("%v: payload of %d bytes, over %d", tc.err, len(b), MaxClosing)
		}
		st, ok := status.FromError(closingStatus(b))
		if !ok || st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%v: read back %v %q", tc.err, st.Code(), st.Message())
		}
	}
}

// Any closing frame body reads as an end of the session: io.EOF, a status
// error or a protocol error, never a panic.
func FuzzClosingStatus(f *testing.F) {
	f.Add(closingPayload(status.Error(codes.Unauthenticated, "no")))
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x00})
	f.Add([]byte{0x12, 0x02, 0xff, 0xfe})
	f.Fuzz(func(t *testing.T, b []byte) {
		err := closingStatus(b)
		if err == nil {
			t.Fatal("a closing frame read as no error")
		}
		if err == io.EOF || errors.Is(err, ErrProtocol) {
			return
		}
		if st, ok := status.FromError(err); !ok || st.Code() == codes.OK {
			t.Fatalf("%v: neither io.EOF, ErrProtocol nor a status", err)
		}
	})
}
