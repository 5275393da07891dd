package config

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// ExpandEnv replaces every ${NAME} in a config file's values (NAME:
// letters, digits and underscores, not starting with a digit) by the
// variable's value from lookup, so one file serves several deployments
// (LLMESH_SIM=127.0.0.1:8000 llmesh gateway --config bench/meshes/fifo.yaml).
// $${ stands for a literal ${. A variable that is not set is an error
// naming it and its line; a $ followed by anything else is left as it is.
//
// YAML comments are copied as they are: a file may document its
// placeholders ("# ${LLMESH_SIM} is the engine's host:port") without
// setting them. A comment is a # at the start of a line or after a space
// or tab, outside a quoted scalar and outside a block scalar (| or >),
// whose lines are values even when they start with #.
func ExpandEnv(data []byte, lookup func(string) (string, bool)) ([]byte, error) {
	if !bytes.Contains(data, []byte("${")) {
		return data, nil
	}
	var out bytes.Buffer
	out.Grow(len(data))
	var missing []string
	var quote byte // the open quoted scalar's quote, across lines; 0: none
	blockAt := -1  // indentation of the line that opened a block scalar; -1: none
	for n, line := range bytes.SplitAfter(data, []byte("\n")) {
		indent := len(line) - len(bytes.TrimLeft(line, " "))
		if blockAt >= 0 {
			if len(bytes.TrimSpace(line)) == 0 || indent > blockAt {
				missing = expandValue(&out, line, n+1, lookup, missing)
				continue
			}
			blockAt = -1
		}
		var prev byte // the line's last non-blank byte before i, outside comments
		content := len(line)
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case quote == '"' && c == '\\' && i+1 < len(line):
				out.Write(line[i : i+2])
				i++
				continue
			case quote == '\'' && c == '\'' && i+1 < len(line) && line[i+1] == '\'':
				out.WriteString("''")
				i++
				continue
			case quote != 0 && c == quote:
				quote = 0
			case quote == 0 && c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
				out.Write(line[i:])
				content = i
				i = len(line)
				continue
			case quote == 0 && (c == '\'' || c == '"') && (prev == 0 || strings.IndexByte(":-[{,?", prev) >= 0):
				quote = c
			case c == '$':
				var skip int
				skip, missing = expandAt(&out, line[i:], n+1, lookup, missing)
				i += skip
				prev = '$'
				continue
			}
			out.WriteByte(c)
			if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
				prev = c
			}
		}
		if quote == 0 && opensBlockScalar(line[:content]) {
			blockAt = indent
		}
	}
	if len(missing) > 0 {
		return nil, errors.New(strings.Join(missing, "; ") + " (write $${ for a literal ${)")
	}
	return out.Bytes(), nil
}

// expandValue expands every placeholder of a line that is all value (a
// block scalar's line).
func expandValue(out *bytes.Buffer, line []byte, lineNo int, lookup func(string) (string, bool), missing []string) []string {
	for i := 0; i < len(line); i++ {
		if line[i] != '$' {
			out.WriteByte(line[i])
			continue
		}
		var skip int
		skip, missing = expandAt(out, line[i:], lineNo, lookup, missing)
		i += skip
	}
	return missing
}

// expandAt writes what the $ at s[0] stands for and returns how many bytes
// after it were consumed: $${ is a literal ${, ${NAME} the variable, and
// anything else the $ alone. A variable lookup lacks is added to missing.
func expandAt(out *bytes.Buffer, s []byte, lineNo int, lookup func(string) (string, bool), missing []string) (int, []string) {
	if bytes.HasPrefix(s, []byte("$${")) {
		out.WriteString("${")
		return 2, missing
	}
	if len(s) < 2 || s[1] != '{' {
		out.WriteByte('$')
		return 0, missing
	}
	end := bytes.IndexByte(s[2:], '}')
	if end < 0 || !envName(string(s[2:2+end])) {
		out.WriteByte('$')
		return 0, missing
	}
	name := string(s[2 : 2+end])
	v, ok := lookup(name)
	if !ok {
		missing = append(missing, fmt.Sprintf("line %d: ${%s} is not set in the environment", lineNo, name))
	}
	out.WriteString(v)
	return 2 + end, missing
}

// opensBlockScalar reports whether a line's content (its comment cut off)
// ends in a block scalar header, | or > with optional chomping and
// indentation indicators, after a key, a sequence dash or a tag.
func opensBlockScalar(content []byte) bool {
	f := strings.Fields(string(content))
	if len(f) == 0 {
		return false
	}
	h := f[len(f)-1]
	if h[0] != '|' && h[0] != '>' {
		return false
	}
	for _, c := range h[1:] {
		if c != '+' && c != '-' && !(c >= '1' && c <= '9') {
			return false
		}
	}
	if len(f) == 1 {
		return true
	}
	before := f[len(f)-2]
	return strings.HasSuffix(before, ":") || before == "-" || before == "?" || strings.HasPrefix(before, "!") || strings.HasPrefix(before, "&")
}

func envName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
