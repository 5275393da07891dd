package settings_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter/settings"
)

// TestRoundTrip: what the encoders write, the decoders read back as it was.
func TestRoundTrip(t *testing.T) {
	f := settings.Filter{Mesh: json.RawMessage(`{"classes":[{"name":"b","priority":10}],"pools":[{"name":"p"}]}`),
		Pool: "p", Listener: "main", RetryAfter: "2s"}
	a, err := f.Any()
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic bytes: control hashes its snapshots.
	b, _ := f.Any()
	a2, _ := settings.Filter{Mesh: json.RawMessage(`{"pools":[{"name":"p"}],"classes":[{"priority":10,"name":"b"}]}`), Pool: "p", Listener: "main", RetryAfter: "2s"}.Any()
	if string(a2.GetValue()) != string(a.GetValue()) || string(b.GetValue()) != string(a.GetValue()) {
		t.Error("the same settings encode to different bytes")
	}
	got, err := settings.DecodeFilter(a)
	if err != nil {
		t.Fatal(err)
	}
	var wantMesh, gotMesh any
	_ = json.Unmarshal(f.Mesh, &wantMesh)
	_ = json.Unmarshal(got.Mesh, &gotMesh)
	if diff := cmp.Diff(wantMesh, gotMesh); diff != "" {
		t.Errorf("mesh (-want +got):\n%s", diff)
	}
	got.Mesh, f.Mesh = nil, nil
	if diff := cmp.Diff(f, got); diff != "" {
		t.Errorf("filter settings (-want +got):\n%s", diff)
	}
	r := settings.Route{Pool: "p.arm-a", Class: "batch"}
	ra, err := r.Any()
	if err != nil {
		t.Fatal(err)
	}
	gr, err := settings.DecodeRoute(ra)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, gr); diff != "" {
		t.Errorf("route settings (-want +got):\n%s", diff)
	}
}

func structAny(t *testing.T, js string) *anypb.Any {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(js), &obj); err != nil {
		t.Fatal(err)
	}
	st, err := structpb.NewStruct(obj)
	if err != nil {
		t.Fatal(err)
	}
	a, err := anypb.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestDecodeErrorsNameFields: every problem at once, each naming its field.
func TestDecodeErrorsNameFields(t *testing.T) {
	_, err := settings.DecodeFilter(structAny(t, `{"mesh": {}, "pool": 3, "retry_afterr": "1s", "listener": ["a"]}`))
	for _, want := range []string{"retry_afterr: unknown field (known: mesh, pool, listener, retry_after)", "pool: must be a string, got a number", "listener: must be a string, got a list"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	_, err = settings.DecodeRoute(structAny(t, `{"pool": "p", "mesh": {}}`))
	if err == nil || !strings.Contains(err.Error(), "mesh: unknown field (known: pool, class)") {
		t.Errorf("route with a mesh: %v", err)
	}
	if _, err := settings.DecodeFilter(nil); err == nil || !strings.Contains(err.Error(), "plugin_config: missing") {
		t.Errorf("nil: %v", err)
	}
	if _, err := settings.DecodeFilter(&anypb.Any{TypeUrl: "type.googleapis.com/x.Y"}); err == nil || !strings.Contains(err.Error(), `type "type.googleapis.com/x.Y" not supported`) {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := settings.DecodeFilter(&anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.Struct", Value: make([]byte, settings.MaxBytes+1)}); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("oversized: %v", err)
	}
}

// The plugin config carries a whole mesh config file: the same limit.
func TestMaxBytesIsTheMeshFileLimit(t *testing.T) {
	if settings.MaxBytes != config.MaxFileSize {
		t.Errorf("MaxBytes %d, config.MaxFileSize %d", settings.MaxBytes, config.MaxFileSize)
	}
}

// FuzzDecode: the decoders never panic, and what they accept encodes and
// decodes to the same settings.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"mesh": {"pools": []}, "pool": "p"}`, `{"pool": "p", "class": "c"}`, `{}`} {
		var obj map[string]any
		_ = json.Unmarshal([]byte(s), &obj)
		st, _ := structpb.NewStruct(obj)
		a, _ := anypb.New(st)
		f.Add(a.GetTypeUrl(), a.GetValue())
	}
	f.Fuzz(func(t *testing.T, url string, value []byte) {
		a := &anypb.Any{TypeUrl: url, Value: value}
		if fs, err := settings.DecodeFilter(a); err == nil {
			b, err := fs.Any()
			if err != nil {
				if len(fs.Mesh) > 0 && !json.Valid(fs.Mesh) {
					return
				}
				t.Fatalf("decoded %+v does not encode: %v", fs, err)
			}
			again, err := settings.DecodeFilter(b)
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			if again.Pool != fs.Pool || again.Listener != fs.Listener || again.RetryAfter != fs.RetryAfter {
				t.Fatalf("round trip %+v → %+v", fs, again)
			}
		}
		if rs, err := settings.DecodeRoute(a); err == nil {
			b, err := rs.Any()
			if err != nil {
				t.Fatal(err)
			}
			again, err := settings.DecodeRoute(b)
			if err != nil || again != rs {
				t.Fatalf("route round trip %+v → %+v, %v", rs, again, err)
			}
		}
	})
}
