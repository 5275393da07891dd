package relocate

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestGRPCErrors(t *testing.T) {
	gz := func(b []byte) []byte { return frame(t, b, true) }
	bomb := gz(make([]byte, 1<<20)) // compresses to about 1 KiB
	corrupt := gz([]byte("hello"))
	corrupt[len(corrupt)-6] ^= 0xff // break the CRC
	base := GRPCRule{Key: "x-p", Field: 2, Threshold: Threshold{Bytes: 1}, MaxMessage: 64 << 10}
	refuse := base
	refuse.Compressed = Refuse
	binBytes := GRPCRule{Key: "x-p-bin", Field: 2, Type: Bytes, Threshold: Threshold{Bytes: 1}}
	binString := binBytes
	binString.Type = String
	notUTF8 := base64.StdEncoding.EncodeToString([]byte{'a', 0xff, 'b'})

	for _, tc := range []struct {
		name  string
		rule  GRPCRule
		value string
		enc   string
		in    []byte
		want  error
		msg   string
	}{
		{"empty body", base, "v", "", nil, ErrMalformed, "no message carries the relocated value"},
		{"short prefix", base, "v", "", []byte{0, 0, 0}, ErrMalformed, "prefix"},
		{"short message", base, "v", "", frame(t, []byte("abcdef"), false)[:8], ErrMalformed, "inside the first message"},
		{"bad flag", base, "v", "", []byte{2, 0, 0, 0, 1, 'x'}, ErrMalformed, "flag 2"},
		{"refused", refuse, "v", "gzip", gz([]byte("m")), ErrCompressed, "relocation.grpc[0].compressed"},
		{"identity but flagged", base, "v", "", gz([]byte("m")), ErrEncoding, `grpc-encoding is ""`},
		{"snappy", base, "v", "snappy", gz([]byte("m")), ErrEncoding, `"snappy"`},
		{"declared too large", base, "v", "", []byte{0, 0, 1, 0, 0}, ErrTooLarge, "relocation.grpc[0].max_message = 65536"},
		{"value makes it too large", base, strings.Repeat("v", 40<<10), "", frame(t, make([]byte, 30<<10), false), ErrTooLarge, "max_message"},
		{"gzip bomb", base, "v", "gzip", bomb, ErrTooLarge, "decompressed first message"},
		{"corrupt gzip", base, "v", "gzip", corrupt, ErrMalformed, "gzip"},
		{"bad base64", binBytes, "!!!!", "", frame(t, nil, false), ErrInvalidValue, "base64"},
		{"not utf-8", binString, notUTF8, "", frame(t, nil, false), ErrInvalidValue, "UTF-8"},
		{"bytes take anything", binBytes, notUTF8, "", frame(t, nil, false), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := grpcPlan(t, tc.rule, tc.value)
			rng := rand.New(rand.NewPCG(3, uint64(len(tc.name))))
			for range 5 {
				cs := chunks(rng, tc.in)
				_, pushErr := pushAll(NewGRPCRewriter(plan, tc.enc, nil), cs)
				_, pullErr := pullAll(plan, tc.enc, cs)
				for which, err := range map[string]error{"push": pushErr, "pull": pullErr} {
					if tc.want == nil {
						if err != nil {
							t.Fatalf("%s: %v", which, err)
						}
						continue
					}
					if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
						t.Fatalf("%s: got %v, want %v containing %q", which, err, tc.want, tc.msg)
					}
				}
			}
		})
	}
}

