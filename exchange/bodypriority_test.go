package exchange

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

var (
	strip = EnginePriority{Mode: PriorityStrip}
	keep  = EnginePriority{Mode: PriorityKeep}
)

func set(v int32) EnginePriority { return EnginePriority{Mode: PrioritySet, Value: v} }

// TestLLMv1PriorityConstants: the numbers repeated in the filter core match
// the generated llm.v1 code.
func TestLLMv1PriorityConstants(t *testing.T) {
	fd := (&llmv1.GenerateRequest{}).ProtoReflect().Descriptor().Fields().ByName("priority")
	if fd == nil || fd.Number() != llmV1PriorityField {
		t.Fatalf("llm.v1.GenerateRequest.priority is %v, llmV1PriorityField is %d", fd, llmV1PriorityField)
	}
	if llmv1.Generation_Generate_FullMethodName != MethodLLMV1 || vllmpb.VllmEngine_Generate_FullMethodName != MethodVLLM {
		t.Fatalf("generated methods %q, %q; MethodLLMV1 %q, MethodVLLM %q", llmv1.Generation_Generate_FullMethodName,
			vllmpb.VllmEngine_Generate_FullMethodName, MethodLLMV1, MethodVLLM)
	}
}

func TestRewriteJSONPriority(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		p        EnginePriority
		want     string // "" = unchanged
	}{
		{"only member", `{"priority":-100}`, strip, `{}`},
		{"first", `{"priority": -5, "model": "m", "prompt": "p"}`, strip, `{ "model": "m", "prompt": "p"}`},
		{"middle", `{"model":"m", "priority":-5 ,"prompt":"p"}`, strip, `{"model":"m","prompt":"p"}`},
		{"last", "{\n  \"model\": \"m\",\n  \"priority\": -5\n}", strip, "{\n  \"model\": \"m\"}"},
		{"duplicates", `{"priority":1,"model":"m","priority":-9,"priority":"-3"}`, strip, `{"model":"m"}`},
		{"escaped key", `{"model":"m","priorit\u0079":-7}`, strip, `{"model":"m"}`},
		{"every escape form", `{"\u0070\u0072\u0069\u006F\u0072\u0069\u0074\u0079":-7,"a":1}`, strip, `{"a":1}`},
		{"any value type", `{"priority":{"x":[1,{"priority":2}]},"a":[]}`, strip, `{"a":[]}`},
		{"null value", `{"priority":null}`, strip, `{}`},
		{"nested keys stay", `{"model":"m","messages":[{"role":"user","content":"hi","priority":-1}],"tools":[{"type":"function","function":{"parameters":{"properties":{"priority":{"type":"integer"}}}}}]}`, strip, ""},
		{"similar keys stay", `{"priority_class":"x","priority ":1,"prio":2,"priorit":3}`, strip, ""},
		{"upper case", `{"PRIORITY":-100}`, strip, `{}`},
		{"every case variant", `{"Priority":-1,"model":"m","pRiOrItY":-2,"PRIORIT\u0059":-3}`, strip, `{"model":"m"}`},
		{"set replaces case variants", `{"model":"m","PRIORITY":-100}`, set(10), `{"priority":10,"model":"m"}`},
		{"key as a value stays", `{"prompt":"priority","x":"\"priority\":-1"}`, strip, ""},
		{"no priority", `{"model":"m","prompt":"hello"}`, strip, ""},
		{"empty object", `{ }`, strip, ""},
		{"not an object", `["priority", -1]`, strip, ""},
		{"a string", `"priority"`, strip, ""},
		{"empty body", ``, strip, ""},
		{"white space only", " \n\t", strip, ""},
		{"byte order mark", "\xef\xbb\xbf{\"priority\":-1,\"a\":1}", strip, "\xef\xbb\xbf{\"a\":1}"},
		{"trailing white space kept", "{\"priority\":-1}\r\n", strip, "{}\r\n"},
		{"keep", `{"priority":-100}`, keep, ""},
		{"set replaces", `{"model":"m","priority":-100,"priority":-3}`, set(10), `{"priority":10,"model":"m"}`},
		{"set adds", `{"model":"m"}`, set(-2), `{"priority":-2,"model":"m"}`},
		{"set on empty object", `{}`, set(0), `{"priority":0}`},
		{"set leaves non-objects", `[1]`, set(3), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := RewriteJSONPriority([]byte(tc.in), tc.p)
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			want := tc.want
			if want == "" {
				want = tc.in
			}
			if changed != (tc.want != "") {
				t.Errorf("changed = %v", changed)
			}
			got := string(out)
			if tc.p.Mode == PriorityStrip && changed {
				// Stripping blanks in place: compare without the
				// white space, and check that nothing moved.
				checkBlanked(t, []byte(tc.in), out)
				want, got = squeeze(want), squeeze(got)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if changed {
				checkJSONRewrite(t, []byte(tc.in), out, tc.p)
			}
		})
	}
}

