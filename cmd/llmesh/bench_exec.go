package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/bench/workload"
)

// Exec A/B arms in real time: `bench ab --a exec:PATH,mesh=FILE` starts, for
// every run of the arm, that build's own simulated engine (`PATH sim`) and
// gateway (`PATH gateway --config`) as processes on random loopback ports,
// as embedded: does in-process with this build, and stops them after the
// run. The mesh file is the same as an embedded: arm's: ${LLMESH_SIM} and
// ${LLMESH_SIM_GRPC} stand for the engine the arm starts.

var _ = addABTargetResolver("exec", resolveExecArm)

// execReadyTimeout bounds how long one process of an arm may take to serve.
const execReadyTimeout = 60 * time.Second

// execArm is one exec: arm of a real-time A/B.
type execArm struct {
	*benchArm
	label   string
	simArgs []string // profile, model and seed of the workload
	log     io.Writer
}

func resolveExecArm(arg, label string, w *workload.Workload, stderr io.Writer) (ab.Target, error) {
	arm, err := validateArm("", "exec:"+arg)
	if err != nil {
		return nil, err
	}
	if arm.MeshConfig == nil {
		return nil, fmt.Errorf("exec:%s: real time needs the gateway's mesh: exec:PATH,mesh=FILE", arg)
	}
	if !bytes.Contains(arm.MeshRaw, []byte(simHTTPPlaceholder)) && !bytes.Contains(arm.MeshRaw, []byte(simGRPCPlaceholder)) {
		return nil, fmt.Errorf("exec: %s: no pool points at the simulated engine: use %s (HTTP host:port) or %s (gRPC host:port) in its endpoints", arm.Mesh, simHTTPPlaceholder, simGRPCPlaceholder)
	}
	if label == "" {
		label = strings.TrimSuffix(filepath.Base(arm.Mesh), filepath.Ext(arm.Mesh)) + "@" + arm.Exe
	}
	e := &execArm{benchArm: arm, label: label, log: stderr}
	if w != nil {
		if w.Spec.Profile != "" {
			e.simArgs = append(e.simArgs, "--profile", w.Spec.Profile)
		}
		if w.Spec.Model != "" {
			e.simArgs = append(e.simArgs, "--served-model-name", w.Spec.Model)
		}
		e.simArgs = append(e.simArgs, "--seed", strconv.FormatUint(uint64(w.Spec.Seed), 10))
	}
	return ab.Func{Label: label, Start: e.start}, nil
}

// child is one started process of an arm.
type child struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

// lockedBuffer is the output of a child, written by its copying goroutine
// and read when it fails.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startChild starts exe with args; wait (owned by the goroutine started
// here) closes done when the process ends.
func startChild(exe string, args ...string) (*child, error) {
	c := &child{cmd: exec.Command(exe, args...), out: &lockedBuffer{}, done: make(chan struct{})}
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// stop asks the process to end (SIGTERM, so the gateway drains) and kills
// it when it has not ended within grace.
func (c *child) stop(grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// waitHTTP polls url until it answers 200, the process ends, or the
// deadline passes.
func (c *child) waitHTTP(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, execReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("exited before serving %s (%v):\n%s", url, c.err, lastBytes(c.out.String(), 2000))
		case <-ctx.Done():
			return fmt.Errorf("not serving %s after %v:\n%s", url, execReadyTimeout, lastBytes(c.out.String(), 2000))
		case <-tick.C:
		}
	}
}

// freePorts reserves n loopback addresses and releases them for the
// processes to bind.
func freePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// start brings up the arm's engine and gateway for one run and returns the
// gateway's address and a stop function that ends both.
func (e *execArm) start(ctx context.Context) (string, func(), error) {
	fail := func(err error) (string, func(), error) {
		return "", nil, fmt.Errorf("%s: %w", e.label, err)
	}
	addrs, err := freePorts(4)
	if err != nil {
		return fail(err)
	}
	simHTTP, simGRPC, data, admin := addrs[0], addrs[1], addrs[2], addrs[3]
	dir, err := os.MkdirTemp("", "llmesh-abexec-*")
	if err != nil {
		return fail(err)
	}
	var children []*child
	stop := func() {
		for i := len(children) - 1; i >= 0; i-- {
			children[i].stop(5 * time.Second)
		}
		_ = os.RemoveAll(dir)
	}
	simArgs := append([]string{"sim", "--listen", simHTTP}, e.simArgs...)
	if bytes.Contains(e.MeshRaw, []byte(simGRPCPlaceholder)) {
		simArgs = append(simArgs, "--grpc-listen", simGRPC)
	}
	sim, err := startChild(e.Exe, simArgs...)
	if err != nil {
		stop()
		return fail(fmt.Errorf("sim: %w", err))
	}
	children = append(children, sim)
	if err := sim.waitHTTP(ctx, "http://"+simHTTP+"/health"); err != nil {
		stop()
		return fail(fmt.Errorf("%s sim: %w", e.Exe, err))
	}
	meshPath := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(meshPath, resolveMesh(e.MeshRaw, simHTTP, simGRPC), 0o644); err != nil {
		stop()
		return fail(err)
	}
	gw, err := startChild(e.Exe, "gateway", "--config", meshPath, "--listen", data, "--admin", admin, "--drain", "2s")
	if err != nil {
		stop()
		return fail(fmt.Errorf("gateway: %w", err))
	}
	children = append(children, gw)
	if err := gw.waitHTTP(ctx, "http://"+admin+"/readyz"); err != nil {
		stop()
		return fail(fmt.Errorf("%s gateway --config %s: %w", e.Exe, e.Mesh, err))
	}
	return data, stop, nil
}
