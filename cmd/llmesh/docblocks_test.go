package main

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
)

// docBlock is one fenced code block of a Markdown page.
type docBlock struct {
	file string
	line int    // 1-based line of the opening fence
	info string // the fence's info string ("sh", "text", "")
	// skip is the reason given by a `<!-- doctest: skip REASON -->` line
	// right before the fence; empty when the block is to be run.
	skip string
	body string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// shellInfos are the fence info strings of command blocks: every one of
// them is run by TestDocs or carries a skip marker.
var shellInfos = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

const skipMarker = "<!-- doctest: skip"

// parseDocBlocks returns the fenced code blocks of a Markdown page. An
// unterminated fence is an error, as is a skip marker with no reason or not
// followed by a fence, so that a page cannot opt out by accident.
func parseDocBlocks(file, text string) ([]docBlock, error) {
	var (
		blocks  []docBlock
		cur     *docBlock
		body    strings.Builder
		fence   string
		pending string // skip reason waiting for its fence
		pendAt  int
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				cur.body = body.String()
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			body.WriteString(line)
			body.WriteByte('\n')
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			i := 0
			for i < len(trimmed) && trimmed[i] == trimmed[0] {
				i++
			}
			fence = trimmed[:i]
			info, _, _ := strings.Cut(strings.TrimSpace(trimmed[i:]), " ")
			cur = &docBlock{file: file, line: n, info: info, skip: pending}
			pending = ""
			body.Reset()
			continue
		}
		if pending != "" && trimmed != "" {
			return nil, fmt.Errorf("%s:%d: %s --> must come right before a code fence", file, pendAt, skipMarker)
		}
		if strings.HasPrefix(trimmed, skipMarker) {
			reason := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(trimmed, skipMarker), "-->"))
			if reason == "" || !strings.HasSuffix(trimmed, "-->") {
				return nil, fmt.Errorf("%s:%d: want %s REASON -->", file, n, skipMarker)
			}
			pending, pendAt = reason, n
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: code fence never closed", file, cur.line)
	}
	if pending != "" {
		return nil, fmt.Errorf("%s:%d: %s --> is not followed by a code fence", file, pendAt, skipMarker)
	}
	return blocks, nil
}

// docCommands splits a shell block into commands: continuation lines
// (ending in a backslash) are joined, comment-only and empty lines dropped.
func docCommands(body string) []string {
	var (
		cmds []string
		cur  strings.Builder
	)
	for _, line := range strings.Split(body, "\n") {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, `\`) {
			cur.WriteString(strings.TrimSuffix(t, `\`))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(t)
		cmds = append(cmds, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		cmds = append(cmds, strings.TrimSpace(cur.String()))
	}
	return cmds
}

func TestParseDocBlocks(t *testing.T) {
	page := "# t\n\n<!-- doctest: skip needs Envoy -->\n```sh\nenvoy -c x \\\n  --y\n```\n\n```text\nout\n```\n  ```sh\n  llmesh version\n  ```\n"
	bs, err := parseDocBlocks("p.md", page)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 3 || bs[0].skip != "needs Envoy" || bs[0].info != "sh" || bs[1].info != "text" || bs[2].skip != "" || bs[2].line != 12 {
		t.Fatalf("blocks = %+v", bs)
	}
	if got := docCommands(bs[0].body); len(got) != 1 || got[0] != "envoy -c x  --y" {
		t.Errorf("commands = %q", got)
	}
	for _, bad := range []string{
		"```sh\nllmesh\n",                      // unterminated
		"<!-- doctest: skip -->\n```sh\n```\n", // no reason
		"<!-- doctest: skip why -->\ntext\n",   // not before a fence
		"<!-- doctest: skip why -->\n",         // at the end
	} {
		if _, err := parseDocBlocks("p.md", bad); err == nil {
			t.Errorf("parseDocBlocks(%q): no error", bad)
		}
	}
}

func FuzzParseDocBlocks(f *testing.F) {
	f.Add("```sh\nllmesh demo\n```\n")
	f.Add("<!-- doctest: skip x -->\n~~~bash\na \\\nb\n~~~\n")
	f.Add("````\n```\n````\n")
	f.Fuzz(func(t *testing.T, s string) {
		bs, err := parseDocBlocks("f.md", s)
		if err != nil {
			return
		}
		for _, b := range bs {
			if b.line < 1 {
				t.Fatalf("block at line %d", b.line)
			}
			docCommands(b.body)
		}
	})
}
