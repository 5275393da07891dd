// Package promtext reads sample values out of a Prometheus text exposition,
// as the tests that scrape a sim's, a gateway's or a scheduler's /metrics
// need to. It reads only what the tests ask for, a metric's samples by
// name; it is no general exposition parser. Only tests import it.
package promtext

import (
	"strconv"
	"strings"
)

// Sum adds up every sample of metric name (all its label sets) in text;
// found is false when no sample has that name. A sample line is the name,
// optionally a {label set}, the value and optionally a timestamp; a line
// of a longer name that starts with name (name_bucket, name_total) is not
// one of name's, and a value that does not parse is skipped.
func Sum(text, name string) (sum float64, found bool) {
	if name == "" {
		return 0, false
	}
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		v, ok := sample(line, name)
		if ok {
			sum += v
			found = true
		}
	}
	return sum, found
}

// sample is the value of line when it is a sample of name.
func sample(line, name string) (float64, bool) {
	rest, ok := strings.CutPrefix(line, name)
	if !ok || rest == "" {
		return 0, false
	}
	switch rest[0] {
	case '{':
		i := strings.LastIndexByte(rest, '}')
		if i < 0 {
			return 0, false
		}
		rest = rest[i+1:]
	case ' ', '\t':
	default:
		return 0, false // a longer name with this prefix
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
