package server_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler/framed"
	"github.com/llmesh/llmesh/scheduler/server"
)

// A connection that sends part of a preface and stalls is closed after the
// handshake timeout (5 s by default): on the gRPC side (gRPC's own default
// would keep it 120 s), on the framed side, and before a first byte.
func TestPartialPrefaceClosed(t *testing.T) {
	addr, stop := startWith(t, server.Options{})
	t.Cleanup(stop) // after the parallel subtests
	for name, sent := range map[string]string{
		"http2":   "PRI * HTTP/2.0\r\n",
		"framed":  framed.Preface[:7],
		"nothing": "",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, sent); err != nil {
				t.Fatal(err)
			}
			begin := time.Now()
			_ = c.SetReadDeadline(begin.Add(4 * server.DefaultHandshakeTimeout))
			_, err = io.Copy(io.Discard, c)
			took := time.Since(begin)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("still open %v after %q", took, sent)
			}
			if took > server.DefaultHandshakeTimeout+2*time.Second {
				t.Errorf("closed %v after %q, want about %v", took, sent, server.DefaultHandshakeTimeout)
			}
			t.Logf("closed %v after %q", took.Round(10*time.Millisecond), sent)
		})
	}
}
