package simulate

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/llmesh/llmesh/bench/result"
)

// RecordWriter writes the records of runs that go on in parallel as JSON
// lines, one whole line at a time (Options.Records).
type RecordWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
	buf []byte
}

// NewRecordWriter writes to w; the caller buffers and closes it.
func NewRecordWriter(w io.Writer) *RecordWriter { return &RecordWriter{w: w} }

// write writes r as one line; the first error stops every later write
// and is returned again.
func (rw *RecordWriter) write(r *result.Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.err != nil {
		return rw.err
	}
	rw.buf = append(append(rw.buf[:0], b...), '\n')
	_, rw.err = rw.w.Write(rw.buf)
	return rw.err
}
