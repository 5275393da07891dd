package proctest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childEnv selects what the test binary does when a test runs it as a
// child process (see child).
const childEnv = "PROCTEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	Main(m)
}

// child is the process the tests start: the test binary itself.
//
//	serve     serves /health on 127.0.0.1:0, prints "listening on ADDR",
//	          and on SIGINT prints "bye" and exits 0.
//	stubborn  ignores SIGINT, prints "ready" and waits to be killed.
//	exit3     prints "bye" and exits with status 3.
//	parent    starts a serve child of its own, prints "grandchild on
//	          ADDR", and ignores SIGINT (so only a group signal reaches
//	          the grandchild).
func child(mode string) int {
	switch mode {
	case "serve":
		ints := make(chan os.Signal, 1)
		signal.Notify(ints, os.Interrupt)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			return 1
		}
		go func() {
			_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/health" {
					http.NotFound(w, r)
				}
			}))
		}()
		fmt.Println("listening on", ln.Addr())
		<-ints
		fmt.Println("bye")
		return 0
	case "stubborn":
		signal.Ignore(os.Interrupt)
		fmt.Println("ready")
		select {}
	case "exit3":
		fmt.Println("bye")
		return 3
	case "parent":
		signal.Ignore(os.Interrupt)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=serve")
		out, err := cmd.StdoutPipe()
		if err != nil || cmd.Start() != nil {
			fmt.Println("cannot start the grandchild:", err)
			return 1
		}
		buf := make([]byte, 256)
		n, _ := out.Read(buf)
		fmt.Print("grandchild " + string(buf[:n]))
		select {}
	}
	fmt.Println("unknown mode", mode)
	return 2
}

// startChild runs the test binary as a child in mode.
func startChild(t *testing.T, name, mode string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return StartCmd(t, name, cmd)
}

