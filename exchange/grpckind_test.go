package exchange

import "testing"

func TestGRPCKindOf(t *testing.T) {
	for _, tc := range []struct {
		ct   string
		want GRPCKind
	}{
		{"", GRPCNone},
		{"application/json", GRPCNone},
		{"text/event-stream", GRPCNone},
		{"application/grpc", GRPC},
		{"application/grpc+proto", GRPC},
		{"application/grpc+json", GRPC},
		{"Application/GRPC; charset=utf-8", GRPC},
		{" application/grpc ", GRPC},
		{"application/grpcfoo", GRPCNone},
		{"application/grpc-webby", GRPCNone},
		{"application/grpc-web", GRPCWeb},
		{"application/grpc-web+proto", GRPCWeb},
		{"application/GRPC-WEB;x=1", GRPCWeb},
		{"application/grpc-web-text", GRPCWebText},
		{"application/grpc-web-text+proto", GRPCWebText},
		{"application/grpc-web-textual", GRPCNone},
	} {
		if got := GRPCKindOf(tc.ct); got != tc.want {
			t.Errorf("GRPCKindOf(%q) = %v, want %v", tc.ct, got, tc.want)
		}
	}
	if !GRPC.Framed() || !GRPCWeb.Framed() || GRPCWebText.Framed() || GRPCNone.Framed() {
		t.Error("Framed: want gRPC and binary gRPC-Web only")
	}
}

func FuzzGRPCKindOf(f *testing.F) {
	for _, s := range []string{"application/grpc", "application/grpc-web-text+proto", "application/grpc;a=b", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		k := GRPCKindOf(ct)
		if k != GRPCNone && len(ct) < len("application/grpc") {
			t.Fatalf("%q: %v from a string shorter than the media type", ct, k)
		}
	})
}
