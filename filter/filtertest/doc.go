// Package filtertest is a hand-written fake of the Envoy golang filter SDK's
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
//
// Where it still differs from Envoy (filter/envoyhost runs the real SDK
// for these): a local reply does not run through the filter's own encode
// callbacks, it ends the stream (the host's scenarios cover each place the
// filter sends one: rejected from DecodeHeaders, queue_full from the
// admission goroutine, preempt_before_response and its gRPC twin from
// DecodeData, preempt_midstream from EncodeData); stream info, properties
// and stats are simplified; there is one goroutine per test stream, not a
// worker thread.
//
// Ownership: a Stream is driven by one test goroutine (the "Envoy worker");
// the filter under test may call the process callbacks (Continue,
// SendLocalReply, RecoverPanic), header maps and buffers of a held phase
// from its own goroutines. All Stream state is guarded by Stream.mu; header
// maps and buffers guard their contents with their own mutex. The fake
// starts no goroutines of its own.
package filtertest
