package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/envoyhost"
)

// sdkHost runs the real llmesh filter .so under the C++ Envoy host
// (testkit/envoyhost, driven mode): the SDK's own Go shim, the cgo boundary
// and the host's port of Envoy's golang filter and filter manager. The
// test plays Envoy's codec and router: it sends the client's request as
// steps, sends what the filter let through to the upstream the filter
// chose (the override host, else the pool's upstream), and feeds the
// upstream's response back as it arrives. The .so is the product filter
// built with recorder taps (testkit/conformance/recso): its Records
// and Admit calls come back over a pipe.
//
// Goroutines: the driver's reader hands events to each stream's channel;
// taps reads the .so's pipe; each do runs its stream's upstream exchange
// in one goroutine that it waits for.
type sdkHost struct {
	d     *envoyhost.Driver
	up    upstreams
	rec   *records
	count *sdkAdmissions
	n     atomic.Int64
	h1    *http.Client
	h2c   *http.Client
}

// sdkBinaries are the host and the tapped .so: LLMESH_ENVOYHOST and
// LLMESH_CONFORMANCE_SO name prebuilt ones; otherwise both are built once
// per test binary (the host also cached by its sources). A missing C++
// compiler or cgo skips.
func sdkBinaries(t *testing.T) (host, so string) {
	t.Helper()
	binOnce.Do(func() { binHost, binSO, binSkip, binErr = buildSDKBinaries() })
	if binSkip != "" {
		t.Skip(binSkip)
	}
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binHost, binSO
}

var (
	binOnce                 sync.Once
	binHost, binSO, binSkip string
	binErr                  error
)

func buildSDKBinaries() (host, so, skip string, err error) {
	host = os.Getenv("LLMESH_ENVOYHOST")
	if host == "" {
		host, err = envoyhost.BuildHost()
		if errors.Is(err, envoyhost.ErrNoCompiler) {
			return "", "", fmt.Sprintf("SKIP: %v: the table runs through the fake SDK only", err), nil
		}
		if err != nil {
			return "", "", "", err
		}
	}
	so = os.Getenv("LLMESH_CONFORMANCE_SO")
	if so == "" {
		out, cerr := exec.Command("go", "env", "CGO_ENABLED").Output()
		if cerr != nil || strings.TrimSpace(string(out)) != "1" {
			return "", "", fmt.Sprintf("SKIP: cgo is off (go env CGO_ENABLED: %q %v): no llmesh filter .so to load", strings.TrimSpace(string(out)), cerr), nil
		}
		dir, derr := os.MkdirTemp("", "llmesh-conformance-so-")
		if derr != nil {
			return "", "", "", derr
		}
		soDir = dir
		so, err = envoyhost.BuildSO("./testkit/conformance/recso", dir)
	}
	return host, so, "", err
}

// soDir is the temporary directory of a .so the test built, removed by
// TestMain.
var soDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if soDir != "" {
		_ = os.RemoveAll(soDir)
	}
	os.Exit(code)
}

func startSDK(t *testing.T, up upstreams) *sdkHost {
	t.Helper()
	hostBin, so := sdkBinaries(t)
	_, js := loadMesh(t, up)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	d, err := envoyhost.Start(hostBin, so, envoyhost.Options{
		Env:    []string{"LLMESH_RECORDS=/dev/fd/3"},
		Files:  []*os.File{pw},
		Stderr: &lockedWriter{w: &stderr},
	})
	_ = pw.Close()
	if err != nil {
		_ = pr.Close()
		t.Fatal(err)
	}
	h := &sdkHost{d: d, up: up, rec: newRecords(), count: newSDKAdmissions()}
	tapsDone := make(chan struct{})
	go func() {
		defer close(tapsDone)
		h.taps(t, pr)
	}()
	t.Cleanup(func() {
		rep, err := d.Close()
		<-tapsDone
		_ = pr.Close()
		checkHostReport(t, rep, err, stderr.String())
	})
	if err := d.Config(`{"listener": "main", "mesh": ` + js + `}`); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, n := range d.TakeNotes() {
		t.Fatalf("the host refused the config: %s: %s", n.Kind, n.Details)
	}
	h.h1 = &http.Client{Timeout: 30 * time.Second}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h.h2c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p}}
	t.Cleanup(func() { h.h1.CloseIdleConnections(); h.h2c.CloseIdleConnections() })
	return h
}

