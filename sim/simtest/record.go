package simtest

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// Recorder sits in front of an engine (the sim, usually) on loopback and
// keeps every request body it forwards: what the engine actually received
// from a host under test. It serves HTTP/1.1 and h2c.
type Recorder struct {
	URL string // base URL

	mu       sync.Mutex
	received []received // in arrival order
}

type received struct {
	path string
	body []byte
}

// StartRecorder forwards to target (h2c: over HTTP/2 without TLS, for
// gRPC) until the test ends.
func StartRecorder(t testing.TB, target string, h2c bool) *Recorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	tr := &http.Transport{}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	rp.Transport = tr
	rec := &Recorder{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.received = append(rec.received, received{r.URL.Path, b})
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		rp.ServeHTTP(w, r)
	})}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Protocols = &p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		tr.CloseIdleConnections()
	})
	rec.URL = "http://" + ln.Addr().String()
	return rec
}

// Take returns and forgets the bodies received on path, in arrival order.
func (r *Recorder) Take(path string) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]byte
	kept := r.received[:0]
	for _, x := range r.received {
		if x.path == path {
			out = append(out, x.body)
		} else {
			kept = append(kept, x)
		}
	}
	r.received = kept
	return out
}

// TakeAll returns and forgets every body received, in arrival order.
func (r *Recorder) TakeAll() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]byte, 0, len(r.received))
	for _, x := range r.received {
		out = append(out, x.body)
	}
	r.received = nil
	return out
}
