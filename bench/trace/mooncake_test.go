package trace

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/kvblock"
)

func TestReadMooncake(t *testing.T) {
	in := `{"timestamp": 3000, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]}

{"timestamp": 1000, "input_length": 512, "output_length": 7, "hash_ids": [0]}
`
	rows, err := ReadMooncake(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("rows = %d, want 2", len(rows))
	}
	if rows[0].At != 0 || rows[1].At != 2*time.Second {
		t.Errorf("arrivals = %v, %v; want 0, 2s", rows[0].At, rows[1].At)
	}
	if rows[1].PromptTokens != 600 || rows[1].OutputTokens != 5 || len(rows[1].HashIDs) != 2 || rows[1].HashIDs[1] != 2 {
		t.Errorf("row = %+v", rows[1])
	}
}

func TestReadMooncakeErrorsNameLineAndField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"input_length": 1, "output_length": 1, "hash_ids": [1]}`, "line 1: timestamp: missing"},
		{"\n" + `{"timestamp": 0, "output_length": 1, "hash_ids": [1]}`, "line 2: input_length: missing"},
		{`{"timestamp": 0, "input_length": 1, "hash_ids": [1]}`, "line 1: output_length: missing"},
		{`{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, "line 1: timestamp: -1 out of range"},
		{`{"timestamp": 0, "input_length": 513, "output_length": 1, "hash_ids": [1]}`, "line 1: hash_ids: 1 id(s), want 2"},
		{`{"timestamp": 0, "input_length": -4, "output_length": 1, "hash_ids": []}`, "line 1: input_length: -4 out of range"},
		{`not json`, "line 1: invalid character"},
		{``, "empty trace"},
	} {
		_, err := ReadMooncake(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadMooncake(%q) error = %v, want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestDetectAndParseFormat(t *testing.T) {
	if f := Detect([]byte("\ufeff  {\"timestamp\":0}")); f != FormatMooncake {
		t.Errorf("Detect(json) = %q", f)
	}
	if f := Detect([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n")); f != FormatAzure {
		t.Errorf("Detect(csv) = %q", f)
	}
	if _, err := ParseFormat("parquet"); err == nil || !strings.Contains(err.Error(), "parquet") {
		t.Errorf("ParseFormat(parquet) error = %v", err)
	}
}

func TestReadMooncakeConversationTrace(t *testing.T) {
	path := filepath.Join("..", "traces", "mooncake-conversation.jsonl") // bench/traces/README.md
	rows, err := ReadMooncakeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12031 {
		t.Errorf("rows = %d, want 12031", len(rows))
	}
}

func FuzzReadMooncake(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]}`)
	f.Add(`{"timestamp": 1.5, "input_length": 0, "output_length": 0, "hash_ids": []}` + "\n\n")
	f.Add(`{"timestamp": 0, "input_length": 513}`)
	f.Add("\ufeff{}")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadMooncake(strings.NewReader(in))
		if err != nil {
			return
		}
		for i, r := range rows {
			if r.At < 0 || (i > 0 && r.At < rows[i-1].At) {
				t.Fatalf("row %d at %v out of order", i, r.At)
			}
			if len(r.HashIDs) != (r.PromptTokens+MooncakeBlockTokens-1)/MooncakeBlockTokens {
				t.Fatalf("row %d: %d hash ids for %d tokens", i, len(r.HashIDs), r.PromptTokens)
			}
		}
	})
}

func TestPromptBlocksMatchChainAndShareExactlyEqualPrefixes(t *testing.T) {
	const vocab = 32768
	a := []uint64{7, 8, 9}
	b := []uint64{7, 8, 10}
	for _, bs := range []int{16, 48, 500} {
		toks := PromptTokens(nil, MooncakeSegments(nil, a, 1300), vocab)
		if len(toks) != 1300 {
			t.Fatalf("tokens = %d, want 1300", len(toks))
		}
		want := kvblock.Chain(nil, 0, toks, bs)
		got, _ := PromptBlocks(nil, nil, MooncakeSegments(nil, a, 1300), bs, vocab)
		if len(got) != len(want) {
			t.Fatalf("block size %d: %d blocks, want %d", bs, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("block size %d: block %d differs from kvblock.Chain", bs, i)
			}
		}
	}
	ga, _ := PromptBlocks(nil, nil, MooncakeSegments(nil, a, 1536), 16, vocab)
	gb, _ := PromptBlocks(nil, nil, MooncakeSegments(nil, b, 1536), 16, vocab)
	for i := range ga {
		if shared := i < 1024/16; (ga[i] == gb[i]) != shared {
			t.Fatalf("block %d: equal=%v, want %v", i, ga[i] == gb[i], shared)
		}
	}
	moved, _ := PromptBlocks(nil, nil, MooncakeSegments(nil, []uint64{8, 7, 9}, 1536), 16, vocab)
	if moved[0] == ga[0] || moved[32] == ga[0] {
		t.Error("an id at another position gave the same block")
	}
}
