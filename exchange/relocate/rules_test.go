package relocate

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
)

func TestCompileErrors(t *testing.T) {
	_, err := Compile(Config{
		GRPC: []GRPCRule{
			{Key: "", Field: 0},
			{Key: "x", Field: 19500, Max: 10, MaxMessage: 5},
			{Key: "grpc-timeout", Field: 2, Type: 7, Compressed: 9, Threshold: Threshold{Bytes: -1}},
		},
		HTTP: []HTTPRule{{Header: " ", PathPrefix: "v1", Field: `a"b`, Max: -3}},
	})
	if err == nil {
		t.Fatal("Compile accepted invalid rules")
	}
	for _, want := range []string{
		"relocation.grpc[0].metadata: required",
		"relocation.grpc[0].field: 0 must be in 1..536870911",
		"relocation.grpc[1].field: 19500 is in protobuf's reserved range",
		"relocation.grpc[1].max: 10 exceeds max_message 5",
		`relocation.grpc[2].metadata: "grpc-timeout" is reserved`,
		"relocation.grpc[2].type: 7 is neither string nor bytes",
		"relocation.grpc[2].compressed: 9 is neither",
		"relocation.grpc[2].threshold: -1 must not be negative",
		"relocation.http[0].header: required",
		`relocation.http[0].path_prefix: "v1" must start with /`,
		`relocation.http[0].field: "a\"b" must not contain`,
		"relocation.http[0].max: -3 must not be negative",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestThreshold(t *testing.T) {
	for _, tc := range []struct {
		th   Threshold
		n    int
		want bool
	}{
		{Threshold{}, 0, true},
		{Threshold{Bytes: 10}, 9, false},
		{Threshold{Bytes: 10}, 10, true},
		{Threshold{Tokens: 3}, 11, false},
		{Threshold{Tokens: 3}, 12, true},
		{Threshold{Bytes: 100, Tokens: 3}, 12, true},
	} {
		if got := tc.th.Reached(tc.n); got != tc.want {
			t.Errorf("%+v.Reached(%d) = %v, want %v", tc.th, tc.n, got, tc.want)
		}
	}
}

func TestPlanGRPC(t *testing.T) {
	r := mustCompile(t, Config{GRPC: []GRPCRule{
		{Method: "/a.B/C", Key: "X-Prompt-Raw", Field: 2, Threshold: Threshold{Bytes: 8}, Max: 100},
		{Key: "x-prompt-bin", Field: 3, Type: Bytes, Threshold: Threshold{Bytes: 2}, Max: 100},
	}})
	for _, tc := range []struct {
		name, method string
		h            hdrs
		wantKey      string
		wantLen      int
		wantErr      error
	}{
		{"no header", "/a.B/C", hdrs{}, "", 0, nil},
		{"other method", "/a.B/D", hdrs{"x-prompt-raw": {"0123456789"}}, "", 0, nil},
		{"under threshold", "/a.B/C", hdrs{"x-prompt-raw": {"0123456"}}, "", 0, nil},
		{"text", "/a.B/C", hdrs{"x-prompt-raw": {"01234567"}}, "x-prompt-raw", 8, nil},
		{"padded bin", "/q.R/S", hdrs{"x-prompt-bin": {"aGVsbG8="}}, "x-prompt-bin", 5, nil},
		{"raw bin", "/q.R/S", hdrs{"x-prompt-bin": {"aGVsbG8"}}, "x-prompt-bin", 5, nil},
		{"bin length", "/q.R/S", hdrs{"x-prompt-bin": {"aGVsb"}}, "", 0, ErrInvalidValue},
		{"twice", "/a.B/C", hdrs{"x-prompt-raw": {"01234567", "x"}}, "", 0, ErrInvalidValue},
		{"over max", "/a.B/C", hdrs{"x-prompt-raw": {strings.Repeat("a", 101)}}, "", 0, ErrTooLarge},
	} {
		p, err := r.PlanGRPC(tc.method, tc.h)
		if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.wantErr)
			continue
		}
		switch {
		case tc.wantKey == "" && p != nil:
			t.Errorf("%s: unexpected plan for %s", tc.name, p.Key)
		case tc.wantKey != "" && (p == nil || p.Key != tc.wantKey || p.Value.Len() != tc.wantLen):
			t.Errorf("%s: plan %+v, want key %s len %d", tc.name, p, tc.wantKey, tc.wantLen)
		}
	}
	var le *LimitError
	_, err := r.PlanGRPC("/a.B/C", hdrs{"x-prompt-raw": {strings.Repeat("a", 101)}})
	if !errors.As(err, &le) || le.Limit != "relocation.grpc[0].max" || le.Size != 101 || le.Max != 100 {
		t.Fatalf("limit error %#v", err)
	}
}

