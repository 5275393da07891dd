// Package fakesdk is a hand-written fake of the Envoy golang filter SDK's
// api interfaces (github.com/envoyproxy/envoy/contrib/golang/common/go/api),
// faithful enough to drive whole request lifecycles of a StreamFilter
// without Envoy: header maps, buffers, decoder and encoder callbacks with
// asynchronous Continue from goroutines, local replies, stream info with
// properties, dynamic metadata and filter state, OnDestroy while a phase is
// held, config callbacks with counters and gauges, and the common CAPI so
// that api.Log* works.
//
// The fake enforces the SDK rules that bite in production and records each
// breach as a violation (see Stream.Violations) besides panicking the way
// the SDK does:
//   - a header map or buffer is valid only while its phase is being
//     processed in Go (synchronously, or while held after returning
//     api.Running); a header map whose DecodeHeaders returned
//     api.StopAndBuffer stays valid through the buffered data phase;
//   - after api.Running exactly one Continue or SendLocalReply ends the
//     phase; a second one, or one after OnDestroy, panics like the SDK
//     ("golang filter has been destroyed");
//   - dynamic metadata values must be accepted by structpb.NewValue;
//   - request trailers after a buffered body: the body goes to DecodeData
//     first without endStream (Envoy's doTrailer), and StopAndBuffer there
//     is a violation, since Envoy then sends the held request on.
//   - a local reply sent while decoding (from a callback, or from a
//     goroutine while the phase is held) runs through the filter's own
//     encode callbacks before the stream ends, as Envoy's filter manager
//     runs it through the encoder filter chain: EncodeHeaders with the
//     headers Envoy builds (trailers-only for gRPC), then EncodeData with
//     the body. A reply sent while encoding, or once the upstream's
//     response headers reached the filter, goes to the client directly.
//
// Where it still differs from Envoy (testkit/envoyhost runs the real SDK
// for these): stream info, properties and stats are simplified; there is
// one goroutine per test stream, not a worker thread, and the encode half
// of a reply from a goroutine runs on the goroutine that waits for the
// phase (Pending.Wait).
//
// Ownership: a Stream is driven by one test goroutine (the "Envoy worker");
// the filter under test may call the process callbacks (Continue,
// SendLocalReply, RecoverPanic), header maps and buffers of a held phase
// from its own goroutines. All Stream state is guarded by Stream.mu; header
// maps and buffers guard their contents with their own mutex. The fake
// starts no goroutines of its own.
package fakesdk
