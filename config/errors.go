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

// collector accumulates field errors during parsing and compiling.
type collector struct {
	errs Errors
}

func (c *collector) add(path string, line int, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
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