func TestPlanHTTP(t *testing.T) {
	r := mustCompile(t, Config{HTTP: []HTTPRule{
		{PathPrefix: "/v1/", Header: "x-prompt", Threshold: Threshold{Tokens: 2}},
		{Header: "x-input", Field: "input", Threshold: Threshold{Bytes: 1}},
	}})
	for _, tc := range []struct {
		path      string
		h         hdrs
		chat      bool
		field     string
		wantPlan  bool
		wantError bool
	}{
		{"/v1/completions", hdrs{"x-prompt": {"12345678"}}, false, "prompt", true, false},
		{"/v1/chat/completions", hdrs{"x-prompt": {"12345678"}}, true, "messages", true, false},
		{"/v1/completions", hdrs{"x-prompt": {"1234567"}}, false, "", false, false},
		{"/v2/completions", hdrs{"x-prompt": {"12345678"}}, false, "", false, false},
		{"/v2/embeddings", hdrs{"x-input": {"x"}}, false, "input", true, false},
		{"/v1/completions", hdrs{"x-prompt": {"12345678", "12345678"}}, false, "", false, true},
		{"/v1/completions", hdrs{"x-prompt": {"12345678"}, "content-encoding": {"gzip"}}, false, "", false, true},
		{"/v1/completions", hdrs{"x-prompt": {"12345678"}, "content-encoding": {"identity"}}, false, "prompt", true, false},
	} {
		p, err := r.PlanHTTP(tc.path, tc.h)
		if (err != nil) != tc.wantError || (p != nil) != tc.wantPlan {
			t.Errorf("%s %v: plan %+v err %v", tc.path, tc.h, p, err)
			continue
		}
		if p != nil && (p.Chat != tc.chat || p.Field != tc.field) {
			t.Errorf("%s: chat %v field %q, want %v %q", tc.path, p.Chat, p.Field, tc.chat, tc.field)
		}
	}
}

