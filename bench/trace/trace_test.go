package trace

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRead(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\n" +
		"2023-11-16 18:15:46.1805900,10,1\n"
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{At: 0, PromptTokens: 10, OutputTokens: 1},
		{At: 500 * time.Millisecond, PromptTokens: 374, OutputTokens: 44},
		{At: 4814579000 * time.Nanosecond, PromptTokens: 396, OutputTokens: 109},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestReadSecondsAndColumnOrder(t *testing.T) {
	got, err := Read(strings.NewReader("generatedtokens,extra,timestamp,contexttokens\n5,x,1.5,7\n6,y,2,8\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{{0, 7, 5}, {500 * time.Millisecond, 8, 6}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "line 1: empty trace"},
		{"TIMESTAMP,ContextTokens\n1,2\n", "lacks column(s) GeneratedTokens"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n", "no rows"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,x,3\n", `line 3: ContextTokens: "x" is not a non-negative integer`},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,-3\n", `line 2: GeneratedTokens: "-3"`},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,2,3\n", `line 2: TIMESTAMP "yesterday" is neither`},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2\n", "line 2: 2 field(s), want at least 3"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,99999999999\n", "exceeds the limit"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2023-11-16 18:15:46,2,3\n", "line 3: TIMESTAMP \"2023-11-16 18:15:46\" is a date-time but earlier rows are seconds"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,\"2,3\n", "line 2"},
	} {
		_, err := Read(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Read(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestReadFileAzure(t *testing.T) {
	const p = "../traces/azure-2023-conv.csv" // bench/traces/README.md
	small, err := ReadFile("testdata/small.csv")
	if err != nil || len(small) == 0 {
		t.Fatalf("ReadFile(testdata/small.csv) = %d rows, %v", len(small), err)
	}
	rows, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 19366 {
		t.Errorf("rows = %d, want 19366", len(rows))
	}
	if last := rows[len(rows)-1].At; last < 50*time.Minute || last > 70*time.Minute {
		t.Errorf("trace spans %v, want about an hour", last)
	}
	if _, err := ReadFile("testdata/does-not-exist.csv"); err == nil || !strings.Contains(err.Error(), "does-not-exist.csv") {
		t.Errorf("missing file error = %v", err)
	}
}

func FuzzRead(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n1.5,3,4\n0,1,1\n")
	f.Add("timestamp,contexttokens,generatedtokens\n\n\n1e308,1,1\n")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n\"1,2\",3,4\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := Read(strings.NewReader(in))
		if err != nil {
			return
		}
		for i, r := range rows {
			if r.At < 0 || r.PromptTokens < 0 || r.OutputTokens < 0 || (i > 0 && r.At < rows[i-1].At) {
				t.Fatalf("bad row %d: %+v", i, r)
			}
		}
	})
}
