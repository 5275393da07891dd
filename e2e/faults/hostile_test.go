package faults

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/sim/simtest"
)

// classMesh is a mesh whose priority header is trusted only from trusted.
func classMesh(simHostPort, trusted string) string {
	return `listeners:
  - name: main
    address: 127.0.0.1:0
    routes:
      - {name: api, match: {path_prefix: /v1/}, pool: sim}
pools:
  - {name: sim, protocol: openai, endpoints: [` + simHostPort + `], capacity: {max_inflight: 8}, scheduler: {policy: priority}}
classes:
  - {name: interactive, priority: 0}
  - {name: batch, priority: 10}
default_class: batch
classification:
  priority_header:
    name: x-llmesh-class
    trusted_sources: [` + trusted + `]
`
}

// TestPriorityHeaderSpoofing sends a class claim from 127.0.0.1 through the
// gateway: ignored (default class) when the config trusts only another
// network, even with forwarded-for headers naming that network; honoured
// when it trusts loopback.
func TestPriorityHeaderSpoofing(t *testing.T) {
	s := simtest.Start(t)
	simAddr := strings.TrimPrefix(s.HTTPURL, "http://")
	for _, tc := range []struct {
		trusted, want string
	}{
		{"10.0.0.0/8", "batch"},
		{"127.0.0.1/32", "interactive"},
	} {
		t.Run(tc.trusted, func(t *testing.T) {
			cfg, err := config.Load([]byte(classMesh(simAddr, tc.trusted)))
			if err != nil {
				t.Fatal(err)
			}
			cls, err := exchange.NewClassifierFromConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			gcfg, err := gateway.ConfigFromMesh(cfg, "")
			if err != nil {
				t.Fatal(err)
			}
			sched := newScheduler(t, "priority", 8)
			rec := newRecorder()
			gw := startGateway(t, gcfg, gateway.WithAdmitter(sched), gateway.WithClassifier(cls), gateway.WithRecorder(rec))
			res, err := send(context.Background(), gw, completion(s.Model, 4, "let me in first"), map[string]string{
				"x-llmesh-class": "interactive",
				// Naming a trusted address does not make the peer trusted.
				"x-forwarded-for": "10.1.2.3", "x-real-ip": "10.1.2.3",
			})
			if err != nil {
				t.Fatal(err)
			}
			readAll(res.Body)
			res.Body.Close()
			r := rec.next(t)
			if r.Class != tc.want {
				t.Errorf("class %q, want %q", r.Class, tc.want)
			}
			if r.Outcome != 0 || !r.OK() {
				t.Errorf("request failed: %v", r.Err)
			}
		})
	}
}

// TestOversizedHeadersRefused sends 2 MiB of request headers: the gateway
// answers 431 without reading further, and keeps serving.
func TestOversizedHeadersRefused(t *testing.T) {
	s := simtest.Start(t)
	gw := startGateway(t, gateway.Config{Pools: pools(s.HTTPURL, "")})
	res, err := send(context.Background(), gw, completion(s.Model, 4, "big headers"), map[string]string{"x-junk": strings.Repeat("a", 2<<20)})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status %d, want 431", res.StatusCode)
	}
	res, err = send(context.Background(), gw, completion(s.Model, 4, "small headers"), nil)
	if err != nil {
		t.Fatal(err)
	}
	readAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d after the oversized request, want 200", res.StatusCode)
	}
}

// TestHugeSSEEventBoundedMemory has an upstream send one 48 MiB SSE event.
// The gateway passes every byte to the client but must not hold the event
// in memory: the observer gives up on it past its 1 MiB bound (and says so
// in the observation) while the bytes stream through.
func TestHugeSSEEventBoundedMemory(t *testing.T) {
	const size = 48 << 20
	chunk := strings.Repeat("x", 64<<10)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"text":"`)
		for n := 0; n < size; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "\"}]}\n\ndata: [DONE]\n\n")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { up.Close() })
	rec := newRecorder()
	gw := startGateway(t, gateway.Config{Pools: pools("http://"+ln.Addr().String(), "")}, gateway.WithRecorder(rec))

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(2 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		}
	}()
	res, err := send(context.Background(), gw, `{"model":"m","prompt":"p","stream":true}`, nil)
	if err != nil {
		close(stop)
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	close(stop)
	<-sampled
	if err != nil || n < size {
		t.Fatalf("client read %d bytes (%v), want the whole %d-byte event", n, err, size)
	}
	growth := int64(peak.Load()) - int64(base)
	t.Logf("streamed %d bytes; heap in use grew by at most %.1f MiB", n, float64(growth)/(1<<20))
	if growth > size/2 {
		t.Errorf("heap grew by %.1f MiB while streaming a %d MiB event: the event is being buffered", float64(growth)/(1<<20), size>>20)
	}
	r := rec.next(t)
	if r.ErrorKind != exchange.ErrorEventTooLarge {
		t.Errorf("observation error %q (%s), want the event-too-large kind", r.ErrorKind, r.Error)
	}
}
