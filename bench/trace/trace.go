// Package trace reads request traces in the Azure LLM inference trace format
// (TIMESTAMP,ContextTokens,GeneratedTokens), the public format of the
// AzurePublicDataset traces used by Splitwise (ISCA 2024) and many serving
// papers. Replay sends synthetic prompts of the given token counts.
package trace

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Row is one request of a trace.
type Row struct {
	// At is the arrival time relative to the trace's first request.
	At time.Duration
	// PromptTokens is the ContextTokens column.
	PromptTokens int
	// OutputTokens is the GeneratedTokens column.
	OutputTokens int
}

// Limits bound what a trace may contain so a corrupt file cannot make the
// harness allocate without bound.
const (
	// MaxTokens bounds ContextTokens and GeneratedTokens.
	MaxTokens = 10_000_000
	// MaxRows bounds the number of rows in one trace.
	MaxRows = 10_000_000
)

// timestampLayouts are the accepted TIMESTAMP forms besides plain seconds.
var timestampLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04:05",
	time.RFC3339Nano,
}

// ReadFile reads a trace file; errors name the file and line.
func ReadFile(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	rows, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// Read parses a trace. The first line is a header naming the columns
// TIMESTAMP, ContextTokens and GeneratedTokens in any order (case does not
// matter, other columns are ignored). TIMESTAMP is either a date-time
// ("2023-11-16 18:15:46.6805900", RFC 3339) or a number of seconds. Rows come
// back sorted by arrival, relative to the earliest one. Errors name the line.
func Read(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("line 1: empty trace, want header TIMESTAMP,ContextTokens,GeneratedTokens")
	}
	if err != nil {
		return nil, csvErr(err)
	}
	ts, ctx, gen := -1, -1, -1
	for i, h := range header {
		switch strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))) {
		case "timestamp":
			ts = i
		case "contexttokens":
			ctx = i
		case "generatedtokens":
			gen = i
		}
	}
	var missing []string
	for _, c := range []struct {
		idx  int
		name string
	}{{ts, "TIMESTAMP"}, {ctx, "ContextTokens"}, {gen, "GeneratedTokens"}} {
		if c.idx < 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("line 1: header %q lacks column(s) %s", strings.Join(header, ","), strings.Join(missing, ", "))
	}
	need := max(ts, ctx, gen) + 1

	var (
		rows  []Row
		abs   []time.Time
		secs  []float64
		kind  int // 0 unknown, 1 date-time, 2 seconds
		empty = true
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvErr(err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if len(rec) < need {
			return nil, fmt.Errorf("line %d: %d field(s), want at least %d", line, len(rec), need)
		}
		if len(rows) >= MaxRows {
			return nil, fmt.Errorf("line %d: more than %d rows", line, MaxRows)
		}
		empty = false
		p, err := tokens(rec[ctx])
		if err != nil {
			return nil, fmt.Errorf("line %d: ContextTokens: %w", line, err)
		}
		o, err := tokens(rec[gen])
		if err != nil {
			return nil, fmt.Errorf("line %d: GeneratedTokens: %w", line, err)
		}
		raw := strings.TrimSpace(rec[ts])
		if s, err := strconv.ParseFloat(raw, 64); err == nil {
			if kind == 1 {
				return nil, fmt.Errorf("line %d: TIMESTAMP %q is seconds but earlier rows are date-times", line, raw)
			}
			if s < 0 || s > 1e9 || s != s {
				return nil, fmt.Errorf("line %d: TIMESTAMP %q out of range [0, 1e9] seconds", line, raw)
			}
			kind = 2
			secs = append(secs, s)
		} else {
			t, ok := parseTime(raw)
			if !ok {
				return nil, fmt.Errorf("line %d: TIMESTAMP %q is neither seconds nor a date-time like 2023-11-16 18:15:46.68", line, raw)
			}
			if kind == 2 {
				return nil, fmt.Errorf("line %d: TIMESTAMP %q is a date-time but earlier rows are seconds", line, raw)
			}
			kind = 1
			abs = append(abs, t)
		}
		rows = append(rows, Row{PromptTokens: p, OutputTokens: o})
	}
	if empty {
		return nil, errors.New("trace has a header but no rows")
	}
	if kind == 1 {
		first := abs[0]
		for _, t := range abs {
			if t.Before(first) {
				first = t
			}
		}
		for i, t := range abs {
			d := t.Sub(first)
			if d > 1e9*time.Second || d < 0 {
				return nil, fmt.Errorf("row %d: TIMESTAMP spans more than 1e9 seconds", i+1)
			}
			rows[i].At = d
		}
	} else {
		first := secs[0]
		for _, s := range secs {
			first = min(first, s)
		}
		for i, s := range secs {
			rows[i].At = time.Duration((s - first) * float64(time.Second))
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].At < rows[j].At })
	return rows, nil
}

func parseTime(s string) (time.Time, bool) {
	for _, l := range timestampLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func tokens(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a non-negative integer", s)
	}
	if n > MaxTokens {
		return 0, fmt.Errorf("%d exceeds the limit of %d tokens", n, MaxTokens)
	}
	return n, nil
}

func csvErr(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("line %d: %w", pe.Line, pe.Err)
	}
	return err
}
