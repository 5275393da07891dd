// Package progress shows a live progress line during a run (mpb): elapsed
// time, sent, in flight, done, errors and the live p99 TTFT per class. It is
// quiet unless the output is a terminal.
//
// Start's goroutine owns the bar and polls the runner's Live; stop waits
// for it to finish drawing.
package progress

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/llmesh/llmesh/bench/runner"
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// Start draws progress for live on w until stop is called. total is the
// expected number of requests (0 when unknown). When w is not a terminal it
// draws nothing and stop is a no-op.
func Start(ctx context.Context, w io.Writer, label string, total int, live *runner.Live) (stop func()) {
	if !IsTerminal(w) || live == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	p := mpb.NewWithContext(ctx, mpb.WithOutput(w), mpb.WithRefreshRate(250*time.Millisecond), mpb.WithWidth(30))
	bar := p.AddBar(int64(max(total, 1)),
		mpb.PrependDecorators(decor.Name(label+" ", decor.WC{}), decor.Elapsed(decor.ET_STYLE_MMSS)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return Line(live.Snapshot()) })),
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s := live.Snapshot()
				if total <= 0 || s.Done > int64(total) {
					bar.SetTotal(s.Sent+1, false)
				}
				bar.SetCurrent(s.Done)
			}
		}
	}()
	return func() {
		s := live.Snapshot()
		bar.SetTotal(s.Done, true)
		cancel()
		<-done
		bar.Abort(false)
		p.Wait()
	}
}

// Line is the status text for one snapshot.
func Line(s runner.Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d  in flight %d  done %d  errors %d", s.Sent, s.InFlight, s.Done, s.Failed)
	for _, c := range s.Classes {
		fmt.Fprintf(&b, "  %s p99 TTFT %.0f ms", c, s.TTFTP99Ms[c])
	}
	return b.String()
}
