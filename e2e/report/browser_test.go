// Package report checks the A/B report page in a real browser: headless
// Chromium (Debian's chromium, which make e2e-deps installs) loads it with
// no console errors, and the verdict is on the first screen.
package report

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/ab"
)

// screen is the first screen the verdict must be on (a 13" laptop).
const screenW, screenH = 1280, 800

func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIP: no chromium on PATH (make e2e-deps installs Debian's chromium)")
	return ""
}

// headless runs the browser on page with extra flags and returns its stdout
// and stderr.
func headless(t *testing.T, bin, page string, flags ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0",
		"--window-size=" + strconv.Itoa(screenW) + "," + strconv.Itoa(screenH)}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errb.String())
	}
	return out.String(), errb.String()
}

// The demo's A/B from an idle host, rendered as report.html.
func TestABPageInBrowser(t *testing.T) {
	bin := chromium(t)
	b, err := os.ReadFile(filepath.Join("testdata", "ab-demo.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res ab.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := ab.HTML(f, &res); err != nil {
		t.Fatal(err)
	}
	f.Close()
	html, _ := os.ReadFile(page)
	if regexp.MustCompile(`(src|href)="(https?:)?//`).Match(html) {
		t.Error("report.html loads external assets")
	}

	// The page as the browser laid it out, plus the verdict's position
	// written into the DOM by a probe appended to a copy of the page.
	probe := filepath.Join(dir, "probe.html")
	script := `<script>window.addEventListener('load',()=>{const r=document.getElementById('verdict').getBoundingClientRect();` +
		`document.body.setAttribute('data-verdict-bottom',Math.round(r.bottom));` +
		`document.body.setAttribute('data-table-top',Math.round(document.getElementById('comparison').getBoundingClientRect().top));` +
		// Charts: how many, how many are narrower than 600 px, and how
		// many have a legend that starts above the plot's bottom edge.
		`const figs=[...document.querySelectorAll('body > figure.chart')];let small=0,over=0;` +
		`for(const f of figs){const s=f.querySelector(':scope > svg').getBoundingClientRect();const l=f.querySelector('ul.legend');` +
		`if(s.width<600)small++;if(l&&l.getBoundingClientRect().top<s.bottom-1)over++;}` +
		`document.body.setAttribute('data-charts',figs.length+','+small+','+over);});</script>`
	if err := os.WriteFile(probe, []byte(strings.Replace(string(html), "</body>", script+"</body>", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, logs := headless(t, bin, probe, "--dump-dom", "--virtual-time-budget=5000")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "CONSOLE") && (strings.Contains(line, "Uncaught") || strings.Contains(line, "Error")) {
			t.Errorf("console error: %s", line)
		}
	}
	m := regexp.MustCompile(`data-verdict-bottom="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the probe did not run; DOM:\n%.2000s", dom)
	}
	if bottom, _ := strconv.Atoi(m[1]); bottom <= 0 || bottom > screenH {
		t.Errorf("verdict ends at y=%d, outside the first %dx%d screen", bottom, screenW, screenH)
	}
	if m := regexp.MustCompile(`data-charts="(\d+),(\d+),(\d+)"`).FindStringSubmatch(dom); m == nil || m[1] == "0" || m[2] != "0" || m[3] != "0" {
		t.Errorf("charts as laid out (count, narrower than 600 px, legend over the plot): %v", m)
	}
	if !strings.Contains(dom, res.Verdict) {
		t.Errorf("verdict %q not in the page", res.Verdict)
	}
	for _, r := range res.Runs {
		if !strings.Contains(dom, "pair "+strconv.Itoa(r.Repeat+1)+", "+r.Arm) {
			t.Errorf("run pair %d arm %s not listed", r.Repeat+1, r.Arm)
		}
	}
	shot := filepath.Join(dir, "report.png")
	if d := os.Getenv("LLMESH_SCREENSHOT_DIR"); d != "" {
		shot = filepath.Join(d, "report.png")
	}
	headless(t, bin, page, "--screenshot="+shot)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
}
