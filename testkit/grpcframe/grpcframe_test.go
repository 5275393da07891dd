package grpcframe_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// header splits a frame into its flag and payload, checking the length.
func header(t *testing.T, f []byte) (byte, []byte) {
	t.Helper()
	if len(f) < 5 {
		t.Fatalf("frame of %d bytes, shorter than its prefix", len(f))
	}
	if n := binary.BigEndian.Uint32(f[1:5]); int(n) != len(f)-5 {
		t.Fatalf("length prefix %d, payload %d bytes", n, len(f)-5)
	}
	return f[0], f[5:]
}

func TestRaw(t *testing.T) {
	for _, tc := range []struct {
		flag    byte
		payload []byte
	}{{0, nil}, {0x80, []byte("grpc-status:0\r\n")}, {1, bytes.Repeat([]byte{7}, 70000)}} {
		flag, payload := header(t, grpcframe.Raw(tc.flag, tc.payload))
		if flag != tc.flag || !bytes.Equal(payload, tc.payload) {
			t.Errorf("Raw(%#x, %d bytes) = flag %#x, %d bytes", tc.flag, len(tc.payload), flag, len(payload))
		}
	}
}

func TestMessageRoundTrips(t *testing.T) {
	want := &llmv1.GenerateRequest{Model: "m", Prompt: "a prompt", MaxTokens: 7, Priority: -5}
	flag, payload := header(t, grpcframe.Message(want))
	got := &llmv1.GenerateRequest{}
	if err := proto.Unmarshal(payload, got); err != nil {
		t.Fatal(err)
	}
	if flag != 0 || !proto.Equal(got, want) {
		t.Fatalf("flag %#x, message %v; want 0 and %v", flag, got, want)
	}
}

func TestGzipDecompresses(t *testing.T) {
	want := bytes.Repeat([]byte("prompt "), 1000)
	flag, payload := header(t, grpcframe.Gzip(want))
	zr, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if flag != 1 || !bytes.Equal(got, want) {
		t.Fatalf("flag %#x, %d bytes back; want 1 and %d", flag, len(got), len(want))
	}
}