// fatalTB records the first Fatal instead of failing the real test, so the
// tests can check how a wait fails. Fatal ends the calling goroutine, as
// testing's does; run the code under test with fatalTB.run.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// run calls fn in a goroutine and returns the Fatal message ("" when fn
// returned normally).
func (f *fatalTB) run(fn func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

var listeningRE = regexp.MustCompile(`listening on (\S+)`)

func TestStartWaitStop(t *testing.T) {
	p := startChild(t, "server", "serve")
	addr := p.WaitOutput(t, listeningRE)[1]
	WaitHTTP(t, "http://"+addr+"/health", p)
	if _, err := Get("http://" + addr + "/missing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Get of a missing page: %v, want an error with the status", err)
	}
	if p.Exited() || p.Err() != nil {
		t.Fatalf("server exited early: %v", p.Err())
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() || p.Err() != nil {
		t.Errorf("after Stop: exited %v, err %v; want a clean exit on SIGINT", p.Exited(), p.Err())
	}
	if out := p.Output(); !strings.HasSuffix(out, "bye\n") {
		t.Errorf("output %q: want the graceful shutdown's bye", out)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestWaitFailsWhenWatchedProcessExits(t *testing.T) {
	p := startChild(t, "quitter", "exit3")
	f := &fatalTB{TB: t}
	start := time.Now()
	msg := f.run(func() { WaitFor(f, "something that never happens", func() bool { return false }, p) })
	if !strings.Contains(msg, "quitter exited (exit status 3) while waiting for something that never happens") {
		t.Errorf("wait failed with %q", msg)
	}
	if d := time.Since(start); d > DefaultTimeout/2 {
		t.Errorf("the wait took %v: it must end when the process does", d)
	}
	msg = f.run(func() { WaitHTTP(f, "http://127.0.0.1:1/health", p) })
	if !strings.Contains(msg, "quitter exited") || !strings.Contains(msg, "127.0.0.1:1") {
		t.Errorf("WaitHTTP failed with %q", msg)
	}
}

func TestUntilTimesOutWithLastDescription(t *testing.T) {
	f := &fatalTB{TB: t}
	n := 0
	msg := f.run(func() {
		Poll{Timeout: 50 * time.Millisecond, Interval: time.Millisecond}.Until(f, "n to reach a million", func() (bool, string) {
			n++
			return false, fmt.Sprintf("n=%d", n)
		})
	})
	if want := fmt.Sprintf("gave up after 50ms waiting for n to reach a million (last: n=%d)", n); msg != want {
		t.Errorf("Until failed with %q, want %q", msg, want)
	}
	task := Go(t, "ended", func(context.Context) error { return errors.New("boom") })
	msg = f.run(func() { WaitMatch(f, &Buffer{}, regexp.MustCompile("x"), task) })
	if !strings.Contains(msg, "ended exited (boom)") {
		t.Errorf("WaitMatch on an ended task failed with %q", msg)
	}
	if err := task.Stop(); err == nil || err.Error() != "boom" {
		t.Errorf("Stop: %v, want boom", err)
	}
}

func TestUntilReturnsOnceTrue(t *testing.T) {
	var b Buffer
	go func() {
		time.Sleep(20 * time.Millisecond)
		fmt.Fprintln(&b, "ready at 42")
	}()
	if m := WaitMatch(t, &b, regexp.MustCompile(`ready at (\d+)`)); m[1] != "42" {
		t.Errorf("submatches %q", m)
	}
}

func TestStopKillsProcessIgnoringInterrupt(t *testing.T) {
	defer func(d time.Duration) { stopTimeout = d }(stopTimeout)
	stopTimeout = 200 * time.Millisecond
	p := startChild(t, "stubborn", "stubborn")
	p.WaitOutput(t, regexp.MustCompile("ready"))
	err := p.Stop()
	if err == nil || !strings.Contains(err.Error(), "stubborn did not stop within 200ms of SIGINT") {
		t.Errorf("Stop: %v", err)
	}
	if !p.Exited() {
		t.Error("not exited after Stop")
	}
}

func TestStopReachesProcessGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups are set up on Linux only")
	}
	defer func(d time.Duration) { stopTimeout = d }(stopTimeout)
	stopTimeout = 200 * time.Millisecond
	p := startChild(t, "parent", "parent")
	addr := p.WaitOutput(t, regexp.MustCompile(`grandchild listening on (\S+)`))[1]
	WaitHTTP(t, "http://"+addr+"/health", p)
	// The parent ignores SIGINT and is killed; the grandchild, which
	// takes SIGINT, exits on the group's interrupt.
	if err := p.Stop(); err == nil {
		t.Error("Stop of a process ignoring SIGINT: no error")
	}
	Until(t, "the grandchild to stop serving", func() (bool, string) {
		_, err := Get("http://" + addr + "/health")
		return err != nil, fmt.Sprintf("GET: %v", err)
	})
}

func TestCommandKilledWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	cmd := Command(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=stubborn")
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() == nil {
		t.Fatalf("stubborn child ended by itself: %v\n%s", err, out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("error %v, want an exit error", err)
	}
	if st, ok := ee.Sys().(syscall.WaitStatus); ok && (!st.Signaled() || st.Signal() != syscall.SIGKILL) {
		t.Errorf("child ended with %v, want killed", st)
	}
}

func TestTask(t *testing.T) {
	served := make(chan struct{})
	task := Go(t, "server", func(ctx context.Context) error {
		close(served)
		<-ctx.Done()
		return fmt.Errorf("served until %w", ctx.Err())
	})
	<-served
	if task.Err() != nil || task.Exited() {
		t.Fatalf("while running: Err %v, Exited %v", task.Err(), task.Exited())
	}
	if err := task.Stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop: %v, want the function's error", err)
	}
	if err := task.Stop(); !errors.Is(err, context.Canceled) || !errors.Is(task.Err(), context.Canceled) || !task.Exited() {
		t.Errorf("second Stop %v, Err %v: want the same error", err, task.Err())
	}
}

func TestBuilder(t *testing.T) {
	var b Builder
	defer b.Close()
	path := b.Build(t, "hello", "./testdata/hello")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if again := b.Build(t, "hello", "./testdata/hello"); again != path {
		t.Errorf("second Build: %s, want %s", again, path)
	}
	if st2, err := os.Stat(path); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("second Build rebuilt the binary (%v)", err)
	}
	if out, err := exec.Command(path).Output(); err != nil || string(out) != "hello\n" {
		t.Errorf("built binary: %q, %v", out, err)
	}
	f := &fatalTB{TB: t}
	if msg := f.run(func() { b.Build(f, "hello", "-trimpath", "./testdata/hello") }); !strings.Contains(msg, "asked again") {
		t.Errorf("same name, other args: %q", msg)
	}
	for i := 0; i < 2; i++ {
		if msg := f.run(func() { b.Build(f, "broken", "./testdata/broken") }); !strings.Contains(msg, "undefinedFunction") {
			t.Errorf("broken build %d: %q, want the compiler's error", i, msg)
		}
	}
	b.Close()
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", filepath.Dir(path), err)
	}
}

func TestFiles(t *testing.T) {
	addr := FreeAddr(t)
	if p := Port(t, addr); p == "" || p == "0" {
		t.Errorf("FreeAddr %s has no port", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("FreeAddr %s is not free: %v", addr, err)
	}
	ln.Close()
	path := WriteTemp(t, "mesh.yaml", "a: 1\n")
	Replace(t, path, "a: 2\n")
	if b, err := os.ReadFile(path); err != nil || string(b) != "a: 2\n" {
		t.Errorf("after Replace: %q, %v", b, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("Replace left its temporary file: %v", err)
	}
}

func TestBufferConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 400 {
		t.Errorf("%d bytes, want 400", n)
	}
}