// TestGRPCClientStreaming: on a client-streaming call only the first message
// gets the field; later messages pass through as sub-slices of the input
// chunks, without a copy.
func TestGRPCClientStreaming(t *testing.T) {
	plan := grpcPlan(t, GRPCRule{Key: "x-p", Field: 5, Threshold: Threshold{Bytes: 1}}, "PROMPT")
	first, second, third := frame(t, []byte("one"), false), frame(t, []byte("two"), false), frame(t, []byte("three"), false)
	in := append(append(append([]byte{}, first...), second...), third...)
	// One chunk ending inside the first frame, one holding the rest.
	cs := [][]byte{in[:4], in[4:]}
	w := NewGRPCRewriter(plan, "", nil)
	var out []byte
	var aliased bool
	for _, c := range cs {
		err := w.Write(c, func(p []byte) error {
			if len(p) > 0 && &p[len(p)-1] == &c[len(c)-1] {
				aliased = true
			}
			out = append(out, p...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil || !w.Relocated() {
		t.Fatalf("Close: %v, relocated %v", err, w.Relocated())
	}
	if !aliased {
		t.Error("pass-through bytes were copied instead of handed on")
	}
	msg, rest := unframe(t, out)
	want := protowire.AppendBytes(protowire.AppendTag([]byte("one"), 5, protowire.BytesType), []byte("PROMPT"))
	if !bytes.Equal(msg, want) {
		t.Fatalf("first message %q, want %q", msg, want)
	}
	if !bytes.Equal(rest, append(append([]byte{}, second...), third...)) {
		t.Fatalf("later messages changed: %q", rest)
	}
	// Writes after the first message pass straight through.
	var passed []byte
	if err := w.Write([]byte("more"), func(p []byte) error { passed = p; return nil }); err != nil || string(passed) != "more" {
		t.Fatalf("pass-through write: %q, %v", passed, err)
	}
}

// TestGRPCRecompress: a gzip first message comes out gzip again, and the
// decompressed result is the original with the field appended.
func TestGRPCRecompress(t *testing.T) {
	plan := grpcPlan(t, GRPCRule{Key: "x-p", Field: 2, Threshold: Threshold{Bytes: 1}}, "hello")
	orig := []byte{0x0a, 0x01, 'm'}
	out, err := pullAll(plan, "GZIP", [][]byte{frame(t, orig, true)})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != 1 {
		t.Fatalf("flag %d, want 1", out[0])
	}
	zr, err := gzip.NewReader(bytes.NewReader(out[prefixLen:]))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := got.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{}, orig...), 0x12, 5, 'h', 'e', 'l', 'l', 'o'); !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got %x, want %x", got.Bytes(), want)
	}
}

// TestGRPCReaderWriteTo: io.Copy through WriteTo gives the same bytes as
// Read.
func TestGRPCReaderWriteTo(t *testing.T) {
	plan := grpcPlan(t, GRPCRule{Key: "x-p", Field: 2, Threshold: Threshold{Bytes: 1}}, "hello")
	in := append(frame(t, []byte("a"), false), frame(t, []byte("b"), false)...)
	viaRead, err := pullAll(plan, "", [][]byte{in})
	if err != nil {
		t.Fatal(err)
	}
	var viaWriteTo bytes.Buffer
	r := NewGRPCReader(bytes.NewReader(in), plan, "", nil)
	if _, err := viaWriteTo.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteTo(&viaWriteTo); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(viaRead, viaWriteTo.Bytes()) {
		t.Fatalf("Read gave %q, WriteTo %q", viaRead, viaWriteTo.Bytes())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		key, raw, want string
		err            bool
	}{
		{"x-prompt", "plain=text", "plain=text", false},
		{"x-prompt-bin", base64.StdEncoding.EncodeToString([]byte("ab")), "ab", false},
		{"X-Prompt-Bin", base64.RawStdEncoding.EncodeToString([]byte("ab")), "ab", false},
		{"x-prompt-bin", base64.StdEncoding.EncodeToString([]byte("abc")), "abc", false},
		{"x-prompt-bin", "", "", false},
		{"x-prompt-bin", "A", "", true},
		{"x-prompt-bin", "AB\nC", "", true},
		{"x-prompt-bin", "A===", "", true},
	} {
		v, err := ParseValue(tc.key, tc.raw)
		var got []byte
		if err == nil {
			got, err = v.appendTo(nil, false)
		}
		if (err != nil) != tc.err || (err == nil && string(got) != tc.want) {
			t.Errorf("ParseValue(%q, %q) = %q, %v; want %q, err %v", tc.key, tc.raw, got, err, tc.want, tc.err)
		}
		if err == nil && v.Len() != len(got) {
			t.Errorf("ParseValue(%q, %q).Len() = %d, decoded %d", tc.key, tc.raw, v.Len(), len(got))
		}
	}
}

// TestGRPCReaderCloseDuringRead: HTTP transports close a request body from
// another goroutine while it is being read; under -race this must be clean.
func TestGRPCReaderCloseDuringRead(t *testing.T) {
	plan := grpcPlan(t, GRPCRule{Key: "x-p", Field: 2, Threshold: Threshold{Bytes: 1}}, strings.Repeat("p", 200<<10))
	r := NewGRPCReader(io.NopCloser(bytes.NewReader(frame(t, []byte("m"), false))), plan, "", nil)
	done := make(chan error, 1)
	go func() {
		p := make([]byte, 512)
		for {
			if _, err := r.Read(p); err != nil {
				done <- err
				return
			}
		}
	}()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != io.EOF {
		t.Fatalf("Read ended with %v", err)
	}
}
