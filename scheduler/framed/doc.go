// Package framed carries the scheduler service's Session protocol
// (llmesh.scheduler.v1 SessionRequest and SessionResponse) over a plain TCP
// connection instead of a gRPC stream: the same messages, the same
// semantics (one connection is one session; its end releases the
// session's leases), without HTTP/2.
//
// Why a second transport: on a service with few cores, gRPC-Go's transport
// costs two goroutine hand-offs per message (the connection's reader to
// the stream's handler, the handler to the connection's writer) and a
// yield of the writer before each small write, and on two cores those
// waits for a processor, not the scheduler's decision, make the decision
// latency's tail. Here the session's own goroutine reads the socket,
// decides and writes the answers, so a message costs a read and a write.
//
// The wire format (version 1):
//
//	client → service: the preface "LLMESH-SESSION/1\r\n", then frames; or,
//	       to carry headers (a bearer token: "authorization: Bearer
//	       <token>"), "LLMESH-SESSION/2\r\n", header lines, an empty line,
//	       then frames (at most 16 lines of 4 KiB)
//	service → client: the same preface, then frames
//	frame: a 4-byte big-endian length n (n ≤ MaxFrame), then n bytes of
//	       one protobuf message: SessionRequest from the client,
//	       SessionResponse from the service
//	ping:  a frame of length 0 from the service; the client answers with
//	       a frame of length 0
//	closing: from the service only, the length word 0x80000000 | n (n ≤
//	       MaxClosing), then n bytes of a google.rpc.Status: why the
//	       service ends the session, sent just before it closes the
//	       connection (the client's Recv returns it as a gRPC status error)
//
// Either side ends the session by closing the connection (the client may
// half-close first). A frame that is too long or not a valid message ends
// the session with a protocol error. Liveness is gRPC's keepalive in
// frames: the service pings a session that sent no frame for a while
// (10 s) and closes it when no frame follows within a timeout (5 s), so a
// proxy that vanished or stopped frees its leases; TCP keepalive with the
// same bounds runs underneath.
//
// A connection must complete its preface (and TLS handshake) within
// Mux.HandshakeTimeout, 5 s by default, or it is closed.
//
// The service accepts both transports on one address: Mux looks at the
// first byte of each connection ('L' begins the preface above; a gRPC
// client's HTTP/2 preface begins "PRI").
//
// Concurrency: a Conn's Recv is called by one goroutine at a time (the
// session's receiver), its Send by any, serialised by the Conn's send lock;
// Close may be called from anywhere, once or more. Mux runs one accepting
// goroutine and one short-lived goroutine per connection while it reads
// the first byte.
package framed
