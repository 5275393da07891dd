package live

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestIncreasePromtool evaluates Increase with Prometheus's own engine
// (promtool test rules) on the series a live mesh has: one counting
// through the window, one born in it (its first scrape already counts 5
// requests, which increase() would lose), one whose host restarted in it,
// and one whose host went away.
func TestIncreasePromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		fmt.Fprintln(os.Stderr, "SKIP TestIncreasePromtool: promtool not installed (Debian package prometheus; make e2e-deps installs it)")
		t.Skip("promtool not installed")
	}
	dir := t.TempDir()
	test := fmt.Sprintf(`rule_files: [empty.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'c{s="steady"}', values: '0+1x20'}
      - {series: 'c{s="new"}', values: '_x14 5 6 7 8 9 10'}
      - {series: 'c{s="reset"}', values: '0+1x10 0+1x9'}
      - {series: 'c{s="gone"}', values: '0+1x12'}
    promql_expr_test:
      - expr: %q
        eval_time: 20m
        exp_samples:
          # 20 at the end, 10 at its start: exact.
          - {labels: '{s="steady"}', value: 10}
          # Born in the window at 5: counts from zero.
          - {labels: '{s="new"}', value: 10}
          # Restarted at minute 11: increase() with its reset handling.
          - {labels: '{s="reset"}', value: 9}
          # Last scraped at minute 12 (2 requests since minute 10):
          # increase() extrapolates by half a scrape interval.
          - {labels: '{s="gone"}', value: 2.5}
`, Increase("c", "10m"))
	for name, body := range map[string]string{"empty.yaml": "groups: []\n", "increase_test.yaml": test} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "test", "rules", filepath.Join(dir, "increase_test.yaml"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out.String())
	}
}
