package envoyhost

import (
	"strings"
	"testing"
)

// TestExpectOneOf checks S1|S2 expectations: they hold for exactly one of
// the streams, and say which when they do not.
func TestExpectOneOf(t *testing.T) {
	r := &report{Streams: map[string]streamReport{
		"a": {Events: []Event{{Seq: 1, Side: "filter", Kind: "local_reply", Code: 429}}},
		"b": {Events: []Event{{Seq: 2, Side: "upstream", Kind: "headers"}}},
		"c": {Events: []Event{{Seq: 3, Side: "filter", Kind: "local_reply", Code: 429}}},
	}}
	for _, c := range []struct {
		line, problem string
	}{
		{"expect a|b local_reply 429", ""},
		{"expect b|a local_reply none", ""},
		{"expect a|b no_upstream", ""},
		{"expect a|c local_reply 429", "holds for a and c"},
		{"expect a|c local_reply none", "holds for none"},
		{"expect a|x local_reply 429", "unknown stream x"},
		{"expect a| local_reply 429", "bad stream list"},
	} {
		es, err := parseExpects(c.line)
		if err != nil || len(es) != 1 {
			t.Fatalf("%s: %v", c.line, err)
		}
		got := es[0].check(r)
		if c.problem == "" && got != "" || c.problem != "" && !strings.HasPrefix(got, c.problem) {
			t.Errorf("%s: got %q, want %q", c.line, got, c.problem)
		}
	}
}
