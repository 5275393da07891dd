package envoyfilter

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/llmesh/llmesh/testkit/fakesdk"
)

func TestParseSettingsForms(t *testing.T) {
	settings := `{"mesh": ` + testMesh("priority", "") + `, "pool": "sim", "retry_after": "3s"}`
	for name, a := range map[string]*anypb.Any{
		"Struct":      structAny(t, settings),
		"TypedStruct": typedStructAny(t, settings),
	} {
		t.Run(name, func(t *testing.T) {
			fc, err := ParseSettings(a)
			if err != nil {
				t.Fatal(err)
			}
			want(t, "pool", fc.Pool.Name, "sim")
			want(t, "retry_after", fc.RetryAfter, "3s")
			want(t, "default class", fc.Mesh.DefaultClass.Name, "batch")
			want(t, "policy", fc.Mesh.Pools[0].Scheduler.Policy, "priority")
		})
	}
}

// TestParseDefinesStats: Envoy stats exist from Parse on, before any
// request.
func TestParseDefinesStats(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, false)
	counters, gauges := h.metrics.Names()
	sort.Strings(counters)
	sort.Strings(gauges)
	wantC := []string{StatAdmitted, StatCancelledQueued, StatCompleted, StatFailed, StatRouteConfigErrors,
		StatObserveErrors, StatPanics, StatPreempted, StatQueueFull, StatRejected, StatRelocated,
		StatRelocationErrors, StatRequests, StatUnavailable, StatPriorityStripped, StatPrioritySet, StatPriorityRefused,
		StatOverrideFailed}
	sort.Strings(wantC)
	if d := cmp.Diff(wantC, counters); d != "" {
		t.Errorf("counters (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{GaugeInflight, GaugeQueued}, gauges); d != "" {
		t.Errorf("gauges (-want +got):\n%s", d)
	}
}