// checkBlanked: a stripped body has the input's length and differs only
// where bytes became spaces.
func checkBlanked(t testing.TB, in, out []byte) {
	t.Helper()
	if len(in) != len(out) {
		t.Fatalf("stripping changed the length %d → %d", len(in), len(out))
	}
	for i := range in {
		if out[i] != in[i] && out[i] != ' ' {
			t.Fatalf("byte %d changed from %q to %q", i, in[i], out[i])
		}
	}
}

// squeeze drops JSON white space outside strings.
func squeeze(s string) string {
	var b strings.Builder
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr:
			b.WriteByte(c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			if c == '"' {
				inStr = true
			}
			b.WriteByte(c)
		}
	}
	return b.String()
}

func TestRewriteJSONPriorityRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct{ name, in, msg string }{
		{"NaN", `{"priority":NaN}`, `byte 12: unexpected character 'N'`},
		{"Infinity", `{"a":1,"priority":-Infinity}`, "byte 18: invalid number"},
		{"trailing comma", `{"a":1,}`, "byte 7: expected a member name"},
		{"single quotes", `{'priority':-1}`, "byte 1: expected a member name"},
		{"unquoted key", `{priority:-1}`, "byte 1"},
		{"extra data", `{"a":1}{"priority":-1}`, "byte 7: data after the top-level value"},
		{"two values", `{"a":1} x`, "byte 8"},
		{"unterminated", `{"a":[1,2`, "unterminated array"},
		{"unterminated string", `{"a":"x`, "unterminated string"},
		{"bad escape", `{"a\x":1}`, `invalid escape \x`},
		{"short unicode escape", `{"\u00":1}`, `\u must be followed by four hex digits`},
		{"control character", "{\"a\":\"x\x01\"}", "control character 0x01"},
		{"control character after an escaped quote", "{\"a\":\"x\\\"\x1f\"}", "byte 9: control character 0x1f"},
		{"control character in a long string", "{\"a\":\"" + strings.Repeat("x", 20) + "\n\"}", "byte 26: control character 0x0a"},
		{"escape at the end", `{"a":"\`, "byte 6: unterminated escape"},
		{"bad escape in a long string", `{"a":"` + strings.Repeat("y", 17) + `\q"}`, "byte 23: invalid escape \\q"},
		{"invalid UTF-8", "{\"pri\xffority\":-1}", "not valid UTF-8"},
		{"UTF-16", "{\x00\"\x00p\x00\"\x00:\x001\x00}\x00", "byte 1"},
		{"leading zero", `{"priority":-01}`, "byte 14: expected ',' or '}'"},
		{"bare minus", `{"a":-}`, "invalid number"},
		{"bad literal", `{"a":tru}`, "invalid literal"},
		{"bad literal in non-object", `[nul]`, "invalid literal"},
		{"missing colon", `{"a" 1}`, "expected ':'"},
		{"missing comma", `{"a":1 "priority":-1}`, "expected ',' or '}'"},
		{"array missing comma", `{"a":[1 2]}`, "expected ',' or the end of the array"},
		{"nested trailing comma", `{"a":{"b":1,}}`, "expected a member name"},
		{"deep unterminated", strings.Repeat("[", 100000), "byte 100000: unexpected end of input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := RewriteJSONPriority([]byte(tc.in), strip)
			if !errors.Is(err, ErrPriorityBody) {
				t.Fatalf("err = %v, want ErrPriorityBody", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to contain %q", err, tc.msg)
			}
			if changed || string(out) != tc.in {
				t.Errorf("body changed on error")
			}
			if json.Valid([]byte(tc.in)) && utf8.ValidString(tc.in) {
				t.Errorf("encoding/json accepts %q, which was refused", tc.in)
			}
		})
	}
}

// TestRewriteJSONPriorityDeepNesting: nesting costs no recursion.
func TestRewriteJSONPriorityDeepNesting(t *testing.T) {
	const depth = 200000
	in := `{"priority":1,"a":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
	out, changed, err := RewriteJSONPriority([]byte(in), strip)
	if err != nil || !changed {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	if !bytes.HasPrefix(out, []byte(`{             "a":[[`)) || len(out) != len(in) {
		t.Fatalf("unexpected output of %d bytes", len(out))
	}
}

// checkJSONRewrite: out is valid JSON whose top level equals in's with the
// priority rule applied (encoding/json keeps the last duplicate, so the
// comparison is on what it decodes).
func checkJSONRewrite(t *testing.T, in, out []byte, p EnginePriority) {
	t.Helper()
	in = bytes.TrimPrefix(in, []byte("\xef\xbb\xbf"))
	out = bytes.TrimPrefix(out, []byte("\xef\xbb\xbf"))
	if !json.Valid(out) {
		t.Fatalf("rewrite of %q is not valid JSON: %q", in, out)
	}
	var before, after map[string]json.RawMessage
	if err := json.Unmarshal(in, &before); err != nil {
		t.Fatalf("input %q: %v", in, err)
	}
	if err := json.Unmarshal(out, &after); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	for k := range before {
		if strings.EqualFold(k, priorityKey) {
			delete(before, k)
		}
	}
	// What a Go engine reads: encoding/json matches field names
	// case-insensitively and keeps the last match.
	var engine struct {
		P *json.RawMessage `json:"priority"`
	}
	if err := json.Unmarshal(out, &engine); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	for k := range after {
		if k != priorityKey && strings.EqualFold(k, priorityKey) {
			t.Fatalf("case variant %q still in %q", k, out)
		}
	}
	got, ok := after[priorityKey]
	switch p.Mode {
	case PriorityStrip:
		if ok || engine.P != nil {
			t.Fatalf("priority %s still in %q", got, out)
		}
	case PrioritySet:
		if engine.P == nil || !bytes.Equal(*engine.P, got) {
			t.Fatalf("encoding/json reads priority %s from %q, want %s", ptrString(engine.P), out, got)
		}
		var v int32
		if err := json.Unmarshal(got, &v); err != nil || v != p.Value {
			t.Fatalf("priority %s in %q, want %d", got, out, p.Value)
		}
		if n := bytes.Count(out, []byte(`"priority"`)) - bytes.Count(in, []byte(`"priority"`)); n > 1 {
			t.Fatalf("%d priorities added to %q", n, out)
		}
		delete(after, priorityKey)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("other members changed (-before +after):\n%s", diff)
	}
}

func TestBodyPriorityTrust(t *testing.T) {
	c := testClassifier(t) // trusts 10.0.0.0/8 and the marker x-llmesh-trusted: s3cret
	noHeader, err := NewClassifier(ClassifierConfig{Classes: []Class{{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	trusted, untrusted := netip.MustParseAddr("10.9.8.7"), netip.MustParseAddr("192.0.2.1")
	for _, tc := range []struct {
		name string
		c    *Classifier
		peer netip.Addr
		h    Headers
		want PriorityMode
	}{
		{"trusted peer", c, trusted, nil, PriorityKeep},
		{"v4-mapped trusted peer", c, netip.MustParseAddr("::ffff:10.0.0.1"), nil, PriorityKeep},
		{"untrusted peer", c, untrusted, nil, PriorityStrip},
		{"forwarded-for is not trust", c, untrusted, MapHeaders{"x-forwarded-for": "10.1.1.1", "x-real-ip": "10.1.1.1"}, PriorityStrip},
		{"marker", c, untrusted, MapHeaders{"x-llmesh-trusted": "s3cret"}, PriorityKeep},
		{"wrong marker", c, untrusted, MapHeaders{"x-llmesh-trusted": "s3cre"}, PriorityStrip},
		{"unknown peer", c, netip.Addr{}, nil, PriorityStrip},
		{"no priority header configured", noHeader, trusted, nil, PriorityStrip},
		{"no classifier", nil, trusted, nil, PriorityStrip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.BodyPriority(tc.peer, tc.h).Mode; got != tc.want {
				t.Errorf("mode %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsJSONBody(t *testing.T) {
	for ct, want := range map[string]bool{
		"": true, "application/json": true, "Application/JSON; charset=utf-8": true, "application/vnd.api+json": true,
		"text/plain": false, "multipart/form-data; boundary=x": false, "application/grpc": false,
	} {
		if got := isJSONBody(ct); got != want {
			t.Errorf("isJSONBody(%q) = %v", ct, got)
		}
	}
}

func genReq(t testing.TB, r *llmv1.GenerateRequest) []byte {
	t.Helper()
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRewriteProtoPriority(t *testing.T) {
	base := &llmv1.GenerateRequest{Model: "m", Prompt: "p", MaxTokens: 7, Priority: -100, RequestId: "r",
		Sampling: &llmv1.SamplingParams{IgnoreEos: true}}
	msg := genReq(t, base)
	// An unknown field and a second priority of the wrong wire type.
	msg = protowire.AppendTag(msg, 99, protowire.BytesType)
	msg = protowire.AppendString(msg, "unknown")
	msg = protowire.AppendTag(msg, llmV1PriorityField, protowire.Fixed32Type)
	msg = protowire.AppendFixed32(msg, 5)
	msg = protowire.AppendTag(msg, llmV1PriorityField, protowire.VarintType)
	msg = protowire.AppendVarint(msg, protowire.EncodeZigZag(0)+uint64(0xfffffffffffffff9))

	for _, tc := range []struct {
		name string
		p    EnginePriority
		want int32
	}{{"strip", strip, 0}, {"set", set(10), 10}, {"set negative", set(-3), -3}} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := RewriteProtoPriority(msg, llmV1PriorityField, tc.p)
			if err != nil || !changed {
				t.Fatalf("changed %v, err %v", changed, err)
			}
			var got llmv1.GenerateRequest
			if err := proto.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got.GetPriority() != tc.want {
				t.Errorf("priority %d, want %d", got.GetPriority(), tc.want)
			}
			want := proto.Clone(base).(*llmv1.GenerateRequest)
			want.Priority = tc.want
			got.ProtoReflect().SetUnknown(nil)
			if !proto.Equal(want, &got) {
				t.Errorf("got %v, want %v", &got, want)
			}
			if !bytes.Contains(out, []byte("unknown")) {
				t.Error("unknown field dropped")
			}
		})
	}
	out, changed, err := RewriteProtoPriority(genReq(t, &llmv1.GenerateRequest{Model: "m"}), llmV1PriorityField, strip)
	if err != nil || changed || !bytes.Equal(out, genReq(t, &llmv1.GenerateRequest{Model: "m"})) {
		t.Errorf("a message without priority: changed %v, err %v", changed, err)
	}
	for _, bad := range [][]byte{{0x08}, {0x32, 0x05, 'a'}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {0x0c}} {
		if _, _, err := RewriteProtoPriority(bad, llmV1PriorityField, strip); !errors.Is(err, ErrPriorityBody) {
			t.Errorf("%x: err %v, want ErrPriorityBody", bad, err)
		}
	}
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	out, err := gzipBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRewriteGRPCPriority(t *testing.T) {
	spoof := genReq(t, &llmv1.GenerateRequest{Model: "m", Prompt: "p", Priority: -50})
	clean := genReq(t, &llmv1.GenerateRequest{Model: "m", Prompt: "p"})
	body := append(grpcframe.Raw(0, spoof), grpcframe.Raw(1, gz(t, spoof))...)
	body = append(body, grpcframe.Raw(0, clean)...)
	out, changed, err := RewriteGRPCPriority(body, "gzip", 1<<20, llmV1PriorityField, strip)
	if err != nil || !changed {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	msgs := splitFrames(t, out)
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want 3", len(msgs))
	}
	for i, m := range msgs {
		var r llmv1.GenerateRequest
		if err := proto.Unmarshal(m, &r); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if r.GetPriority() != 0 || r.GetPrompt() != "p" {
			t.Errorf("message %d: %v", i, &r)
		}
	}
	if !bytes.HasSuffix(out, grpcframe.Raw(0, clean)) {
		t.Error("unchanged message not kept byte for byte")
	}

	same, changed, err := RewriteGRPCPriority(grpcframe.Raw(1, gz(t, clean)), "gzip", 1<<20, llmV1PriorityField, strip)
	if err != nil || changed || !bytes.Equal(same, grpcframe.Raw(1, gz(t, clean))) {
		t.Errorf("compressed message without priority: changed %v, err %v", changed, err)
	}

	big := genReq(t, &llmv1.GenerateRequest{Prompt: strings.Repeat("x", 4096)})
	for _, tc := range []struct {
		name, enc string
		body      []byte
		want      error
		msg       string
	}{
		{"truncated prefix", "", []byte{0, 0, 0}, ErrPriorityBody, "truncated prefix"},
		{"truncated message", "", grpcframe.Raw(0, spoof)[:8], ErrPriorityBody, "announced"},
		{"bad flag", "", grpcframe.Raw(2, spoof), ErrPriorityBody, "compressed flag 2"},
		{"deflate", "deflate", grpcframe.Raw(1, spoof), ErrPriorityBody, `grpc-encoding "deflate"`},
		{"flagged without encoding", "", grpcframe.Raw(1, spoof), ErrPriorityBody, `grpc-encoding ""`},
		{"not gzip", "gzip", grpcframe.Raw(1, spoof), ErrPriorityBody, "gzip"},
		{"too large", "", grpcframe.Raw(0, big), ErrPriorityTooLarge, "exceeds 1024"},
		{"gzip bomb", "gzip", grpcframe.Raw(1, gz(t, big)), ErrPriorityTooLarge, "decompressed beyond 1024"},
		{"not protobuf", "", grpcframe.Raw(0, []byte{0x32, 0x7f}), ErrPriorityBody, "protobuf field 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := RewriteGRPCPriority(tc.body, tc.enc, 1024, llmV1PriorityField, strip)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

// splitFrames returns the (decompressed) messages of a gRPC body.
func splitFrames(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated prefix")
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		m := b[5 : 5+n]
		if b[0] == 1 {
			zr, err := gzip.NewReader(bytes.NewReader(m))
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := buf.ReadFrom(zr); err != nil {
				t.Fatal(err)
			}
			m = buf.Bytes()
		}
		out = append(out, m)
		b = b[5+n:]
	}
	return out
}

// FuzzRewriteJSONPriority: any input; no panic; what is accepted is exactly
// what encoding/json accepts (for UTF-8 input), and a rewrite is valid JSON
// with the other top-level members unchanged and no client priority left.
func FuzzRewriteJSONPriority(f *testing.F) {
	for _, s := range []string{
		`{"priority":-100}`, `{"model":"m","priority":-5,"prompt":"p"}`, `{"priority":1,"priority":2}`,
		`{"priorit\u0079":-7}`, `{"PRIORITY":-100}`, `{"Priority":1,"pRIORITY":2,"priority":3}`,
		`{"PRIORIT\u0059":-7,"model":"m"}`, `{"messages":[{"role":"user","content":"x","priority":-1}],"priority":3}`,
		`{"a":[1,2.5e3,-0.1,true,false,null,{"b":"\"\\\/\b\f\n\r\t\u1234"}]}`, `[]`, `"x"`, ``, ` `,
		"\xef\xbb\xbf{\"priority\":1}", `{"a":NaN}`, `{"a":1,}`, `{"a":1}x`, "{\"a\":\"\x01\"}", `{`, `[[[`,
	} {
		f.Add([]byte(s), int32(0), false)
		f.Add([]byte(s), int32(-4), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, v int32, setMode bool) {
		p := strip
		if setMode {
			p = set(v)
		}
		in := append([]byte(nil), body...)
		out, changed, err := RewriteJSONPriority(body, p)
		if !bytes.Equal(in, body) {
			t.Fatal("input modified")
		}
		trimmed := bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
		blank := len(bytes.TrimLeft(trimmed, " \t\r\n")) == 0
		valid := json.Valid(trimmed) && utf8.Valid(body)
		switch {
		case err != nil:
			if !errors.Is(err, ErrPriorityBody) {
				t.Fatalf("error %v is not ErrPriorityBody", err)
			}
			if strings.HasSuffix(err.Error(), ": invalid string") {
				t.Fatalf("%q: the string check and its explanation disagree: %v", body, err)
			}
			if valid {
				t.Fatalf("valid JSON %q refused: %v", body, err)
			}
			if changed || !bytes.Equal(out, body) {
				t.Fatal("body changed on error")
			}
		case !blank && !valid:
			t.Fatalf("invalid JSON %q accepted", body)
		case !changed:
			if !bytes.Equal(out, body) {
				t.Fatal("unchanged but different")
			}
			if !blank && bytes.HasPrefix(bytes.TrimLeft(trimmed, " \t\r\n"), []byte("{")) {
				var m struct {
					P *json.RawMessage `json:"priority"`
				}
				if json.Unmarshal(trimmed, &m) == nil && m.P != nil {
					t.Fatalf("priority %s left in %q", *m.P, body)
				}
			}
		default:
			checkJSONRewrite(t, body, out, p)
			if !setMode {
				checkBlanked(t, body, out)
			}
		}
	})
}

// FuzzRewriteGRPCPriority: any body; no panic; an accepted rewrite leaves
// every message parseable as before with no priority (strip) or exactly the
// set one, and other fields unchanged.
func FuzzRewriteGRPCPriority(f *testing.F) {
	spoof := genReq(f, &llmv1.GenerateRequest{Model: "m", Prompt: "p", Priority: -50, MaxTokens: 3})
	f.Add(grpcframe.Raw(0, spoof), false, int32(0))
	f.Add(grpcframe.Raw(1, gz(f, spoof)), true, int32(7))
	f.Add(append(grpcframe.Raw(0, spoof), grpcframe.Raw(0, spoof)...), false, int32(-1))
	f.Add(grpcframe.Raw(0, []byte{0x30, 0x01, 0x35, 1, 2, 3, 4, 0x33, 0x34}), false, int32(2))
	f.Add([]byte{0, 0, 0, 0, 0}, true, int32(1))
	f.Add([]byte{1, 0, 0, 0, 3, 1, 2, 3}, false, int32(1))
	f.Fuzz(func(t *testing.T, body []byte, setMode bool, v int32) {
		p := strip
		if setMode {
			p = set(v)
		}
		out, changed, err := RewriteGRPCPriority(body, "gzip", 1<<16, llmV1PriorityField, p)
		if err != nil {
			if !errors.Is(err, ErrPriorityBody) && !errors.Is(err, ErrPriorityTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if !changed {
			if !bytes.Equal(out, body) {
				t.Fatal("unchanged but different")
			}
		}
		before, after := splitFrames(t, body), splitFrames(t, out)
		if len(before) != len(after) {
			t.Fatalf("%d messages became %d", len(before), len(after))
		}
		for i := range before {
			var a, b llmv1.GenerateRequest
			errA := proto.Unmarshal(before[i], &a)
			errB := proto.Unmarshal(after[i], &b)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("message %d: parse before %v, after %v", i, errA, errB)
			}
			want := int32(0)
			if setMode {
				want = v
			}
			if errB == nil && b.GetPriority() != want {
				t.Fatalf("message %d: priority %d, want %d", i, b.GetPriority(), want)
			}
			if errA == nil {
				a.Priority, b.Priority = 0, 0
				a.ProtoReflect().SetUnknown(nil)
				b.ProtoReflect().SetUnknown(nil)
				if !proto.Equal(&a, &b) {
					t.Fatalf("message %d: other fields changed: %v → %v", i, &a, &b)
				}
			}
		}
	})
}

// BenchmarkRewriteJSONPriority: the scan every untrusted OpenAI body pays
// before admission, for a typical chat request and a 1 MiB prompt.
func BenchmarkRewriteJSONPriority(b *testing.B) {
	chat := []byte(`{"model":"llama","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"` +
		strings.Repeat("tell me a story about a llama ", 30) + `"}],"max_tokens":256,"stream":true,"stream_options":{"include_usage":true},"priority":-100}`)
	big := []byte(`{"model":"llama","prompt":"` + strings.Repeat("lorem ipsum dolor sit amet ", 1<<20/27) + `","max_tokens":16,"priority":-100}`)
	for _, bc := range []struct {
		name string
		body []byte
	}{{"chat-1KiB", chat}, {"prompt-1MiB", big}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := RewriteJSONPriority(bc.body, strip); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRewriteGRPCPriority: the same for an llm.v1 request.
func BenchmarkRewriteGRPCPriority(b *testing.B) {
	body := grpcframe.Raw(0, genReq(b, &llmv1.GenerateRequest{Model: "llama", Prompt: strings.Repeat("x", 1000), MaxTokens: 256, Priority: -100}))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := RewriteGRPCPriority(body, "", 1<<20, llmV1PriorityField, strip); err != nil {
			b.Fatal(err)
		}
	}
}

func ptrString(p *json.RawMessage) string {
	if p == nil {
		return "nothing"
	}
	return string(*p)
}
