package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// binPath is the llmesh binary built once for the whole package (without
// -race: the processes under test run as they would in production).
var binPath string

// readyTimeout bounds every wait for a process or a condition. It is
// generous because the suite runs on loaded 2-core machines next to other
// test binaries.
const readyTimeout = 90 * time.Second

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llmesh-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "llmesh")
	build := exec.Command("go", "build", "-o", binPath, "../cmd/llmesh")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building llmesh:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		// Every process waiter, pipe copier and sampler must have ended
		// with its test; idle keep-alive connections to processes that
		// are gone are closed first.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns a loopback address that was free a moment ago. Only for
// programs that cannot listen on port 0 and report the port (Prometheus);
// llmesh's own processes bind 127.0.0.1:0 and print what they got.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// proc is one process started by a test. Its output is kept and printed
// only when the test fails.
type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs `llmesh args...` until the test ends.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startBin(t, name, binPath, args...)
}

// startBin runs bin until the test ends: cleanup interrupts it, waits for
// it, and shows its output when the test failed. The child is also killed
// when the test binary dies (see setDeathSignal), so an aborted run leaves
// no process behind.
func startBin(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, args: args, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	setDeathSignal(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("---- %s (%s %s) output ----\n%s", p.name, filepath.Base(bin), strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// stop asks the process to shut down gracefully, then kills it.
func (p *proc) stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not stop within 20s of SIGINT; killing it", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitOutput polls the process's output until re matches and returns the
// submatches; it fails the test when the process exits first or the
// deadline passes.
func (p *proc) waitOutput(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	waitFor(t, fmt.Sprintf("%s printing %q", p.name, re), func() bool {
		m = re.FindStringSubmatch(p.out.String())
		return m != nil
	}, p)
	return m
}

// waitFor polls cond until it holds; it fails the test early when one of
// procs exits meanwhile, or after readyTimeout.
func waitFor(t *testing.T, what string, cond func() bool, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for !cond() {
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("%s exited (%v) while waiting for %s", p.name, p.err, what)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", readyTimeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitHTTP polls url until it answers 200 or the deadline passes; it fails
// the test early if one of procs exits meanwhile.
func waitHTTP(t *testing.T, url string, procs ...*proc) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("%s exited (%v) while waiting for %s", p.name, p.err, url)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v (last error: %v)", url, readyTimeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// httpGet returns the body of a 200 answer to url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	body, err := tryGet(url)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func tryGet(url string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

// metricSum sums every sample of one metric (all label sets) in Prometheus
// text exposition; found is false when no sample has that name.
func metricSum(text, name string) (sum float64, found bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer name with this prefix
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// writeFileAtomic replaces path by a rename, the way editors and config
// management do, so a watcher never reads a half-written file.
func writeFileAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
