package relocate

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// hdrs is a header map keyed by lower-case name.
type hdrs map[string][]string

func (h hdrs) Values(k string) []string { return h[strings.ToLower(k)] }

func mustCompile(t testing.TB, cfg Config) *Relocator {
	t.Helper()
	r, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return r
}

// grpcPlan compiles one rule and plans it for value under key.
func grpcPlan(t testing.TB, rule GRPCRule, value string) *GRPCPlan {
	t.Helper()
	r := mustCompile(t, Config{GRPC: []GRPCRule{rule}})
	p, err := r.PlanGRPC("/x.Y/Z", hdrs{strings.ToLower(rule.Key): {value}})
	if err != nil {
		t.Fatalf("PlanGRPC: %v", err)
	}
	if p == nil {
		t.Fatalf("PlanGRPC: no plan for %d bytes", len(value))
	}
	return p
}

// frame wraps msg in a gRPC length prefix, gzip-compressing it when asked.
func frame(t testing.TB, msg []byte, compress bool) []byte {
	t.Helper()
	if compress {
		return grpcframe.Gzip(msg)
	}
	return grpcframe.Raw(0, msg)
}

// unframe splits the first frame off b and returns its (decompressed)
// message and the rest.
func unframe(t testing.TB, b []byte) (msg, rest []byte) {
	t.Helper()
	if len(b) < prefixLen {
		t.Fatalf("output of %d bytes has no frame prefix", len(b))
	}
	n := int(binary.BigEndian.Uint32(b[1:prefixLen]))
	if len(b) < prefixLen+n {
		t.Fatalf("frame says %d bytes, output has %d", n, len(b)-prefixLen)
	}
	msg, rest = b[prefixLen:prefixLen+n], b[prefixLen+n:]
	if b[0] == 1 {
		zr, err := gzip.NewReader(bytes.NewReader(msg))
		if err != nil {
			t.Fatal(err)
		}
		if msg, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return msg, rest
}

// chunks splits b at random points (including empty chunks).
func chunks(rng *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := rng.IntN(min(len(b), 64)+1) + rng.IntN(2)*rng.IntN(len(b)+1)
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// chunkReader returns its chunks one Read at a time.
type chunkReader struct{ cs [][]byte }

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cs) > 0 && len(r.cs[0]) == 0 {
		r.cs = r.cs[1:]
	}
	if len(r.cs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.cs[0])
	r.cs[0] = r.cs[0][n:]
	return n, nil
}

// pushAll runs the push rewriter over cs and returns its output.
func pushAll(w *GRPCRewriter, cs [][]byte) ([]byte, error) {
	var out []byte
	emit := func(p []byte) error { out = append(out, p...); return nil }
	for _, c := range cs {
		if err := w.Write(c, emit); err != nil {
			return out, err
		}
	}
	return out, w.Close()
}

// pullAll runs the pull rewriter over cs and returns its output.
func pullAll(plan *GRPCPlan, enc string, cs [][]byte) ([]byte, error) {
	cp := make([][]byte, len(cs))
	copy(cp, cs)
	return io.ReadAll(NewGRPCReader(&chunkReader{cs: cp}, plan, enc, nil))
}
