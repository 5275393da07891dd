package proctest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/wait"
)

// DefaultTimeout bounds a wait that sets no Timeout. It only bounds
// failures — a wait returns as soon as its condition holds — so it is
// generous: the suites run on loaded 2-core machines next to other test
// binaries.
const DefaultTimeout = 90 * time.Second

// DefaultInterval is how often a wait that sets no Interval checks its
// condition.
const DefaultInterval = 10 * time.Millisecond

// Poll is how a wait polls.
type Poll struct {
	// Timeout is how long the condition may take to hold; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Interval is the time between two checks; zero means DefaultInterval.
	// A condition that holds only briefly needs a short one.
	Interval time.Duration
}

// Until checks cond until it reports true. It fails the test when one of
// watch ends first or the timeout passes; the description cond returned
// last explains a timeout. The polling is testkit/wait's.
func (p Poll) Until(t testing.TB, what string, cond func() (ok bool, desc string), watch ...Runner) {
	t.Helper()
	w := wait.Poll{Timeout: p.Timeout, Interval: p.Interval}
	if w.Timeout <= 0 {
		w.Timeout = DefaultTimeout
	}
	if w.Interval <= 0 {
		w.Interval = DefaultInterval
	}
	w.UntilNil(t, what, func() error {
		ok, desc := cond()
		if ok {
			return nil
		}
		for _, r := range watch {
			select {
			case <-r.Done():
				return wait.Stop(fmt.Errorf("%s exited (%v)", r.Name(), r.Err()))
			default:
			}
		}
		return errors.New(desc)
	})
}

// Until is Poll{}.Until: the default timeout and interval.
func Until(t testing.TB, what string, cond func() (ok bool, desc string), watch ...Runner) {
	t.Helper()
	Poll{}.Until(t, what, cond, watch...)
}

// WaitFor is Until for a condition with nothing to say when it fails.
func WaitFor(t testing.TB, what string, cond func() bool, watch ...Runner) {
	t.Helper()
	Poll{}.Until(t, what, func() (bool, string) { return cond(), "not yet" }, watch...)
}

// WaitMatch waits until re matches what out holds (a Buffer, a Proc's
// output) and returns the submatches.
func WaitMatch(t testing.TB, out fmt.Stringer, re *regexp.Regexp, watch ...Runner) []string {
	t.Helper()
	var m []string
	Poll{}.Until(t, fmt.Sprintf("output matching %q", re), func() (bool, string) {
		m = re.FindStringSubmatch(out.String())
		return m != nil, "no match yet"
	}, watch...)
	return m
}

// WaitHTTP waits until a GET of url answers 200.
func WaitHTTP(t testing.TB, url string, watch ...Runner) {
	t.Helper()
	Poll{}.Until(t, url+" to answer 200", func() (bool, string) {
		_, err := Get(url)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	}, watch...)
}

// client serves the polls and gets. Without keep-alives a poll leaves no
// idle connection (and its goroutines) behind for a leak check to find.
var client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// Get returns the body of a 200 answer to a GET of url; any other status
// is an error that carries the body.
func Get(url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

// MustGet is Get that fails the test on an error.
func MustGet(t testing.TB, url string) string {
	t.Helper()
	body, err := Get(url)
	if err != nil {
		t.Fatal(err)
	}
	return body
}
