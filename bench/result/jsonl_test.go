package result

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadRecordsRoundTrip(t *testing.T) {
	recs := []Record{
		{Index: 0, Class: "a", PromptTokens: 3, MaxTokens: 2, OutputTokens: 2, SentNS: 5, FirstTokenNS: 9, DoneNS: 12, ChunkNS: []int64{9, 12}, Status: StatusOK, Engine: &EngineTimes{ArrivalNS: 1, FirstTokenNS: 3}},
		{Index: 1, Class: "b", Warmup: true, SentNS: 6, DoneNS: 7, Status: StatusRejected, Code: 429, Error: "HTTP 429"},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	buf.WriteString("\n")
	got, err := ReadRecords(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(recs, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
	if r := got[0]; func() bool { d, ok := r.TTFT(); return !ok || d != 4 }() {
		t.Errorf("TTFT of %+v", r)
	}
	if d, ok := got[0].TPOT(); !ok || d != 3 {
		t.Errorf("TPOT = %v %v, want 3ns", d, ok)
	}
}

func TestReadRecordsErrors(t *testing.T) {
	good := `{"index":0,"class":"a","status":"ok","sent_ns":1,"done_ns":2}` + "\n"
	for _, tc := range []struct{ in, want string }{
		{good + "{\n", "line 2:"},
		{good + `{"index":1}` + "\n", "line 2: not a request record"},
		{`{"class":"a","status":"ok","sent_ns":5,"done_ns":2}`, "line 1: done_ns 2 before sent_ns 5"},
	} {
		got, err := ReadRecords(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadRecords(%q) error %v, want %q", tc.in, err, tc.want)
		}
		if strings.HasPrefix(tc.in, good) && len(got) != 1 {
			t.Errorf("records before the bad line lost: %d", len(got))
		}
	}
}

func FuzzReadRecords(f *testing.F) {
	f.Add(`{"index":0,"class":"a","status":"ok","sent_ns":1,"first_token_ns":2,"done_ns":3,"chunk_ns":[2,3],"output_tokens":2}` + "\n")
	f.Add("\n\n{\"class\":\"x\",\"status\":\"error\"}\n[1,2]\n")
	f.Fuzz(func(t *testing.T, in string) {
		recs, _ := ReadRecords(strings.NewReader(in))
		for _, r := range recs {
			r.TTFT()
			r.TPOT()
			if r.E2E() < 0 || r.ScheduleLag() < 0 {
				t.Fatalf("negative durations from %+v", r)
			}
		}
	})
}
