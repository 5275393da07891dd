package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// MooncakeBlockTokens is the block size of a Mooncake trace's hash_ids.
const MooncakeBlockTokens = 512

// MooncakeRow is one request of a Mooncake trace (FAST 2025 artifact
// format): JSON lines with timestamp (ms), input_length, output_length and
// hash_ids. Equal hash ids at equal positions mean the same 512-token
// prefix block.
type MooncakeRow struct {
	Row
	// HashIDs are the ids of the prompt's 512-token blocks, the last one
	// possibly partial.
	HashIDs []uint64
}

// Format names a trace file format.
type Format string

// The trace formats Read* accept.
const (
	FormatAzure    Format = "azure"
	FormatMooncake Format = "mooncake"
)

// ParseFormat checks a --trace-format value; empty means detect.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case "", FormatAzure, FormatMooncake:
		return Format(s), nil
	}
	return "", fmt.Errorf("trace format %q: want %s or %s", s, FormatAzure, FormatMooncake)
}

// Detect tells the format from a file's first bytes: a JSON object is a
// Mooncake trace, anything else is read as an Azure CSV.
func Detect(head []byte) Format {
	head = bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\ufeff")), " \t\r\n")
	if len(head) > 0 && head[0] == '{' {
		return FormatMooncake
	}
	return FormatAzure
}

// ReadMooncakeFile reads a Mooncake trace file; errors name the file and line.
func ReadMooncakeFile(path string) ([]MooncakeRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	rows, err := ReadMooncake(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ReadMooncake parses a Mooncake trace: one JSON object per line (blank
// lines skipped). hash_ids must hold ceil(input_length/512) ids. Rows come
// back sorted by arrival (stable), relative to the earliest. Errors name the
// line and the field.
func ReadMooncake(r io.Reader) ([]MooncakeRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var rows []MooncakeRow
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\ufeff"))
		}
		if len(b) == 0 {
			continue
		}
		if len(rows) >= MaxRows {
			return nil, fmt.Errorf("line %d: more than %d rows", line, MaxRows)
		}
		var m mooncakeLine
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		switch {
		case m.Timestamp == nil:
			return nil, fmt.Errorf("line %d: timestamp: missing", line)
		case *m.Timestamp < 0 || *m.Timestamp > 1e12 || *m.Timestamp != *m.Timestamp:
			return nil, fmt.Errorf("line %d: timestamp: %v out of range [0, 1e12] ms", line, *m.Timestamp)
		case m.InputLength == nil:
			return nil, fmt.Errorf("line %d: input_length: missing", line)
		case *m.InputLength < 0 || *m.InputLength > MaxTokens:
			return nil, fmt.Errorf("line %d: input_length: %d out of range [0, %d]", line, *m.InputLength, MaxTokens)
		case m.OutputLength == nil:
			return nil, fmt.Errorf("line %d: output_length: missing", line)
		case *m.OutputLength < 0 || *m.OutputLength > MaxTokens:
			return nil, fmt.Errorf("line %d: output_length: %d out of range [0, %d]", line, *m.OutputLength, MaxTokens)
		}
		in := int(*m.InputLength)
		if want := (in + MooncakeBlockTokens - 1) / MooncakeBlockTokens; len(m.HashIDs) != want {
			return nil, fmt.Errorf("line %d: hash_ids: %d id(s), want %d for input_length %d (512-token blocks)", line, len(m.HashIDs), want, in)
		}
		rows = append(rows, MooncakeRow{
			Row: Row{
				At:           time.Duration(*m.Timestamp * float64(time.Millisecond)),
				PromptTokens: in,
				OutputTokens: int(*m.OutputLength),
			},
			HashIDs: m.HashIDs,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("line %d: empty trace, want JSON lines with timestamp, input_length, output_length, hash_ids", line+1)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].At < rows[j].At })
	first := rows[0].At
	for i := range rows {
		rows[i].At -= first
	}
	return rows, nil
}
