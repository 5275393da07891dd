package relocate

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/llmesh/llmesh/testkit/grpcframe"
)

var sentinels = []error{ErrTooLarge, ErrInvalidValue, ErrMalformed, ErrCompressed, ErrEncoding}

func errClass(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// FuzzGRPCRewriter feeds arbitrary bodies, split at arbitrary points, with
// arbitrary values through both rewriters. They must never panic, must agree
// byte for byte (or fail with the same error class), must keep the first
// message within the limit, and on success the output must be the first
// message plus exactly the appended field, followed by the untouched rest.
func FuzzGRPCRewriter(f *testing.F) {
	seedFrame := grpcframe.Raw
	f.Add(seedFrame(0, []byte{0x0a, 1, 'm'}), uint16(3), uint16(7), "prompt", false, false, uint8(0))
	f.Add(append(seedFrame(0, nil), seedFrame(0, []byte("x"))...), uint16(0), uint16(5), "cHJvbXB0", true, false, uint8(1))
	f.Add(seedFrame(1, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}), uint16(2), uint16(9), "p", false, false, uint8(1))
	f.Add(seedFrame(1, []byte("zz")), uint16(1), uint16(1), "p", false, true, uint8(2))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff}, uint16(1), uint16(2), "p", false, false, uint8(0))
	f.Add([]byte{7, 0, 0, 0, 0}, uint16(0), uint16(0), "p", false, false, uint8(0))
	f.Add(seedFrame(0, []byte("abc"))[:6], uint16(1), uint16(4), "\xff", true, false, uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, s1, s2 uint16, value string, bin, refuse bool, enc uint8) {
		key := "x-prompt"
		if bin {
			key += "-bin"
		}
		rule := GRPCRule{Key: key, Field: 1 + int(s1%40), Type: FieldType(s2 % 2), Threshold: Threshold{Bytes: 1}, MaxMessage: 1 << 16}
		if refuse {
			rule.Compressed = Refuse
		}
		r, err := Compile(Config{GRPC: []GRPCRule{rule}})
		if err != nil {
			t.Fatal(err)
		}
		plan, err := r.PlanGRPC("/m", hdrs{key: {value}})
		if err != nil || plan == nil {
			return
		}
		encoding := []string{"", "gzip", "snappy", "identity"}[enc%4]
		a, b := int(s1)%(len(body)+1), int(s2)%(len(body)+1)
		a, b = min(a, b), max(a, b)
		cs := [][]byte{body[:a], body[a:b], body[b:]}

		push, pushErr := pushAll(NewGRPCRewriter(plan, encoding, nil), cs)
		pull, pullErr := pullAll(plan, encoding, cs)
		if errClass(pushErr) != errClass(pullErr) {
			t.Fatalf("push error %v, pull error %v", pushErr, pullErr)
		}
		if pushErr != nil {
			if errClass(pushErr) == pushErr {
				t.Fatalf("error %v has no class", pushErr)
			}
			return
		}
		if !bytes.Equal(push, pull) {
			t.Fatalf("push and pull differ:\n%x\n%x", push, pull)
		}
		n := int(binary.BigEndian.Uint32(push[1:prefixLen]))
		if n > rule.MaxMessage && push[0] == 0 {
			t.Fatalf("first message of %d bytes over the %d limit", n, rule.MaxMessage)
		}
		if body[0] == 1 {
			return // recompressed; the property test checks content
		}
		inLen := int(binary.BigEndian.Uint32(body[1:prefixLen]))
		val, err := plan.Value.appendTo(nil, false)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]byte{}, body[prefixLen:prefixLen+inLen]...)
		want = protowire.AppendBytes(protowire.AppendTag(want, protowire.Number(rule.Field), protowire.BytesType), val)
		if !bytes.Equal(push[prefixLen:prefixLen+n], want) {
			t.Fatalf("first message\n%x\nwant\n%x", push[prefixLen:prefixLen+n], want)
		}
		if !bytes.Equal(push[prefixLen+n:], body[prefixLen+inLen:]) {
			t.Fatal("bytes after the first message changed")
		}
	})
}

