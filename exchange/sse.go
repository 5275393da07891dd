package exchange

import (
	"bytes"
	"fmt"
	"time"
)

// sseState is the incremental parser of text/event-stream: lines end with
// CRLF, LF or CR; "data:" lines of one event are joined with "\n"; a blank
// line dispatches the event; ":" starts a comment. A line split across
// chunks is carried in line; data holds the event's data so far. Each is
// bounded by Options.MaxEventBytes, checked the same way wherever the chunk
// boundaries fall, so the verdict does not depend on how bytes arrive.
type sseState struct {
	line []byte
	data []byte
	// event is the current event's "event:" field (only "error" matters).
	eventError bool
	hasData    bool
	// lastCR: the previous chunk ended in CR, so a leading LF is its pair.
	lastCR bool
}

func (s *sseState) reset() {
	s.line = s.line[:0]
	s.data = s.data[:0]
	s.eventError = false
	s.hasData = false
	s.lastCR = false
}

var doneMarker = []byte("[DONE]")

func (o *Observer) observeSSE(t time.Time, p []byte) error {
	s := &o.sse
	var firstErr error
	if s.lastCR {
		s.lastCR = false
		if p[0] == '\n' {
			p = p[1:]
		}
	}
	for len(p) > 0 {
		if o.tmpl.valid && !o.opts.GeneralScan && len(s.line) == 0 && !s.hasData && !s.eventError {
			if n := o.fastEvent(t, p); n > 0 {
				p = p[n:]
				continue
			}
		}
		i := lineEnd(p)
		if i < 0 {
			if len(s.line)+len(p) > o.opts.MaxEventBytes {
				return o.tooLarge()
			}
			s.line = append(s.line, p...)
			return firstErr
		}
		var line []byte
		if len(s.line) > 0 {
			if len(s.line)+i > o.opts.MaxEventBytes {
				return o.tooLarge()
			}
			s.line = append(s.line, p[:i]...)
			line = s.line
		} else {
			if i > o.opts.MaxEventBytes {
				return o.tooLarge()
			}
			line = p[:i]
		}
		if p[i] == '\r' {
			if i+1 < len(p) {
				if p[i+1] == '\n' {
					i++
				}
			} else {
				s.lastCR = true
			}
		}
		p = p[i+1:]
		if err := o.sseLine(t, line); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if o.stopped {
				return firstErr
			}
		}
		s.line = s.line[:0]
	}
	return firstErr
}

func (o *Observer) tooLarge() error {
	return o.fail(ErrorEventTooLarge, fmt.Errorf("%w: an event exceeds max_event_bytes %d", ErrEventTooLarge, o.opts.MaxEventBytes))
}

// sseLine handles one complete line (without its terminator).
func (o *Observer) sseLine(t time.Time, line []byte) error {
	s := &o.sse
	if len(line) == 0 {
		return o.sseDispatch(t)
	}
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		sep := 0
		if s.hasData {
			sep = 1
		}
		if len(s.data)+sep+len(value) > o.opts.MaxEventBytes {
			return o.tooLarge()
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	case "event":
		s.eventError = string(value) == "error"
	}
	return nil
}

// sseDispatch handles the event completed by a blank line at t.
func (o *Observer) sseDispatch(t time.Time) error {
	s := &o.sse
	defer func() {
		s.data = s.data[:0]
		s.hasData = false
		s.eventError = false
	}()
	if !s.hasData {
		return nil
	}
	data := bytes.TrimSpace(s.data)
	if len(data) == 0 {
		// An empty data line is a keep-alive, not an event.
		return nil
	}
	o.obs.Chunks++
	if bytes.Equal(data, doneMarker) {
		o.obs.Complete = true
		return nil
	}
	if s.eventError && (len(data) == 0 || data[0] != '{') {
		o.SetError(ErrorStreamEvent, "error event: "+string(truncate(data, 512)))
		return nil
	}
	if !s.eventError && !o.opts.GeneralScan {
		if raw, ok := o.tmpl.match(data); ok {
			if o.tmpl.kept && o.opts.KeepOutput {
				o.keepText(true, raw, bytes.IndexByte(raw, '\\') >= 0)
			}
			o.tokenChunk(t, 1)
			return nil
		}
	}
	var r chunkResult
	if err := o.scanChunk(data, &r); err != nil {
		return err
	}
	if s.eventError {
		if o.obs.ErrorKind == ErrorNone {
			o.SetError(ErrorStreamEvent, "error event: "+string(truncate(data, 512)))
		}
	} else {
		o.tmpl.learn(data, &r)
	}
	if r.tokens > 0 {
		o.tokenChunk(t, r.tokens)
	}
	return nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// lineEnd is the index of the first CR or LF in p, or -1. LF is the common
// terminator, so it is found first with a fast scan and CR only looked for
// before it.
func lineEnd(p []byte) int {
	n := bytes.IndexByte(p, '\n')
	head := p
	if n >= 0 {
		head = p[:n]
	}
	if r := bytes.IndexByte(head, '\r'); r >= 0 {
		return r
	}
	return n
}
