package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/testkit/wait"
)

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// slowBody opens a connection to addr and sends a POST whose
// Content-Length is size, with all but the last byte of the body; it
// returns the connection (the caller closes it) and a channel with the
// response status (0 when the connection ended without one).
func slowBody(t *testing.T, addr string, size int, chunk []byte) (net.Conn, <-chan int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	status := make(chan int, 1)
	go func() {
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			status <- 0
			return
		}
		res.Body.Close()
		status <- res.StatusCode
	}()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
	go func() {
		for left := size - 1; left > 0; {
			n := min(left, len(chunk))
			if _, err := c.Write(chunk[:n]); err != nil {
				return // refused: the gateway answered and closed
			}
			left -= n
		}
	}()
	return c, status
}

// TestSlowBodiesBoundedByBudget is the slow-body probe: 20 clients each
// send all but the last byte of a 15 MiB body and stall. Bodies past the
// budget are refused at once (429), the held ones are dropped at the body
// timeout (400) and their budget given back, and the gateway's heap grows
// by less than 256 MiB meanwhile (unbounded, it held all 20: 300 MiB and
// more).
func TestSlowBodiesBoundedByBudget(t *testing.T) {
	up := httptest.NewServer(sseUpstream(1, 0))
	defer up.Close()
	const size, clients = 15 << 20, 20
	g, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}},
		Limits: Limits{BodyTimeout: 3 * time.Second}})
	addr := strings.TrimPrefix(gw, "http://")
	before := heapInUse()
	chunk := make([]byte, 256<<10)
	for i := range chunk {
		chunk[i] = ' '
	}
	statuses := make([]<-chan int, clients)
	for i := range clients {
		c, st := slowBody(t, addr, size, chunk)
		defer c.Close()
		statuses[i] = st
	}
	// Wait until every body is either refused or held.
	// Not holding in time is no failure of its own: the statuses below say
	// which bodies went wrong. The heap is sampled at each check.
	var peak uint64
	_ = wait.Poll{Timeout: 10 * time.Second, Interval: 50 * time.Millisecond}.Check("every body refused or held", func() error {
		peak = max(peak, heapInUse()-min(before, heapInUse()))
		b := g.BufferedBodyBytes()
		if b > DefaultBodyBudget {
			t.Fatalf("buffered %d body bytes, over the budget %d", b, DefaultBodyBudget)
		}
		if b >= DefaultBodyBudget-size {
			return nil
		}
		return fmt.Errorf("%d body bytes buffered", b)
	})
	got := map[int]int{}
	for _, st := range statuses {
		got[<-st]++
	}
	peak = max(peak, heapInUse()-min(before, heapInUse()))
	held := DefaultBodyBudget / (size + 1)
	if got[http.StatusTooManyRequests] != clients-held || got[http.StatusBadRequest] != held {
		t.Errorf("statuses %v, want %d refused (429) past the budget and %d timed out (400)", got, clients-held, held)
	}
	if g.BufferedBodyBytes() != 0 {
		t.Errorf("%d body bytes still buffered after every request ended", g.BufferedBodyBytes())
	}
	t.Logf("%d slow %d MiB bodies: statuses %v, gateway heap grew by at most %d MiB", clients, size>>20, got, peak>>20)
	if peak >= 256<<20 {
		t.Errorf("heap grew by %d MiB under slow bodies, want < 256 MiB", peak>>20)
	}
}

// endlessSSE streams events as fast as the client takes them until the
// request ends.
func endlessSSE() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		ev := []byte("data: {\"choices\":[{\"index\":0,\"text\":\"" + strings.Repeat("x", 4000) + "\"}]}\n\n")
		f := w.(http.Flusher)
		for r.Context().Err() == nil {
			if _, err := w.Write(ev); err != nil {
				return
			}
			f.Flush()
		}
	}
}

// TestStalledReaderReleasesSlot: a client that never reads its stream
// loses it once a write toward it has waited the client write timeout,
// and its scheduler slot goes back (unbounded, the slot was held until the
// client closed).
func TestStalledReaderReleasesSlot(t *testing.T) {
	up := httptest.NewServer(endlessSSE())
	defer up.Close()
	fifo, _ := policy.Lookup("fifo")
	sched, err := scheduler.New(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "p", MaxInflight: 1, Policy: fifo}},
		Classes: []scheduler.ClassConfig{{Name: "default"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}},
		Limits: Limits{ClientWriteTimeout: 300 * time.Millisecond}}, WithAdmitter(sched))
	c, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := completion("m", 1000000)
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	inflight := func() int { return sched.Stats()[0].InFlight }
	start := time.Now()
	wait.Until(t, "the stream admitted", func() bool { return inflight() != 0 })
	if inflight() != 1 {
		t.Fatalf("%d streams admitted, want 1", inflight())
	}
	wait.Poll{Interval: 20 * time.Millisecond}.Until(t, "the slot freed after the client stopped reading (client write timeout 300ms)",
		func() bool { return inflight() == 0 })
	t.Logf("a client that never reads released its slot after %v", time.Since(start).Round(time.Millisecond))
	// The slot serves the next client.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res := post(t, ctx, gw+"/v1/completions", completion("m", 1))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("next client: status %d", res.StatusCode)
	}
}

// TestConnsPerClientLimited: connections from one address beyond the
// limit are closed on accept; the others serve.
func TestConnsPerClientLimited(t *testing.T) {
	up := httptest.NewServer(sseUpstream(1, 0))
	defer up.Close()
	g, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}, Limits: Limits{MaxConnsPerClient: 3}})
	addr := strings.TrimPrefix(gw, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	conns[3].SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conns[3].Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("4th connection: read %d, %v; want it closed", n, err)
	}
	if g.refusedConns.Load() != 1 {
		t.Fatalf("refused %d connections, want 1", g.refusedConns.Load())
	}
	body := completion("m", 1)
	fmt.Fprintf(conns[0], "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	res, err := http.ReadResponse(bufio.NewReader(conns[0]), nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("1st connection: %v %v", res, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	// A closed connection frees its place.
	conns[1].Close()
	wait.Poll{Interval: 10 * time.Millisecond}.UntilNil(t, "a connection served after one of the three closed", func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return wait.Stop(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		res.Body.Close()
		return nil
	})
}
