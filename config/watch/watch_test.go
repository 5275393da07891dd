package watch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/config/watch"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watchHarness runs a Watcher on a temporary file and records callbacks.
type watchHarness struct {
	t    *testing.T
	path string
	w    *watch.Watcher

	mu      sync.Mutex
	changes int
	errs    []error
}

func startWatcher(t *testing.T, initial string) *watchHarness {
	t.Helper()
	h := &watchHarness{t: t, path: filepath.Join(t.TempDir(), "mesh.yaml")}
	if err := os.WriteFile(h.path, []byte(initial), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := watch.New(h.path, watch.Options{
		Debounce: 20 * time.Millisecond,
		OnChange: func(*config.Config) { h.mu.Lock(); h.changes++; h.mu.Unlock() },
		OnError:  func(err error) { h.mu.Lock(); h.errs = append(h.errs, err); h.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// waitFor runs act, then polls cond until it holds or a generous deadline
// passes. act is repeated every 250ms because a change made before the
// directory watch was established is not seen; writing again is harmless.
func (h *watchHarness) waitFor(what string, act func(), cond func() bool) {
	h.t.Helper()
	next := time.Now()
	wait.Until(h.t, what, func() bool {
		if time.Now().After(next) {
			act()
			next = time.Now().Add(250 * time.Millisecond)
		}
		return cond()
	})
}

func (h *watchHarness) write(content string) func() {
	return func() {
		if err := os.WriteFile(h.path, []byte(content), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *watchHarness) counts() (int, []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changes, append([]error(nil), h.errs...)
}

// minimal is the smallest valid mesh (the same as config's tests use).
const minimal = `
listeners:
  - name: main
    address: 127.0.0.1:8080
    routes: [{pool: sim}]
pools:
  - name: sim
    protocol: openai
    endpoints: [127.0.0.1:8000]
`

func withInflight(n string) string {
	return strings.Replace(minimal, "endpoints: [127.0.0.1:8000]", "endpoints: [127.0.0.1:8000]\n    capacity: {max_inflight: "+n+"}", 1)
}

func TestWatcherReloadsValidChange(t *testing.T) {
	h := startWatcher(t, withInflight("1"))
	// Keep rewriting until the watch is surely established: a write before
	// fsnotify's Add returned may be missed, which Run's first reload covers
	// only for writes before it.
	h.waitFor("reload to max_inflight 2", h.write(withInflight("2")), func() bool {
		return inflight(h.w.Config()) == 2
	})
	// In-place writes truncate first, so the watcher may see an empty
	// file, which it reports and ignores; nothing else may go wrong.
	n, errs := h.counts()
	if n < 1 {
		t.Errorf("changes=%d", n)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "is empty (keeping the last good config)") {
			t.Errorf("unexpected error: %v", err)
		}
	}
}

func TestWatcherKeepsLastGoodOnInvalidChange(t *testing.T) {
	h := startWatcher(t, withInflight("3"))
	good := h.w.Config()
	h.waitFor("the invalid change reported", h.write(withInflight("-3")), func() bool {
		return len(invalidErrs(h)) > 0
	})
	if h.w.Config() != good {
		t.Fatal("invalid change replaced the config")
	}
	errs := invalidErrs(h)
	if !strings.Contains(errs[0].Error(), "pools[0].capacity.max_inflight: -3 must be between 1 and 16777216") {
		t.Errorf("error does not name the field: %v", errs[0])
	}
	// A later valid change still gets through.
	h.waitFor("recovery", h.write(withInflight("4")), func() bool {
		return inflight(h.w.Config()) == 4
	})
}

func TestWatcherFollowsRenameReplace(t *testing.T) {
	h := startWatcher(t, withInflight("5"))
	h.waitFor("rename-replaced file loaded", func() {
		// Write a new file next to it and rename it over, as editors and
		// config-map updates do.
		tmp := filepath.Join(filepath.Dir(h.path), ".mesh.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(withInflight("6")), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, h.path); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		return inflight(h.w.Config()) == 6
	})
	// The watch survives the replacement: another change after it loads.
	h.waitFor("second change after rename", h.write(withInflight("7")), func() bool {
		return inflight(h.w.Config()) == 7
	})
}

func TestWatcherUnchangedContentIsNoChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := watch.New(path, watch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := w.Reload(); changed || err != nil {
		t.Errorf("Reload of unchanged file = %v, %v", changed, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if changed, err := w.Reload(); changed || err == nil {
		t.Errorf("Reload of missing file = %v, %v", changed, err)
	}
	if w.Config() == nil {
		t.Error("config lost")
	}
}

func TestNewWatcherRejectsInvalidFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte("classes: [{name: a, slo: {ttft: -5ms}}]"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := watch.New(path, watch.Options{})
	if err == nil || !strings.Contains(err.Error(), `classes[0].slo.ttft: "-5ms" must be positive`) {
		t.Fatalf("err = %v", err)
	}
}

func inflight(c *config.Config) int {
	if p := c.Pool("sim"); p != nil {
		return p.MaxInflight
	}
	return -1
}

// invalidErrs are the reported errors other than empty-file reads.
func invalidErrs(h *watchHarness) []error {
	_, all := h.counts()
	var out []error
	for _, err := range all {
		if !strings.Contains(err.Error(), "is empty") {
			out = append(out, err)
		}
	}
	return out
}

// TestWatcherFollowsConfigMapSwap mimics a Kubernetes config-map volume:
// mesh.yaml → ..data/mesh.yaml, and an update atomically re-points the
// ..data symlink at a new directory.
func TestWatcherFollowsConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(n, content string) {
		vd := filepath.Join(dir, "..v"+n)
		if err := os.Mkdir(vd, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vd, "mesh.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink("..v"+n, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("1", withInflight("8"))
	path := filepath.Join(dir, "mesh.yaml")
	if err := os.Symlink("..data/mesh.yaml", path); err != nil {
		t.Fatal(err)
	}
	w, err := watch.New(path, watch.Options{Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	n := 1
	wait.Poll{Interval: 250 * time.Millisecond}.Until(t, "the config-map swap picked up", func() bool {
		if inflight(w.Config()) == 9 {
			return true
		}
		// Repeat the swap until the watch is surely established.
		n++
		version(fmt.Sprint(n), withInflight("9"))
		return false
	})
}

// Files reloads when any of its files changes, in any directory, and
// follows the files paths names after each reload: a file named only
// after a reload is watched from then on.
func TestFilesFollowsTheNamedFiles(t *testing.T) {
	main, a, b := filepath.Join(t.TempDir(), "ids.yaml"), filepath.Join(t.TempDir(), "a.token"), filepath.Join(t.TempDir(), "b.token")
	write := func(path, s string) func() {
		return func() {
			if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
				t.Error(err)
			}
		}
	}
	write(main, "a")()
	write(a, "1")()
	write(b, "1")()
	var (
		mu      sync.Mutex
		reloads int
		named   string // the token file main names, as of the last reload
	)
	reload := func() {
		body, err := os.ReadFile(main)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		defer mu.Unlock()
		reloads++
		named = map[string]string{"a": a, "b": b}[string(body)]
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return reloads }
	paths := func() []string { mu.Lock(); defer mu.Unlock(); return []string{main, named} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watch.Files(ctx, paths, 10*time.Millisecond, nil, reload, func(err error) { t.Error(err) })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wait.Until(t, "the first reload", func() bool { return count() == 1 })

	// Repeats the write until the reload it causes is seen: the watch of a
	// directory named by the last reload starts just after it.
	until := func(what string, act func()) {
		t.Helper()
		n, next := count(), time.Now()
		wait.Until(t, what, func() bool {
			if time.Now().After(next) {
				act()
				next = time.Now().Add(250 * time.Millisecond)
			}
			return count() > n
		})
	}
	until("a change of the token file a, in a directory of its own", write(a, "2"))
	until("a change of the file naming the token files", write(main, "b"))
	until("a change of b, named since the last reload", write(b, "2"))
}
