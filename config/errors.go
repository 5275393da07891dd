package config

import (
	"fmt"
	"strings"
)

// FieldError is one problem with the config, located by its field path
// (for example classes[2].slo.ttft).
type FieldError struct {
	// Path is the dotted field path; empty for whole-document problems.
	Path string
	// Line is the 1-based line in the source, 0 when unknown.
	Line int
	// Msg says what is wrong, quoting the bad value.
	Msg string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// Errors is every problem found in one config, in document order. Loading
// reports them all together rather than stopping at the first.
type Errors []*FieldError

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// MaxErrors bounds the problems reported for one config; a file with more
// is reported with the first MaxErrors and a final note. It also bounds the
// work spent on hostile input (each unknown field computes a suggestion).
const MaxErrors = 100

// collector accumulates field errors during parsing and compiling.
type collector struct {
	errs Errors
	more int
}

func (c *collector) add(path string, line int, format string, args ...any) {
	if len(c.errs) >= MaxErrors {
		c.more++
		return
	}
	c.errs = append(c.errs, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// full reports whether further errors would be dropped.
func (c *collector) full() bool { return len(c.errs) >= MaxErrors }

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	if c.more > 0 {
		return append(c.errs[:len(c.errs):len(c.errs)], &FieldError{Msg: fmt.Sprintf("and more problems, not listed (%d errors at most)", MaxErrors)})
	}
	return c.errs
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func key(path, k string) string { return fmt.Sprintf("%s[%q]", path, k) }
