// Package watch keeps a mesh config file loaded and reloads it when it
// changes. It is apart from package config so that what links only the
// schema (the Envoy filter's .so) does not link fsnotify.
//
// Concurrency: a Watcher owns the current *config.Config in an
// atomic.Pointer: the goroutine running Watcher.Run (started and stopped by
// the caller through its context) is the only one that starts reloads from
// file events; Reload may also be called from any goroutine and is
// serialised by the watcher's mutex, which also guards the hash of the last
// loaded bytes. OnChange and OnError run on the goroutine that performed the
// reload.
package watch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
)

// DefaultDebounce is the quiet period a Watcher waits after the last file
// event before reloading, so an editor's write-rename-chmod burst is one
// reload.
const DefaultDebounce = 100 * time.Millisecond

// Options tune a Watcher. The zero value is usable.
type Options struct {
	// Debounce is the quiet period after the last event; 0 means
	// DefaultDebounce.
	Debounce time.Duration
	// Clock times the debounce; nil means the wall clock.
	Clock clock.Clock
	// OnChange is called after a changed, valid config was swapped in, from
	// the goroutine that ran the reload (Run's, or Reload's caller). nil:
	// nobody is told; Config still returns the new one.
	OnChange func(*config.Config)
	// OnError is called when a change could not be loaded (unreadable file
	// or invalid config; the error is Errors for config problems). The last
	// good config stays current. nil: the error is dropped.
	OnError func(error)
}

// Watcher keeps the current config of one file, reloading it when the file
// changes. Config is safe from any goroutine.
type Watcher struct {
	path string
	opts Options
	cur  atomic.Pointer[config.Config]

	mu       sync.Mutex // serialises reloads; guards lastHash
	lastHash [sha256.Size]byte
}

// New loads path and returns a watcher holding it. An invalid initial
// file is an error: there is no last good config to keep.
func New(path string, opts Options) (*Watcher, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	w := &Watcher{path: abs, opts: opts}
	data, err := config.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(data)
	if err != nil {
		return nil, fmt.Errorf("config %s:\n%w", path, err)
	}
	w.cur.Store(cfg)
	w.lastHash = sha256.Sum256(data)
	return w, nil
}

// Path is the absolute path being watched.
func (w *Watcher) Path() string { return w.path }

// Config returns the current (last good) config; never nil.
func (w *Watcher) Config() *config.Config { return w.cur.Load() }

// Reload reads the file now. It returns whether a new config was swapped in;
// an unchanged file is not a change. On error the last good config stays,
// and OnError is called as well.
func (w *Watcher) Reload() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := config.ReadFile(w.path)
	if err != nil {
		w.report(err)
		return false, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// Writers truncate before writing; an empty file is far more likely
		// a write in progress than an intended empty mesh.
		err := fmt.Errorf("config %s is empty (keeping the last good config)", w.path)
		w.report(err)
		return false, err
	}
	h := sha256.Sum256(data)
	if h == w.lastHash {
		return false, nil
	}
	cfg, err := config.Load(data)
	if err != nil {
		err = fmt.Errorf("config %s (keeping the last good config):\n%w", w.path, err)
		w.report(err)
		return false, err
	}
	w.lastHash = h
	w.cur.Store(cfg)
	if w.opts.OnChange != nil {
		w.opts.OnChange(cfg)
	}
	return true, nil
}

func (w *Watcher) report(err error) {
	if w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}

// Run watches the file until ctx ends, then returns nil (Changes, with
// Reload). It returns an error only when watching cannot start.
func (w *Watcher) Run(ctx context.Context) error {
	return Changes(ctx, w.path, w.opts.Debounce, w.opts.Clock,
		func() { w.Reload() }, //nolint:errcheck // reported through OnError
		w.report)
}

// Changes calls reload after each burst of changes to the file at path
// (quiet for debounce; 0: DefaultDebounce; clk nil: the wall clock), and
// once as soon as the watch is in place, until ctx ends; then it returns
// nil. It watches the directory rather than the file, because editors and
// config-map updates replace the file by rename, which ends a watch on the
// old inode. Errors of the watch itself go to report (nil: dropped). It
// returns an error only when watching cannot start. reload runs on the
// calling goroutine.
func Changes(ctx context.Context, path string, debounce time.Duration, clk clock.Clock, reload func(), report func(error)) error {
	return Files(ctx, func() []string { return []string{path} }, debounce, clk, reload, report)
}

// Files is Changes for a set of files that a reload may change: reload
// runs after each burst of changes to any of the files paths names, and
// paths is asked again after each reload, the watch then following the
// files it names (an identities file and the token files it names, which
// another version of it may name otherwise). A directory that cannot be
// watched when the watch starts is an error; one named later is reported
// and tried again after the next reload.
func Files(ctx context.Context, paths func() []string, debounce time.Duration, clk clock.Clock, reload func(), report func(error)) error {
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if report == nil {
		report = func(error) {}
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch: %w", err)
	}
	defer fw.Close()
	// The base names watched in each directory (absolute).
	var dirs map[string]map[string]bool
	follow := func(starting bool) error {
		want := map[string]map[string]bool{}
		for _, p := range paths() {
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
			dir := filepath.Dir(p)
			if want[dir] == nil {
				want[dir] = map[string]bool{}
			}
			want[dir][filepath.Base(p)] = true
		}
		for dir := range want {
			if dirs[dir] != nil {
				continue
			}
			if err := fw.Add(dir); err != nil {
				err = fmt.Errorf("config: watch %s: %w", dir, err)
				if starting {
					return err
				}
				report(err)
				delete(want, dir)
			}
		}
		for dir := range dirs {
			if want[dir] == nil {
				_ = fw.Remove(dir) // gone with the directory, or watched no more
			}
		}
		dirs = want
		return nil
	}
	if err := follow(true); err != nil {
		return err
	}
	// A change between the caller's read and the watch starting would be
	// missed; one reload closes that gap.
	reload()
	_ = follow(false)

	var timer clock.Timer
	var fire <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// "..data" is the symlink Kubernetes swaps for config maps.
			names := dirs[filepath.Dir(ev.Name)]
			if name := filepath.Base(ev.Name); !names[name] && (names == nil || name != "..data") {
				continue
			}
			if timer == nil {
				timer = clk.NewTimer(debounce)
			} else {
				timer.Stop()
				timer.Reset(debounce)
			}
			fire = timer.C()
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			report(fmt.Errorf("config: watch: %w", err))
		case <-fire:
			fire = nil
			reload()
			_ = follow(false)
		}
	}
}
