package controlproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/config/watch"
	"github.com/llmesh/llmesh/control"
)

// Config is what `llmesh control` runs. ConfigPath is required.
type Config struct {
	control.Options
	// ConfigPath is the mesh config file, watched for changes.
	ConfigPath string
	// Debounce is the file watcher's quiet period; 0 is
	// watch.DefaultDebounce.
	Debounce time.Duration
}

// Plane is a control plane serving one watched mesh config file.
type Plane struct {
	// Server is the xDS server; its admin API is what Serve's admin
	// listener serves.
	Server  *control.Server
	watcher *watch.Watcher
}

// New loads the config file and builds the first snapshot. An invalid
// initial file is an error (there is no last good config to serve).
func New(c Config) (*Plane, error) {
	if c.ConfigPath == "" {
		return nil, errors.New("control: Config.ConfigPath is required")
	}
	p := &Plane{}
	w, err := watch.New(c.ConfigPath, watch.Options{
		Debounce: c.Debounce,
		Clock:    c.Clock,
		// p.Server is set before the watcher's goroutine starts.
		OnChange: func(cfg *config.Config) { _ = p.Server.Reload(cfg) }, // recorded by Reload
		OnError:  func(err error) { p.Server.Reject(err) },
	})
	if err != nil {
		return nil, err
	}
	p.watcher = w
	if p.Server, err = control.New(w.Config(), c.Options); err != nil {
		return nil, err
	}
	return p, nil
}

// Serve runs the xDS server on xdsLn, the admin HTTP server on adminLn
// (nil for none) and the config watcher, until ctx ends or one of them
// fails. It closes the listeners and returns after every goroutine it
// started has stopped; the error is nil on a clean shutdown.
func (p *Plane) Serve(ctx context.Context, xdsLn, adminLn net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	var wg sync.WaitGroup
	goRun := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errc <- err
			}
		}()
	}
	goRun(func() error { return p.Server.Serve(ctx, xdsLn) })
	var hs *http.Server
	if adminLn != nil {
		hs = &http.Server{Handler: p.Server.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
		goRun(func() error {
			if err := hs.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("control: admin: %w", err)
			}
			return nil
		})
	}
	goRun(func() error { return p.watcher.Run(ctx) })

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	if hs != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		hs.Shutdown(sctx) //nolint:errcheck // closing anyway
		scancel()
	}
	wg.Wait()
	return err
}
