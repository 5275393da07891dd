package control

import (
	"io"
	"net"
	"testing"
	"time"
)

// A client that sends part of the HTTP/2 preface and stalls is
// disconnected after the handshake timeout (5 s by default), not kept
// open for gRPC's 120 s.
func TestPartialPrefaceClosed(t *testing.T) {
	p := startPlane(t, exampleYAML(t), nil)
	c, err := net.Dial("tcp", p.xds)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n"); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_ = c.SetReadDeadline(begin.Add(4 * DefaultHandshakeTimeout))
	_, err = io.Copy(io.Discard, c)
	took := time.Since(begin)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection is still open %v after a partial preface", took)
	}
	if took > DefaultHandshakeTimeout+2*time.Second {
		t.Errorf("closed %v after a partial preface, want about %v", took, DefaultHandshakeTimeout)
	}
	t.Logf("closed %v after a partial preface (%v)", took.Round(10*time.Millisecond), err)
}
