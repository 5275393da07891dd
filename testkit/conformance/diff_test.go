package conformance

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDiffViews: the comparison finds a change in any one field, and a
// Record one host lacks is one difference.
func TestDiffViews(t *testing.T) {
	base := func() view {
		return view{
			Client:  client{Status: 200, ContentType: "text/event-stream", Body: "data: x"},
			Records: []rec{{Class: "batch", OutputTokens: 3, HasTTFT: true}, {Class: "interactive", Queued: true}},
			Engine:  []string{`{"prompt":"p"}`},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*view)
		want   []string
	}{
		{"equal", func(*view) {}, nil},
		{"client status", func(v *view) { v.Client.Status = 503 }, []string{"Client.Status"}},
		{"client reset", func(v *view) { v.Client.Reset = true }, []string{"Client.Reset"}},
		{"record field", func(v *view) { v.Records[1].Queued = false }, []string{"Records[1].Queued"}},
		{"record missing", func(v *view) { v.Records = v.Records[:1] }, []string{"Records.len", "Records[1]"}},
		{"engine body", func(v *view) { v.Engine[0] = `{"prompt":"q"}` }, []string{"Engine[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base()
			tc.change(&b)
			var got []string
			for path := range diffViews(base(), b) {
				got = append(got, path)
			}
			sort.Strings(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("differing paths (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNormalize: per-request ids and engine times are dropped, the
// content is kept.
func TestNormalize(t *testing.T) {
	a := normalize(response{Status: 200, ContentType: "text/event-stream; charset=utf-8",
		Body: []byte("data: {\"id\":\"cmpl-1\",\"created\":1,\"choices\":[{\"text\":\" a\"}]}\n\ndata: [DONE]\n\n")})
	b := normalize(response{Status: 200, ContentType: "text/event-stream",
		Body: []byte("data: {\"id\":\"cmpl-2\",\"created\":2,\"choices\":[{\"text\":\" a\"}],\"llmesh_engine\":{\"arrival\":3}}\n\ndata: [DONE]\n\n")})
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("(-a +b):\n%s", diff)
	}
	c := normalize(response{Status: 200, ContentType: "text/event-stream",
		Body: []byte("data: {\"id\":\"cmpl-1\",\"created\":1,\"choices\":[{\"text\":\" b\"}]}\n\ndata: [DONE]\n\n")})
	if a.Body == c.Body {
		t.Errorf("different text normalized equal: %q", a.Body)
	}
}

// TestOnlyFraming: only differences in how tokens were split into messages
// earn a second run.
func TestOnlyFraming(t *testing.T) {
	for _, tc := range []struct {
		diffs map[string]string
		want  bool
	}{
		{map[string]string{"Client.Body": "", "Records[0].TokenChunks": "", "Records[1].DecodeSteps": ""}, true},
		{map[string]string{"Client.Body": "", "Records[0].OutputTokens": ""}, false},
		{map[string]string{"Client.Status": ""}, false},
		{map[string]string{"Records[0]": ""}, false},
	} {
		if got := onlyFraming(tc.diffs); got != tc.want {
			t.Errorf("onlyFraming(%v) = %v, want %v", keys(tc.diffs), got, tc.want)
		}
	}
	for _, tc := range []struct {
		diffs map[string]string
		want  bool
	}{
		{map[string]string{"Records[1].Queued": ""}, true},
		{map[string]string{"Records[0].Queued": "", "Records[0].TokenChunks": ""}, true},
		{map[string]string{"Records[0].Queued": "", "Records[0].Class": ""}, false},
		{map[string]string{"Client.Status": ""}, false},
	} {
		if got := onlyTiming(tc.diffs); got != tc.want {
			t.Errorf("onlyTiming(%v) = %v, want %v", keys(tc.diffs), got, tc.want)
		}
	}
}