func TestParseSettingsErrors(t *testing.T) {
	good := testMesh("fifo", "")
	wrong, _ := anypb.New(wrapperspb.String("x"))
	for _, tc := range []struct {
		name string
		any  *anypb.Any
		want []string // substrings, all required
	}{
		{"nil", nil, []string{"plugin_config: missing"}},
		{"wrong type", wrong, []string{`type "type.googleapis.com/google.protobuf.StringValue" not supported`}},
		{"bad bytes", &anypb.Any{TypeUrl: structURL, Value: []byte{0xff, 0xff}}, []string{"plugin_config: bad Struct"}},
		{"bad typed struct", &anypb.Any{TypeUrl: typedStructURL, Value: []byte{0x12, 0x05}}, []string{"plugin_config: bad TypedStruct"}},
		{"no mesh", structAny(t, `{}`), []string{"mesh: required"}},
		{"mesh not object", structAny(t, `{"mesh": "x"}`), []string{"mesh: must be an object"}},
		{"unknown field", structAny(t, `{"mesh": `+good+`, "pools": 1}`), []string{"pools: unknown field"}},
		{"non-string", structAny(t, `{"mesh": `+good+`, "pool": 3}`), []string{"pool: must be a string, got a number"}},
		{"unknown pool", structAny(t, `{"mesh": `+good+`, "pool": "nope"}`), []string{`pool: "nope" is not a pool`, `"sim"`}},
		{"unknown listener", structAny(t, `{"mesh": `+good+`, "listener": "l"}`), []string{`listener: "l" is not a listener`}},
		{"bad retry_after", structAny(t, `{"mesh": `+good+`, "retry_after": "soon"}`), []string{`retry_after: "soon" is not a duration`}},
		{"negative retry_after", structAny(t, `{"mesh": `+good+`, "retry_after": "-1s"}`), []string{`retry_after: "-1s" must be in (0, 1h]`}},
		{"mesh field path", structAny(t, `{"mesh": `+strings.Replace(good, `"ttft": "20ms"`, `"ttft": "-5ms"`, 1)+`}`),
			[]string{"mesh.classes[0].slo.ttft", "-5ms"}},
		{"mesh unknown field", structAny(t, `{"mesh": {"poolz": []}}`), []string{"mesh.poolz"}},
		{"several at once", structAny(t, `{"mesh": `+good+`, "pool": "x", "retry_after": "y"}`),
			[]string{`pool: "x"`, `retry_after: "y"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSettings(tc.any)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestMergeNeverFails: per-route configs are parsed without error even
// when broken; Merge falls back to the parent and counts the problem.
func TestMergeNeverFails(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, false)
	parent := h.cfg.(*FilterConfig)
	for _, tc := range []struct {
		name      string
		route     *anypb.Any
		wantClass string
		bad       bool
	}{
		{"class override", structAny(t, `{"class": "interactive"}`), "interactive", false},
		{"unknown class", structAny(t, `{"class": "gold"}`), "", true},
		{"unknown pool", structAny(t, `{"pool": "other"}`), "", true},
		{"unknown field", structAny(t, `{"klass": "interactive"}`), "", true},
		{"not a struct", &anypb.Any{TypeUrl: "type.googleapis.com/x.Y"}, "", true},
		{"nil", nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.counter(StatRouteConfigErrors)
			child, err := h.plugin.Parse(tc.route, nil)
			if err != nil || child == nil {
				t.Fatalf("per-route Parse = %v, %v; must never fail", child, err)
			}
			m, ok := h.plugin.Merge(parent, child).(*merged)
			if !ok {
				t.Fatalf("Merge returned %T", m)
			}
			got := ""
			if m.class != nil {
				got = m.class.Name
			}
			want(t, "class", got, tc.wantClass)
			want(t, "pool", m.pool.Name, "sim")
			grew := h.counter(StatRouteConfigErrors) - before
			want(t, "route config errors counted", grew == 1, tc.bad)
			// The merged config serves requests with the route's class.
			s := fakesdk.NewStream(h.plugin.Factory, m, fakesdk.Options{})
			s.DecodeHeaders(sseRequest(), true)
			s.Complete()
			wantClass := tc.wantClass
			if wantClass == "" {
				wantClass = "batch" // the default class
			}
			want(t, "request class", s.Metadata(MetadataNamespace)["class"], wantClass)
			noViolations(t, s)
		})
	}
}

// FuzzParseSettings: arbitrary JSON settings and arbitrary Any bytes
// never panic, and every error is a plain message.
func FuzzParseSettings(f *testing.F) {
	f.Add(`{"mesh": `+testMesh("fifo", relocationMesh)+`, "pool": "sim", "retry_after": "1s"}`, []byte(nil))
	f.Add(`{"mesh": {"pools": [{"name": "p", "protocol": "grpc", "endpoints": ["127.0.0.1:1"]}]}}`, []byte{0x0a, 0x00})
	f.Add(`{"mesh": {}, "listener": "x"}`, []byte{0x12, 0x03, 0x0a, 0x01, 0x78})
	f.Add(`{"mesh": [1,2]}`, []byte{0xff})
	f.Fuzz(func(t *testing.T, settings string, raw []byte) {
		var obj map[string]interface{}
		if json.Unmarshal([]byte(settings), &obj) == nil {
			if st, err := structpb.NewStruct(obj); err == nil {
				a, _ := anypb.New(st)
				fc, err := ParseSettings(a)
				if err == nil && (fc.Pool == nil || fc.Mesh == nil || fc.classifier == nil) {
					t.Fatalf("accepted config without pool, mesh or classifier: %s", settings)
				}
				_ = parseRoute(a)
			}
		}
		for _, url := range []string{structURL, typedStructURL, udpaTypedStructV1} {
			_, _ = ParseSettings(&anypb.Any{TypeUrl: url, Value: raw})
			_ = parseRoute(&anypb.Any{TypeUrl: url, Value: raw})
		}
	})
}
