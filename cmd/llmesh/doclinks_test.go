package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docLink is a markdown link target in running text: [text](target).
var docLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// docHeading is an ATX heading line.
var docHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// headingAnchors are the fragment names GitHub gives a page's headings:
// lower case, letters, digits, '-' and '_' kept, spaces to '-', everything
// else dropped, and "-1", "-2" … after repeats. Headings inside fenced blocks
// do not count.
func headingAnchors(page string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := docHeading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			a += "-" + string(rune('0'+n+1))
		} else {
			seen[a] = 0
		}
		anchors[a] = true
	}
	return anchors
}

// TestDocLinks checks every relative link of README.md and docs/: the file
// exists and, for a link into a markdown page, the heading it names does.
// Pages are split and headings renamed; a link left behind fails here.
func TestDocLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = headingAnchors(string(b))
		return cache[path], nil
	}
	root := repoRoot(t)
	links := 0
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, m := range docLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			links++
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %q: no such file", rel, target)
				continue
			}
			if frag == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			anchors, err := anchorsOf(file)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors[frag] {
				t.Errorf("%s: link %q: no heading with that anchor in %s", rel, target, filepath.Base(file))
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found; the page list or the link pattern is wrong")
	}
	t.Logf("%d relative links checked", links)
}

func TestHeadingAnchors(t *testing.T) {
	page := "# A/B report\n\n```sh\n# not a heading\n```\n## `--time-scale` fidelity\n## Why 1.3× is out\n## Twice\n## Twice\n"
	got := headingAnchors(page)
	for _, want := range []string{"ab-report", "--time-scale-fidelity", "why-13-is-out", "twice", "twice-1"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a comment inside a fenced block counted as a heading: %v", got)
	}
}