// FuzzRewriteJSON: arbitrary bodies and values never panic; whenever the
// rewrite succeeds the result is valid JSON carrying the value.
func FuzzRewriteJSON(f *testing.F) {
	f.Add(`{"model":"m"}`, "hello", false)
	f.Add(`{"messages":[{"role":"system","content":"x"}]}`, "q\"\\\n", true)
	f.Add(` {"prompt" : [1,{"a":"]"}] , "x":null } `, "p", false)
	f.Add(`{"messages":null}`, "p", true)
	f.Add(`{"a":"\u0022\\"}`, "\u2028", false)
	f.Add(`[1]`, "p", false)
	f.Fuzz(func(t *testing.T, body, value string, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		r, err := Compile(Config{HTTP: []HTTPRule{{Header: "x-prompt", Threshold: Threshold{Bytes: 1}, MaxBody: 1 << 16}}})
		if err != nil {
			t.Fatal(err)
		}
		plan, err := r.PlanHTTP(path, hdrs{"x-prompt": {value}})
		if err != nil || plan == nil {
			return
		}
		out, err := RewriteJSON([]byte(body), plan, nil)
		var obj map[string]json.RawMessage
		isObject := json.Unmarshal([]byte(body), &obj) == nil && obj != nil
		if err != nil {
			if errClass(err) == err {
				t.Fatalf("error %v has no class", err)
			}
			if isObject && utf8.ValidString(value) && !errors.Is(err, ErrTooLarge) && !(chat && errors.Is(err, ErrMalformed)) {
				t.Fatalf("valid object refused: %v", err)
			}
			return
		}
		got := out.Bytes()
		if len(got) != out.Len() {
			t.Fatalf("Len %d, bytes %d", out.Len(), len(got))
		}
		// Map keys match exactly (struct fields would match case-insensitively).
		var top map[string]json.RawMessage
		if err := json.Unmarshal(got, &top); err != nil {
			t.Fatalf("rewritten body %q: %v", got, err)
		}
		if chat {
			var msgs []json.RawMessage
			if err := json.Unmarshal(top["messages"], &msgs); err != nil || len(msgs) == 0 {
				t.Fatalf("rewritten chat body %q: %v", got, err)
			}
			var last struct{ Role, Content string }
			if err := json.Unmarshal(msgs[len(msgs)-1], &last); err != nil || last.Role != "user" || last.Content != value {
				t.Fatalf("last message %s, want user %q", msgs[len(msgs)-1], value)
			}
			return
		}
		var p string
		if err := json.Unmarshal(top["prompt"], &p); err != nil || p != value {
			t.Fatalf("prompt %s, want %q (%v)", top["prompt"], value, err)
		}
	})
}

// FuzzScanObject: scanObject accepts exactly the documents json.Valid
// accepts whose top-level value is an object, and finds the last member of
// the name asked for, as encoding/json does.
func FuzzScanObject(f *testing.F) {
	for _, s := range scanObjectSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		checkScanObject(t, []byte(body))
	})
}

func scanObjectSeeds() []string {
	return []string{
		`{"prompt":"x"}`, ` { "a" : 1 , "prompt" : [1,{"b":"]"}], "prompt":null } `, `{}`, `{ }`, `[]`, `""`, ``, ` `,
		`{"a":1,}`, `{"a":1}x`, `{"a" 1}`, `{"a":}`, `{"a":"\x01"}`, `{"prompt":"\q"}`, `{"pr\u006fmpt":"y"}`,
		`{"a":01}`, `{"a":-}`, `{"a":tru}`, `{"a":[1,2}`, `{"a":{"b":1]}`, "{\"a\":\"\xff\"}", `{"a":1} {}`,
		`{"a":` + strings.Repeat("[", jsonDepth-1) + strings.Repeat("]", jsonDepth-1) + `}`,
		`{"a":` + strings.Repeat("[", jsonDepth) + strings.Repeat("]", jsonDepth) + `}`,
	}
}

// jsonDepth is encoding/json's nesting limit.
const jsonDepth = 10000

func checkScanObject(t *testing.T, body []byte) {
	t.Helper()
	o, err := scanObject(body, "prompt")
	var top map[string]json.RawMessage
	want := json.Valid(body) && json.Unmarshal(body, &top) == nil && top != nil
	if (err == nil) != want {
		t.Fatalf("scanObject(%.80q): err %v, want accepted %v", body, err, want)
	}
	if err == nil {
		got, has := json.RawMessage(nil), o.valStart >= 0
		if has {
			got = body[o.valStart:o.valEnd]
		}
		if wantV, ok := top["prompt"]; ok != has || has && string(wantV) != string(got) {
			t.Fatalf("scanObject(%.80q): prompt %q (%v), want %q (%v)", body, got, has, wantV, ok)
		}
		if body[o.closing] != '}' {
			t.Fatalf("scanObject(%.80q): closing at %d is %q", body, o.closing, body[o.closing])
		}
	} else if !errors.Is(err, ErrMalformed) {
		t.Fatalf("error %v is not ErrMalformed", err)
	}
}

func TestScanObjectMatchesValid(t *testing.T) {
	for _, s := range scanObjectSeeds() {
		checkScanObject(t, []byte(s))
	}
}
