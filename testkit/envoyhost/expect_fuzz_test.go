package envoyhost

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseExpects: any scenario text parses or fails with an error, never
// a panic, and every parsed expectation can be checked against an empty
// report.
func FuzzParseExpects(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("expect s1 upstream_body \"\\x0\"")
	f.Add("expect before a b c")
	f.Add("config <<END\nexpect x\n")
	f.Add("expect a||b local_reply 429\nexpect |a no_upstream")
	f.Fuzz(func(t *testing.T, src string) {
		exps, err := parseExpects(src)
		if err != nil {
			return
		}
		r := &report{Streams: map[string]streamReport{"s1": {}}}
		for _, e := range exps {
			_ = e.check(r)
		}
		_ = baseline(r, exps)
	})
}
