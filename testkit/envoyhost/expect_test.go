package envoyhost

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// An expect line of a scenario, checked against the host's report:
//
//	expect S upstream_body "…"          what went upstream, concatenated
//	(S may be S1|S2…: the expectation holds for exactly one of them)
//	expect S downstream_body "…"        what the client got, concatenated
//	expect S downstream_contains "…"
//	expect S upstream_header NAME V     V "-" means absent, "*" present
//	expect S downstream_header NAME V
//	expect S upstream_trailer NAME V
//	expect S downstream_trailer NAME V
//	expect S local_reply CODE           a local reply with that code ("none": no reply)
//	expect S no_upstream                nothing reached the upstream
//	expect S reset                      the client saw a stream reset
//	expect S ended
//	expect S metadata NS.KEY VALUE      dynamic metadata (JSON literal or string, * any)
//	expect S destroy_state "…"          the decoder and encoder states at OnDestroy
//	expect stat NAME N                  Envoy counter
//	expect gauge NAME N
//	expect capi STATUS N                how often the host answered STATUS
//	expect before S1 POINT S2 POINT     POINT: upstream_headers upstream_end
//	                                    downstream_headers downstream_end local_reply
//	expect log "substring"
//	expect allow leak|config_errors|error_logs|panics
type expect struct {
	line int
	text string
	op   string
	args []string
}

func tokens(line string) ([]string, error) {
	var out []string
	i := 0
	for i < len(line) {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i >= len(line) || line[i] == '#' {
			break
		}
		if line[i] != '"' {
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' {
				j++
			}
			out = append(out, line[i:j])
			i = j
			continue
		}
		var b strings.Builder
		i++
		for {
			if i >= len(line) {
				return nil, fmt.Errorf("unterminated string")
			}
			c := line[i]
			i++
			if c == '"' {
				break
			}
			if c != '\\' {
				b.WriteByte(c)
				continue
			}
			if i >= len(line) {
				return nil, fmt.Errorf("unterminated string")
			}
			e := line[i]
			i++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '0':
				b.WriteByte(0)
			case 'x':
				if i+2 > len(line) {
					return nil, fmt.Errorf("bad \\x escape")
				}
				v, err := strconv.ParseUint(line[i:i+2], 16, 8)
				if err != nil {
					return nil, fmt.Errorf("bad \\x escape: %v", err)
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(e)
			}
		}
		out = append(out, b.String())
	}
	return out, nil
}

var expectArity = map[string]int{
	"upstream_body": 1, "downstream_body": 1, "downstream_contains": 1,
	"upstream_header": 2, "downstream_header": 2, "upstream_trailer": 2, "downstream_trailer": 2,
	"local_reply": 1, "no_upstream": 0, "reset": 0, "ended": 0, "metadata": 2, "destroy_state": 1,
}

// parseExpects reads the expect lines of a scenario (the host skips them).
// Blocks (<<END … END) are skipped as the host reads them.
func parseExpects(src string) ([]expect, error) {
	var out []expect
	lines := strings.Split(src, "\n")
	for n := 0; n < len(lines); n++ {
		line := lines[n]
		t, err := tokens(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n+1, err)
		}
		if len(t) > 0 && strings.HasPrefix(t[len(t)-1], "<<") {
			marker := strings.TrimPrefix(t[len(t)-1], "<<")
			for n++; n < len(lines) && lines[n] != marker; n++ {
			}
			continue
		}
		if len(t) == 0 || t[0] != "expect" {
			continue
		}
		e := expect{line: n + 1, text: strings.TrimSpace(line)}
		if len(t) < 2 {
			return nil, fmt.Errorf("line %d: expect what?", n+1)
		}
		switch t[1] {
		case "stat", "gauge", "capi":
			if len(t) != 4 {
				return nil, fmt.Errorf("line %d: expect %s NAME N", n+1, t[1])
			}
			if _, err := strconv.ParseInt(t[3], 10, 64); err != nil {
				return nil, fmt.Errorf("line %d: %q is not a count", n+1, t[3])
			}
			e.op, e.args = t[1], t[2:]
		case "before":
			if len(t) != 6 {
				return nil, fmt.Errorf("line %d: expect before S1 POINT S2 POINT", n+1)
			}
			e.op, e.args = "before", t[2:]
		case "log", "allow":
			if len(t) != 3 {
				return nil, fmt.Errorf("line %d: expect %s ARG", n+1, t[1])
			}
			e.op, e.args = t[1], t[2:]
		default:
			if len(t) < 3 {
				return nil, fmt.Errorf("line %d: expect S WHAT …", n+1)
			}
			want, ok := expectArity[t[2]]
			if !ok {
				return nil, fmt.Errorf("line %d: unknown expectation %q", n+1, t[2])
			}
			if len(t)-3 != want {
				return nil, fmt.Errorf("line %d: %s takes %d arguments", n+1, t[2], want)
			}
			e.op, e.args = t[2], append([]string{t[1]}, t[3:]...)
		}
		out = append(out, e)
	}
	return out, nil
}

