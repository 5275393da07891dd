package gateway

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/llmesh/llmesh/internal/adminapi"
)

// AdminHandler serves the admin endpoints: /healthz (the process is up),
// /readyz (the gateway accepts traffic: 503 once it started draining) and,
// when metrics is non-nil, /metrics.
func (g *Gateway) AdminHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !g.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("draining\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux
}

// ServeAdmin serves AdminHandler(metrics) on ln until ctx ends, with the
// endpoints register adds to the same mux (e.g. Experiments.Register); a
// nil register adds none. Requests that change state pass
// adminapi.Guard: a cross-site one (as a browser sends it from another
// site) is refused with 403, and with WithAdminToken they need the token.
func (g *Gateway) ServeAdmin(ctx context.Context, ln net.Listener, metrics http.Handler, register func(*http.ServeMux)) error {
	mux := http.NewServeMux()
	mux.Handle("/", g.AdminHandler(metrics))
	if register != nil {
		register(mux)
	}
	srv := &http.Server{Handler: adminapi.Guard(mux, g.adminToken), ReadHeaderTimeout: 10 * time.Second}
	return serveUntil(ctx, srv, ln, time.Second, nil)
}