func TestFromConfig(t *testing.T) {
	cfg, err := config.Load([]byte(`
pools:
  - name: engine
    protocol: grpc
    endpoints: ["127.0.0.1:9000"]
listeners:
  - name: main
    address: 127.0.0.1:8080
    routes:
      - pool: engine
relocation:
  grpc:
    - metadata: x-prompt-raw
      field: 2
      threshold: 1024
      compressed: refuse
    - metadata: x-prompt-bin
      field: 3
      type: bytes
  http:
    - header: x-prompt
      threshold: 1000
      max: 2048
`))
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	r, err := FromConfig(cfg.Relocation)
	if err != nil {
		t.Fatal(err)
	}
	want := []GRPCRule{
		{Key: "x-prompt-raw", Field: 2, Threshold: Threshold{Bytes: 1024}, Max: DefaultMax, MaxMessage: DefaultMaxMessage, Compressed: Refuse, path: "relocation.grpc[0]", limitPath: "relocation.max_message"},
		{Key: "x-prompt-bin", Field: 3, Type: Bytes, Threshold: Threshold{Bytes: DefaultThresholdBytes}, Max: DefaultMax, MaxMessage: DefaultMaxMessage, path: "relocation.grpc[1]", limitPath: "relocation.max_message"},
	}
	if diff := cmp.Diff(want, r.grpc, cmp.AllowUnexported(GRPCRule{})); diff != "" {
		t.Errorf("grpc rules (-want +got):\n%s", diff)
	}
	if len(r.http) != 1 || r.http[0].MaxBody != DefaultMaxBody {
		t.Errorf("http rules %+v, want max_body %d", r.http, DefaultMaxBody)
	}
	// The mesh config defaults field to "prompt"; on chat paths that means a
	// user message.
	p, err := r.PlanHTTP("/v1/chat/completions", hdrs{"x-prompt": {strings.Repeat("a", 5000)}})
	if err == nil || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want the http max of 2048 to apply, got plan %+v err %v", p, err)
	}
	if p, err = r.PlanHTTP("/v1/chat/completions", hdrs{"x-prompt": {strings.Repeat("a", 999)}}); p != nil || err != nil {
		t.Fatalf("999 bytes is under the threshold, got plan %+v err %v", p, err)
	}
	p, err = r.PlanHTTP("/v1/chat/completions", hdrs{"x-prompt": {strings.Repeat("a", 1000)}})
	if err != nil || p == nil || !p.Chat || p.Field != "messages" {
		t.Fatalf("want a chat plan, got %+v err %v", p, err)
	}
}

// TestFromConfigLimits: the section-wide limits of the mesh file reach every
// rule, and the mesh config's defaults are this package's.
func TestFromConfigLimits(t *testing.T) {
	if config.DefaultRelocMaxMessage != DefaultMaxMessage || config.DefaultRelocMaxBody != DefaultMaxBody ||
		config.DefaultRelocMax != DefaultMax || config.DefaultRelocThreshold != DefaultThresholdBytes {
		t.Errorf("config defaults (max_message %d, max_body %d, max %d, threshold %d) differ from relocate's (%d, %d, %d, %d)",
			config.DefaultRelocMaxMessage, config.DefaultRelocMaxBody, config.DefaultRelocMax, config.DefaultRelocThreshold,
			DefaultMaxMessage, DefaultMaxBody, DefaultMax, DefaultThresholdBytes)
	}
	cfg, err := config.Load([]byte(`
relocation:
  max_message: 20971520
  max_body: 3000
  grpc:
    - {metadata: x-a, field: 2}
    - {metadata: x-b, field: 3, max: 20971520}
  http:
    - {header: x-prompt, threshold: 1000, max: 2048}
`))
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	r, err := FromConfig(cfg.Relocation)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range r.grpc {
		if g.MaxMessage != 20<<20 {
			t.Errorf("grpc[%d].MaxMessage = %d, want %d", i, g.MaxMessage, 20<<20)
		}
	}
	if r.grpc[1].Max != 20<<20 {
		t.Errorf("grpc[1].Max = %d", r.grpc[1].Max)
	}
	p, err := r.PlanHTTP("/v1/completions", hdrs{"x-prompt": {strings.Repeat("a", 1500)}})
	if err != nil || p == nil || p.Rule.MaxBody != 3000 {
		t.Fatalf("plan %+v err %v, want max_body 3000", p, err)
	}
	// Limit errors name the field of the mesh file that sets the limit.
	var le *LimitError
	if err := p.CheckBodySize(3001); !errors.As(err, &le) || le.Limit != "relocation.max_body" {
		t.Errorf("body over max_body: %v, want a LimitError naming relocation.max_body", err)
	}
	if _, err := RewriteJSON([]byte(`{"model":"m","pad":"`+strings.Repeat("x", 1600)+`"}`), p, nil); !errors.As(err, &le) || le.Limit != "relocation.max_body" {
		t.Errorf("rewritten body over max_body: %v, want a LimitError naming relocation.max_body", err)
	}
}