func (s streamReport) body(side string) string {
	var b strings.Builder
	for _, e := range s.Events {
		if e.Side == side && e.Kind == "data" {
			b.WriteString(bytesOf(e.Data))
		}
	}
	return b.String()
}

func (s streamReport) header(side, kind, name string) (string, bool) {
	for _, e := range s.Events {
		if e.Side == side && e.Kind == kind {
			for _, kv := range e.Headers {
				if kv[0] == name {
					return kv[1], true
				}
			}
			return "", false
		}
	}
	return "", false
}

// point is the sequence number of a moment of a stream, 0 when it never
// happened.
func (s streamReport) point(p string) (uint64, error) {
	for _, e := range s.Events {
		switch {
		case p == "upstream_headers" && e.Side == "upstream" && e.Kind == "headers",
			p == "upstream_end" && e.Side == "upstream" && e.End,
			p == "downstream_headers" && e.Side == "downstream" && e.Kind == "headers",
			p == "downstream_end" && e.Side == "downstream" && e.End,
			p == "local_reply" && e.Kind == "local_reply":
			return e.Seq, nil
		}
	}
	switch p {
	case "upstream_headers", "upstream_end", "downstream_headers", "downstream_end", "local_reply":
		return 0, nil
	}
	return 0, fmt.Errorf("unknown point %q", p)
}

// checkOne holds when the expectation holds for exactly one of the named
// streams: for streams racing for one outcome (which of two queued
// requests the scheduler refuses), the scenario asserts the outcome, not
// the winner.
func (e expect) checkOne(r *report, names []string) string {
	var held []string
	var why []string
	for _, n := range names {
		if n == "" || strings.Contains(n, "|") {
			return "bad stream list " + e.args[0]
		}
		if _, ok := r.Streams[n]; !ok {
			return "unknown stream " + n
		}
		one := e
		one.args = append([]string{n}, e.args[1:]...)
		if p := one.check(r); p != "" {
			why = append(why, n+": "+p)
		} else {
			held = append(held, n)
		}
	}
	if len(held) == 1 {
		return ""
	}
	if len(held) > 1 {
		return "holds for " + strings.Join(held, " and ")
	}
	return "holds for none (" + strings.Join(why, "; ") + ")"
}

