package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/llmesh/llmesh/bench/result"
)

// Markdown writes the report as a Markdown section.
func Markdown(w io.Writer, rep *result.Report) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "## %s\n\n", mdEscape(Title(rep)))
	fmt.Fprintf(ew, "- requests: %d measured (%d warm-up excluded), %d ok, %d failed, over %.2f s\n", rep.NumPrompts, rep.Warmup, rep.Completed, rep.Failed, rep.Duration)
	fmt.Fprintf(ew, "- rate: offered %.2f req/s, achieved %.2f req/s; output %.1f tok/s; goodput %.2f req/s\n", rep.OfferedRPS, rep.AchievedRPS, rep.OutputThroughput, rep.RequestGoodput)
	fmt.Fprintf(ew, "- run: %s\n", mdEscape(Validity(rep)))
	if p := Primary(rep); p != "" {
		fmt.Fprintf(ew, "- %s\n", mdEscape(p))
	}
	fmt.Fprintln(ew)
	fmt.Fprintf(ew, "| %s |\n", strings.Join(header, " | "))
	fmt.Fprintf(ew, "|%s\n", strings.Repeat("---:|", len(header)))
	for _, n := range ClassNames(rep) {
		fmt.Fprintf(ew, "| %s |\n", strings.Join(mdRow(row(n, rep.Classes[n], false)), " | "))
	}
	fmt.Fprintf(ew, "| %s |\n\n", strings.Join(mdRow(row("**all**", rep.Overall, true)), " | "))
	fmt.Fprintln(ew, "Latencies in ms. Attainment is the share of requests meeting both SLOs; failed, rejected and dropped requests count as misses.")
	fmt.Fprintln(ew)
	for _, n := range ClassNames(rep) {
		c := rep.Classes[n]
		fmt.Fprintf(ew, "- **%s** violations: %s", mdEscape(n), violations(c))
		if es := earlyStopping(c); es != "" {
			fmt.Fprintf(ew, "; early stopping: %s", es)
		}
		fmt.Fprintln(ew)
		for _, l := range liveLines(c, true) {
			fmt.Fprintf(ew, "- **%s** %s\n", mdEscape(n), mdEscape(l))
		}
	}
	if rep.Live != nil {
		fmt.Fprintf(ew, "- note: %s\n", mdEscape(rep.Live.Note))
	}
	if rep.Engine != nil {
		fmt.Fprintf(ew, "- engine agreement: client − engine TTFT p50 %s ms, p99 %s ms over %d requests (time before the engine saw the request: network and harness, plus queueing in a gateway or filter in front of it, not a disagreement of the measurements)\n", trim(rep.Engine.DeltaMs.P50), trim(rep.Engine.DeltaMs.P99), rep.Engine.N)
	}
	for _, l := range append(prefixLines(rep), gpuLines(rep)...) {
		fmt.Fprintf(ew, "- %s\n", mdEscape(l))
	}
	if rep.Provenance != nil {
		_ = rep.Provenance.WriteMarkdown(ew)
	}
	return ew.err
}

func mdRow(cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = mdEscape(c)
	}
	return out
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
