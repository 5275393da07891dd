package exchange

import "strings"

// GRPCKind is the gRPC flavour a content type names. Every part of both
// hosts that asks "is it gRPC?" asks GRPCKindOf, so that routing,
// relocation, sizing, the priority guard, replies and the observer agree.
type GRPCKind uint8

const (
	// GRPCNone: not gRPC.
	GRPCNone GRPCKind = iota
	// GRPC: application/grpc, application/grpc+proto (any +codec).
	GRPC
	// GRPCWeb: application/grpc-web(+codec), binary: the same 5-byte
	// message framing as gRPC, but the trailers travel in the body as a
	// last frame with flag 0x80 (the observer reads them there).
	GRPCWeb
	// GRPCWebText: application/grpc-web-text(+codec), the gRPC-Web frames
	// base64-encoded. The core does not decode it: its bodies are opaque
	// (counted, not parsed; never sized, guarded or relocated).
	GRPCWebText
)

// String names the kind as its content type does.
func (k GRPCKind) String() string {
	switch k {
	case GRPC:
		return "grpc"
	case GRPCWeb:
		return "grpc-web"
	case GRPCWebText:
		return "grpc-web-text"
	}
	return "none"
}

// ContentType is the content type a host answers a request of this kind
// with ("" for GRPCNone).
func (k GRPCKind) ContentType() string {
	switch k {
	case GRPC:
		return "application/grpc"
	case GRPCWeb:
		return "application/grpc-web"
	case GRPCWebText:
		return "application/grpc-web-text"
	}
	return ""
}

// Framed reports whether bodies of this kind are gRPC length-prefixed
// messages the core can read (gRPC and binary gRPC-Web).
func (k GRPCKind) Framed() bool { return k == GRPC || k == GRPCWeb }

// GRPCKindOf reads a Content-Type: the media type, case-insensitively,
// with any +codec suffix and ;parameters. "application/grpcfoo" is not
// gRPC.
func GRPCKindOf(contentType string) GRPCKind {
	ct := contentType
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	const app = "application/grpc"
	if len(ct) < len(app) || !strings.EqualFold(ct[:len(app)], app) {
		return GRPCNone
	}
	rest := ct[len(app):]
	kind := GRPC
	switch {
	case hasFoldPrefix(rest, "-web-text"):
		kind, rest = GRPCWebText, rest[len("-web-text"):]
	case hasFoldPrefix(rest, "-web"):
		kind, rest = GRPCWeb, rest[len("-web"):]
	}
	if rest == "" || rest[0] == '+' {
		return kind
	}
	return GRPCNone
}

func hasFoldPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
