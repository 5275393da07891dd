package relocate

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/llmesh/llmesh/testkit/cputime"
)

var benchSizes = []int{1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// benchPrompt is printable ASCII like real text prompts (HPACK's Huffman
// code gets its usual ~1.3x on it).
func benchPrompt(n int) string {
	words := strings.Fields("the of and to in a is that for it as was with be by on not he I this are or his from at which but have an they you were her she there one all we their")
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[i*31%len(words)])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// measure runs fn b.N times and reports, per MiB of prompt, the wall time
// ("ms/MiB") and the CPU time of the whole process ("cpu-ms/MiB", which
// includes the garbage collector and, unlike wall time, stays meaningful on
// a machine shared with other work), and the bytes allocated per prompt
// byte. Every copy of the prompt this package makes goes into a buffer it
// allocates, so "allocB/B" counts prompt-sized copies (plus bookkeeping).
func measure(b *testing.B, size int, fn func() error) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cputime.Process()
	b.ResetTimer()
	for b.Loop() {
		if err := fn(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu := cputime.Process() - cpu0
	runtime.ReadMemStats(&after)
	mib := float64(size) / (1 << 20)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6/mib, "ms/MiB")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6/mib, "cpu-ms/MiB")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(size), "allocB/B")
}

// BenchmarkRelocate compares, for prompts of 1 KiB to 4 MiB, relocating the
// prompt into the gRPC message (text and -bin metadata, pull and push forms)
// and into a JSON body, with carrying the same bytes as a header through
// HPACK (encode + decode, as every HTTP/2 hop does).
func BenchmarkRelocate(b *testing.B) {
	msg := frame(b, []byte{0x0a, 0x05, 'm', 'o', 'd', 'e', 'l', 0x20, 0x10}, false)
	body := []byte(`{"model":"model","max_tokens":16}`)
	for _, size := range benchSizes {
		prompt := benchPrompt(size)
		enc := base64.RawStdEncoding.EncodeToString([]byte(prompt))
		textPlan := grpcPlan(b, GRPCRule{Key: "x-prompt-raw", Field: 2, Threshold: Threshold{Bytes: 1}}, prompt)
		binPlan := grpcPlan(b, GRPCRule{Key: "x-prompt-bin", Field: 2, Threshold: Threshold{Bytes: 1}}, enc)
		jsonPlan := httpPlan(b, HTTPRule{}, "/v1/completions", prompt)
		sink := func(p []byte) error { return nil }

		b.Run("grpc-pull/"+sizeName(size), func(b *testing.B) {
			rd := bytes.NewReader(msg)
			measure(b, size, func() error {
				rd.Reset(msg)
				_, err := NewGRPCReader(rd, textPlan, "", nil).WriteTo(io.Discard)
				return err
			})
		})
		b.Run("grpc-pull-unpooled/"+sizeName(size), func(b *testing.B) {
			// Without buffer recycling every prompt-sized buffer shows up
			// as allocated bytes: allocB/B counts the copies of the prompt.
			pooling = false
			defer func() { pooling = true }()
			rd := bytes.NewReader(msg)
			measure(b, size, func() error {
				rd.Reset(msg)
				_, err := NewGRPCReader(rd, textPlan, "", nil).WriteTo(io.Discard)
				return err
			})
		})
		b.Run("grpc-push/"+sizeName(size), func(b *testing.B) {
			measure(b, size, func() error {
				w := NewGRPCRewriter(textPlan, "", nil)
				if err := w.Write(msg, sink); err != nil {
					return err
				}
				return w.Close()
			})
		})
		b.Run("grpc-bin-pull/"+sizeName(size), func(b *testing.B) {
			rd := bytes.NewReader(msg)
			measure(b, size, func() error {
				rd.Reset(msg)
				_, err := NewGRPCReader(rd, binPlan, "", nil).WriteTo(io.Discard)
				return err
			})
		})
		b.Run("json/"+sizeName(size), func(b *testing.B) {
			measure(b, size, func() error {
				out, err := RewriteJSON(body, jsonPlan, nil)
				if err != nil {
					return err
				}
				_, err = out.WriteTo(io.Discard)
				return err
			})
		})
		b.Run("hpack-header/"+sizeName(size), func(b *testing.B) {
			// A fresh encoder and decoder per request: a prompt is never in
			// the dynamic table already (and one over 4 KiB never fits).
			var buf bytes.Buffer
			field := hpack.HeaderField{Name: "x-prompt-raw", Value: prompt}
			measure(b, size, func() error {
				buf.Reset()
				if err := hpack.NewEncoder(&buf).WriteField(field); err != nil {
					return err
				}
				hdec := hpack.NewDecoder(4096, nil)
				hdec.SetMaxStringLength(64 << 20)
				fs, err := hdec.DecodeFull(buf.Bytes())
				if err == nil && len(fs[0].Value) != size {
					err = fmt.Errorf("decoded %d bytes", len(fs[0].Value))
				}
				return err
			})
		})
	}
}