// check returns what is wrong, "" when the expectation holds.
func (e expect) check(r *report) string {
	switch e.op {
	case "stat", "gauge":
		m := r.Stats
		if e.op == "gauge" {
			m = r.Gauges
		}
		want, _ := strconv.ParseInt(e.args[1], 10, 64)
		got, ok := m[e.args[0]]
		if !ok {
			return "not defined"
		}
		if got != want {
			return fmt.Sprintf("got %d", got)
		}
		return ""
	case "capi":
		want, _ := strconv.ParseInt(e.args[1], 10, 64)
		if got := r.CAPI[e.args[0]]; got != want {
			return fmt.Sprintf("got %d", got)
		}
		return ""
	case "log":
		for _, l := range r.Logs {
			if strings.Contains(l.Msg, e.args[0]) {
				return ""
			}
		}
		return "no such log line"
	case "allow":
		return ""
	case "before":
		a, ok1 := r.Streams[e.args[0]]
		b, ok2 := r.Streams[e.args[2]]
		if !ok1 || !ok2 {
			return "unknown stream"
		}
		pa, err := a.point(e.args[1])
		if err != nil {
			return err.Error()
		}
		pb, err := b.point(e.args[3])
		if err != nil {
			return err.Error()
		}
		if pa == 0 {
			return e.args[0] + " never reached " + e.args[1]
		}
		if pb != 0 && pb < pa {
			return fmt.Sprintf("%s %s (seq %d) came first (seq %d)", e.args[2], e.args[3], pb, pa)
		}
		return ""
	}
	if names := strings.Split(e.args[0], "|"); len(names) > 1 {
		return e.checkOne(r, names)
	}
	s, ok := r.Streams[e.args[0]]
	if !ok {
		return "unknown stream " + e.args[0]
	}
	a := e.args[1:]
	switch e.op {
	case "upstream_body", "downstream_body":
		side := strings.TrimSuffix(e.op, "_body")
		if got := s.body(side); got != a[0] {
			return fmt.Sprintf("got %q", got)
		}
	case "downstream_contains":
		if got := s.body("downstream"); !strings.Contains(got, a[0]) {
			return fmt.Sprintf("got %q", got)
		}
	case "upstream_header", "downstream_header", "upstream_trailer", "downstream_trailer":
		side, kind, _ := strings.Cut(e.op, "_")
		if kind == "header" {
			kind = "headers"
		} else {
			kind = "trailers"
		}
		got, present := s.header(side, kind, a[0])
		switch {
		case a[1] == "-" && present:
			return fmt.Sprintf("present: %q", got)
		case a[1] == "*":
			// Present, with any value.
			if !present {
				return "absent"
			}
		case a[1] != "-" && !present:
			return "absent"
		case a[1] != "-" && got != a[1]:
			return fmt.Sprintf("got %q", got)
		}
	case "local_reply":
		var codes []int
		for _, ev := range s.Events {
			if ev.Kind == "local_reply" {
				codes = append(codes, ev.Code)
			}
		}
		if a[0] == "none" {
			if len(codes) > 0 {
				return fmt.Sprintf("got local replies %v", codes)
			}
			return ""
		}
		if len(codes) != 1 || strconv.Itoa(codes[0]) != a[0] {
			return fmt.Sprintf("got local replies %v", codes)
		}
	case "no_upstream":
		for _, ev := range s.Events {
			if ev.Side == "upstream" && ev.Kind != "upstream_reset" {
				return fmt.Sprintf("upstream got %s (seq %d)", ev.Kind, ev.Seq)
			}
		}
	case "reset":
		for _, ev := range s.Events {
			if ev.Side == "downstream" && ev.Kind == "reset" {
				return ""
			}
		}
		return "no reset"
	case "ended":
		if !s.Ended {
			return "still open"
		}
	case "destroy_state":
		if s.DestroyState != a[0] {
			return fmt.Sprintf("got %q", s.DestroyState)
		}
	case "metadata":
		ns, key, ok := strings.Cut(a[0], ".")
		if !ok {
			return "want NS.KEY"
		}
		got, ok := s.Metadata[ns][key]
		if !ok {
			return "absent"
		}
		if a[1] == "*" {
			return ""
		}
		// A number or a literal; anything else is a string.
		var want interface{} = a[1]
		var v interface{}
		if err := json.Unmarshal([]byte(a[1]), &v); err == nil {
			want = v
		}
		if !reflect.DeepEqual(got, want) {
			return fmt.Sprintf("got %v", got)
		}
	}
	return ""
}
