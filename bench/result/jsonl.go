package result

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxRecordLine bounds one JSONL line (a record with every chunk time of a
// very long stream still fits).
const MaxRecordLine = 64 << 20

// ReadRecords reads records written one JSON object per line (the --jsonl
// export). Blank lines are skipped; a malformed line is an error naming its
// number, and the records before it are returned with the error, so a file
// cut short by a crash still yields what it holds.
func ReadRecords(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxRecordLine)
	var out []Record
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return out, fmt.Errorf("line %d: %w", line, err)
		}
		if rec.Class == "" || rec.Status == "" {
			return out, fmt.Errorf("line %d: not a request record (class and status are required)", line)
		}
		if rec.DoneNS < rec.SentNS {
			return out, fmt.Errorf("line %d: done_ns %d before sent_ns %d", line, rec.DoneNS, rec.SentNS)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return out, fmt.Errorf("line %d: longer than %d bytes", line+1, MaxRecordLine)
		}
		return out, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}
