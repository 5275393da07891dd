package exchange

import (
	"bytes"
	"time"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// chunkTemplate is the SSE fast path. An engine streams one request's
// chunks in one shape: the same id, created, model, index and nulls, and
// only the token's text changes between events. After a full scan of an
// event whose only effect was one token-bearing choice with one non-empty
// text field, the bytes before and after that text's contents are kept.
// A later event that is those same bytes around a different non-empty
// string scans, in the general scanner, exactly like the kept event (the
// scanner reads left to right and its state at the string depends only on
// the bytes before it; after the string, only on the bytes after it), so
// its result is known without scanning: one token-bearing chunk, and the
// new text. Anything else (a different id, usage, a finish reason, an
// error, two choices) fails the byte comparison and takes the general
// scanner, which may learn a new template.
type chunkTemplate struct {
	prefix []byte // up to and including the text's opening quote
	suffix []byte // from the text's closing quote to the end
	// linePrefix and lineSuffix are the same framed as a whole event,
	// "data: " + prefix and suffix + "\n\n", so that an event that arrives
	// whole is recognised in the chunk itself (see Observer.fastEvent).
	linePrefix []byte
	lineSuffix []byte
	// kept: the text is choices[0]'s text or content (kept as output).
	kept  bool
	valid bool
	// hits counts events the template answered (tests check the fast path
	// ran).
	hits int
}

func (c *chunkTemplate) reset() {
	c.prefix = c.prefix[:0]
	c.suffix = c.suffix[:0]
	c.linePrefix = c.linePrefix[:0]
	c.lineSuffix = c.lineSuffix[:0]
	c.kept = false
	c.valid = false
	c.hits = 0
}

// learn keeps data's shape when its scan r qualifies (see chunkTemplate).
// A non-qualifying event leaves the template as it was: the template
// describes a shape, not the previous event.
func (c *chunkTemplate) learn(data []byte, r *chunkResult) {
	if r.tokens != 1 || r.texts != 1 || r.effects || r.textEnd <= r.textStart {
		return
	}
	c.prefix = append(c.prefix[:0], data[:r.textStart]...)
	c.suffix = append(c.suffix[:0], data[r.textEnd:]...)
	c.linePrefix = c.linePrefix[:0]
	c.lineSuffix = c.lineSuffix[:0]
	// An event's data joins its data lines with LF, so a shape learned
	// from a multi-line event can hold a line break; such a shape is only
	// matched after reassembly, never as one line of a chunk.
	if lineEnd(c.prefix) < 0 && lineEnd(c.suffix) < 0 {
		c.linePrefix = append(append(c.linePrefix, "data: "...), c.prefix...)
		c.lineSuffix = append(append(c.lineSuffix, c.suffix...), '\n', '\n')
	}
	c.kept = r.textKept
	c.valid = true
}

// match returns the text contents when data is the template's prefix, a
// non-empty JSON string body, and its suffix.
func (c *chunkTemplate) match(data []byte) (raw []byte, ok bool) {
	if !c.valid || len(data) <= len(c.prefix)+len(c.suffix) ||
		!bytes.HasPrefix(data, c.prefix) || !bytes.HasSuffix(data, c.suffix) {
		return nil, false
	}
	rest := data[len(c.prefix):]
	end := jsonscan.ClosingQuote(rest)
	// The string must end exactly where the suffix (which starts with the
	// closing quote) begins; a quote earlier means a different shape.
	if end <= 0 || end != len(rest)-len(c.suffix) {
		return nil, false
	}
	c.hits++
	return rest[:end], true
}

// fastEvent answers a whole event at the start of p, a line start with no
// event in progress, from the template: "data: " + prefix + text + suffix
// + a blank line, with the text on that one line. It returns the bytes it
// consumed, 0 when p does not start with such an event (the general parser
// then takes it). The result is the general parser's: the line is a data
// line whose value (after the one optional space) is the template's shape,
// which is already trimmed, and the blank line dispatches it.
func (o *Observer) fastEvent(t time.Time, p []byte) int {
	c := &o.tmpl
	if len(c.linePrefix) == 0 || !bytes.HasPrefix(p, c.linePrefix) {
		return 0
	}
	rest := p[len(c.linePrefix):]
	end, escaped := lineText(rest)
	if end <= 0 || !bytes.HasPrefix(rest[end:], c.lineSuffix) {
		return 0
	}
	n := len(c.linePrefix) + end + len(c.lineSuffix)
	if n-2 > o.opts.MaxEventBytes {
		return 0 // the general parser reports it as too large
	}
	c.hits++
	o.obs.Chunks++
	if c.kept && o.opts.KeepOutput {
		o.keepText(true, rest[:end], escaped)
	}
	o.tokenChunk(t, 1)
	return n
}

// lineText is jsonscan.ClosingQuote for a string that must also stay on its SSE
// line: -1 when a CR or LF comes before the closing quote. Tokens are a
// few bytes, so a byte loop that checks everything in one pass beats
// several vectorised scans; past 64 bytes the scans take over.
func lineText(b []byte) (end int, escaped bool) {
	for i := 0; i < len(b) && i < 64; i++ {
		switch b[i] {
		case '"':
			return i, escaped
		case '\\':
			escaped = true
			// The escaped byte is not a closing quote, but a raw CR or LF
			// still ends the line.
			if i+1 < len(b) && (b[i+1] == '\r' || b[i+1] == '\n') {
				return -1, false
			}
			i++
		case '\r', '\n':
			return -1, false
		}
	}
	end = jsonscan.ClosingQuote(b)
	if end < 0 || lineEnd(b[:end]) >= 0 {
		return -1, false
	}
	return end, bytes.IndexByte(b[:end], '\\') >= 0
}