// checkHostReport fails the test for what the host saw over the whole
// table: violations of Envoy's rules, config errors, panics, requests or
// configs Go never finalized.
func checkHostReport(t *testing.T, rep []byte, exit error, stderr string) {
	var r struct {
		Violations   []string         `json:"violations"`
		Failures     []string         `json:"failures"`
		ConfigErrors []string         `json:"config_errors"`
		Stats        map[string]int64 `json:"stats"`
		Objects      struct {
			RequestsCreated int64 `json:"requests_created"`
			RequestsFreed   int64 `json:"requests_freed"`
			ConfigsCreated  int64 `json:"configs_created"`
			ConfigsFreed    int64 `json:"configs_freed"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(rep, &r); err != nil {
		t.Errorf("the host's report: %v (exit: %v)\n%s\nstderr:\n%s", err, exit, rep, stderr)
		return
	}
	var p []string
	p = append(p, r.Violations...)
	p = append(p, r.Failures...)
	p = append(p, r.ConfigErrors...)
	if n := r.Stats["golang.panic_error"] + r.Stats["llmesh.panics"]; n > 0 {
		p = append(p, fmt.Sprintf("%d panics", n))
	}
	if o := r.Objects; o.RequestsFreed != o.RequestsCreated || o.ConfigsFreed != o.ConfigsCreated {
		p = append(p, fmt.Sprintf("finalized %d of %d requests, %d of %d configs", o.RequestsFreed, o.RequestsCreated, o.ConfigsFreed, o.ConfigsCreated))
	}
	if exit != nil && len(p) == 0 {
		p = append(p, "exit: "+exit.Error())
	}
	if len(p) > 0 {
		t.Errorf("the Envoy host over the table:\n  %s\nstderr:\n%s", strings.Join(p, "\n  "), stderr)
	}
}

// taps reads the .so's Records and admissions.
func (h *sdkHost) taps(t *testing.T, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for sc.Scan() {
		var l struct {
			Kind   string           `json:"kind"`
			Record *exchange.Record `json:"record"`
			Err    string           `json:"err"`
			Class  string           `json:"class"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Errorf("the .so wrote %q: %v", sc.Bytes(), err)
			continue
		}
		switch l.Kind {
		case "record":
			h.rec.add(recOf(l.Record))
		case "admit":
			h.count.ch <- struct{}{}
		case "queued":
			h.count.queued <- l.Class
		default:
			t.Errorf("the .so wrote %q", sc.Bytes())
		}
	}
}

func (h *sdkHost) name() string          { return "envoy-sdk" }
func (h *sdkHost) recs() *records        { return h.rec }
func (h *sdkHost) adm() admissionWatcher { return h.count }

// sdkAdmissions is admissions for the .so's scheduler, from its taps.
type sdkAdmissions struct {
	ch     chan struct{}
	queued chan string
}

func newSDKAdmissions() *sdkAdmissions {
	return &sdkAdmissions{ch: make(chan struct{}, 1024), queued: make(chan string, 1024)}
}

func (a *sdkAdmissions) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-a.ch:
		case <-deadline.C:
			t.Fatalf("only %d of %d requests reached the scheduler", i, n)
		}
	}
}

func (a *sdkAdmissions) waitQueued(t *testing.T, class string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case c := <-a.queued:
			if c == class {
				return
			}
		case <-deadline.C:
			t.Fatalf("no %s request queued after 10s", class)
		}
	}
}

func (a *sdkAdmissions) drain() {
	for {
		select {
		case <-a.ch:
		case <-a.queued:
		default:
			return
		}
	}
}

// streamTimeout bounds one stream in the host: a row that hangs fails.
const streamTimeout = 20 * time.Second

