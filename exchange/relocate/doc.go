// Package relocate moves oversized prompts that clients put into gRPC
// metadata or HTTP headers into the request body, where they belong.
//
// Headers are a poor place for a prompt of thousands of tokens: proxies cap
// them (Envoy's max_request_headers_kb, 60 KiB by default, answers 431),
// HPACK and per-header limits apply, and every hop serialises them again.
// A host asks a Relocator for a plan from the request's headers (PlanGRPC,
// PlanHTTP), removes the header, and rewrites the body:
//
//   - gRPC: the value is appended to the first request message as the
//     configured protobuf field (tag, length, bytes) and the 5-byte length
//     prefix is fixed. No schema is needed: protobuf parsers accept fields
//     in any order and repeated occurrences, so appending is a valid edit.
//     For a singular string/bytes/scalar field the last occurrence wins, so
//     an existing prompt is replaced (and in a oneof the appended member
//     becomes the chosen one); for a singular message field occurrences
//     merge; for a repeated field the value becomes one more element. Only
//     the first message of the call is rewritten; on client-streaming calls
//     later messages pass through untouched. GRPCReader is the pull form
//     (net/http bodies), GRPCRewriter the push form (body chunks, as Envoy
//     delivers them); both buffer only the first message.
//   - JSON: the value becomes "prompt" (completions) or a user message
//     appended to "messages" (chat completions), spliced into the original
//     bytes without re-encoding the document (RewriteJSON).
//
// Compressed first messages (flag 1) under grpc-encoding gzip are
// decompressed, extended and compressed again, or refused per rule; other
// encodings are refused. Limits (a relocated value's size, the first
// message's size, the JSON body's size) fail with a *LimitError naming the
// config field; Status maps every error of this package to the HTTP status
// and gRPC code a host answers with.
//
// This package is pure: no net/http, no Envoy, no goroutines. A Relocator is
// immutable and safe for concurrent use; plans, readers and rewriters belong
// to one request and one goroutine at a time.
package relocate
