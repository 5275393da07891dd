// Package relocatehttp is the net/http host of prompt relocation: a
// middleware that the gateway wraps around its handler. For a gRPC call
// (application/grpc, or binary application/grpc-web, which has the same
// framing; exchange.GRPCKindOf decides) whose configured metadata value is
// over the threshold, it removes the header, reads the first message,
// appends the value as the configured protobuf field and lets the rest of
// the body stream through; for an HTTP request it moves the header into the
// JSON body and sets the new Content-Length. Limits and bad input are
// answered here: 413 / 400 / 415 with an OpenAI-style error body, or a gRPC
// trailers-only response (RESOURCE_EXHAUSTED, INVALID_ARGUMENT,
// UNIMPLEMENTED) whose message names the limit. gRPC-Web-text (base64) is
// passed through as it is: its frames are not decoded.
//
// The server in front must accept the oversized header in the first place:
// http.Server.MaxHeaderBytes bounds what net/http reads and is what HTTP/2
// advertises as SETTINGS_MAX_HEADER_LIST_SIZE (grpc-go clients check it
// before sending). Set it to at least the largest relocation max (the
// compiled mesh config's Relocation.MaxValue(); 4/3 of it for "-bin" keys,
// which travel as base64) plus room for the other headers; net/http's
// default is 1 MiB.
//
// The middleware starts no goroutines. Its Relocator is swapped atomically
// (SetRelocator) when the configuration changes; each request uses the one
// it loaded at its start.
package relocatehttp