// do drives one stream as Envoy's codec and router would.
func (h *sdkHost) do(t *testing.T, r request) response {
	t.Helper()
	name := fmt.Sprintf("r%d", h.n.Add(1))
	events, err := h.d.Open(name)
	if err != nil {
		t.Errorf("envoy-sdk: %v", err)
		return response{Reset: true}
	}
	defer releaseStarted(&r)
	defer func() {
		for _, n := range h.d.TakeNotes() {
			t.Errorf("envoy-sdk host %s: %s", n.Kind, n.Details)
		}
	}()
	head := []string{name, "headers"}
	if len(r.body) == 0 {
		head = append(head, "end")
	}
	head = append(head, ":method", "POST", ":path", envoyhost.Quote(r.path), ":scheme", "http", ":authority", "llm.test")
	for i := 0; i+1 < len(r.headers); i += 2 {
		head = append(head, envoyhost.Quote(strings.ToLower(r.headers[i])), envoyhost.Quote(r.headers[i+1]))
	}
	steps := []string{strings.Join(head, " ")}
	if len(r.body) > 0 {
		steps = append(steps, name+" data end hex:"+hex.EncodeToString(r.body))
	}
	if err := h.d.Send(steps...); err != nil {
		t.Errorf("envoy-sdk: %v", err)
		return response{Reset: true}
	}

	var (
		out       response
		respHdr   = http.Header{}
		upHdr     envoyhost.Event
		upBody    []byte
		upStarted bool
		reads     int
		ctx, stop = context.WithCancel(context.Background())
		pumped    = make(chan struct{})
		pumping   bool
	)
	defer stop()
	left := make(chan struct{})
	if r.queued != nil {
		// The client goes away while the filter holds the request.
		go func() {
			defer close(left)
			r.queued()
			_ = h.d.Send(name + " reset")
		}()
	} else {
		close(left)
	}
	timeout := time.NewTimer(streamTimeout)
	defer timeout.Stop()
loop:
	for {
		var e envoyhost.Event
		select {
		case e = <-events:
		case <-timeout.C:
			t.Errorf("envoy-sdk: stream %s did not end within %v (%+v)", name, streamTimeout, out)
			if out.Reset {
				// Not even a reset ended it: leave it to the host's report.
				stop()
				if pumping {
					<-pumped
				}
				return out
			}
			_ = h.d.Send(name + " reset")
			out.Reset = true
			timeout.Reset(streamTimeout)
			continue
		}
		switch {
		case e.Kind == "ended":
			break loop
		case e.Side == "upstream" && e.Kind == "headers":
			upHdr, upStarted = e, true
		case e.Side == "upstream" && e.Kind == "data":
			upBody = append(upBody, e.Data...)
		case e.Side == "downstream" && e.Kind == "headers":
			for _, kv := range e.Headers {
				respHdr.Add(kv[0], kv[1])
			}
			out.Status, _ = strconv.Atoi(respHdr.Get(":status"))
			out.ContentType, out.RetryAfter = respHdr.Get("Content-Type"), respHdr.Get("Retry-After")
			grpcTrailers(&out, respHdr)
		case e.Side == "downstream" && e.Kind == "data":
			out.Body = append(out.Body, e.Data...)
			reads++
			if reads == 1 {
				releaseStarted(&r)
			}
			if r.cancelAfter > 0 && reads == r.cancelAfter {
				out.Cancelled = true
				_ = h.d.Send(name + " reset")
			}
		case e.Side == "downstream" && e.Kind == "trailers":
			tr := http.Header{}
			for _, kv := range e.Headers {
				tr.Add(kv[0], kv[1])
			}
			grpcTrailers(&out, respHdr, tr)
		case e.Side == "downstream" && e.Kind == "reset":
			out.Reset = true
		}
		if upStarted && (e.Side == "upstream" && e.End) && !pumping {
			pumping = true
			go func() {
				defer close(pumped)
				h.exchange(ctx, t, name, r.grpc(), upHdr, upBody)
			}()
		}
	}
	// Envoy's router resets the upstream request when the stream ends.
	stop()
	if pumping {
		<-pumped
	}
	<-left
	if r.queued != nil {
		out.Cancelled = true
	}
	if err := h.d.Drop(name); err != nil {
		t.Errorf("envoy-sdk: %v", err)
	}
	return out
}

// exchange sends what the filter let through to the upstream and feeds
// its response to the stream, read by read.
func (h *sdkHost) exchange(ctx context.Context, t *testing.T, name string, grpc bool, head envoyhost.Event, body []byte) {
	c, base := h.h1, h.up.http
	if grpc {
		c, base = h.h2c, h.up.grpc
	}
	if head.OverrideHost != "" {
		base = "http://" + head.OverrideHost
	}
	hdr := http.Header{}
	for _, kv := range head.Headers {
		if !strings.HasPrefix(kv[0], ":") {
			hdr.Add(kv[0], kv[1])
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+head.Header(":path"), bytes.NewReader(body))
	if err != nil {
		t.Errorf("envoy-sdk: %v", err)
		return
	}
	req.Header = hdr
	up, err := c.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			// A connect failure: the router answers for the engine.
			_ = h.d.Send("up " + name + " reset")
		}
		return
	}
	defer up.Body.Close()
	steps := []string{"up", name, "headers", ":status", strconv.Itoa(up.StatusCode)}
	for _, k := range sortedKeys(up.Header) {
		for _, v := range up.Header[k] {
			steps = append(steps, envoyhost.Quote(strings.ToLower(k)), envoyhost.Quote(v))
		}
	}
	if err := h.d.Send(strings.Join(steps, " ")); err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := up.Body.Read(buf)
		if n > 0 {
			if err := h.d.Send("up " + name + " data hex:" + hex.EncodeToString(buf[:n])); err != nil {
				return
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			if ctx.Err() == nil {
				_ = h.d.Send("up " + name + " reset")
			}
			return
		}
	}
	if len(up.Trailer) > 0 {
		tr := []string{"up", name, "trailers"}
		for _, k := range sortedKeys(up.Trailer) {
			for _, v := range up.Trailer[k] {
				tr = append(tr, envoyhost.Quote(strings.ToLower(k)), envoyhost.Quote(v))
			}
		}
		_ = h.d.Send(strings.Join(tr, " "))
		return
	}
	_ = h.d.Send("up " + name + " data end")
}

func sortedKeys(h http.Header) []string {
	var ks []string
	for k := range h {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// lockedWriter serializes writes from the process's stderr copier and
// reads in Cleanup.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
