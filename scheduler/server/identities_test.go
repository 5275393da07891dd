package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

const twoClassMesh = `
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:1]
    capacity: {max_inflight: 4}
    scheduler: {policy: fifo}
classes:
  - {name: default, priority: 10}
  - {name: premium, priority: 0}
default_class: default
`

func loadIdentities(t testing.TB, src string) *identity.Set {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gw.token"), []byte("gw-secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "identities.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := identity.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func identityClient(t *testing.T, addr, transport string, o client.Options) *client.Client {
	t.Helper()
	o.Transport, o.Timeout = transport, 2*time.Second
	c, err := client.New(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func admitClass(c *client.Client, class string) (scheduler.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Admit(ctx, scheduler.Request{Pool: "gpu", Class: class, PromptTokens: 1, MaxTokens: 1})
}

// Over mTLS, the certificate's CN picks the identity: its classes and its
// lease limit hold on both transports, and refusals are counted by
// identity and reason.
func TestIdentityByCertificate(t *testing.T) {
	pki := tlstest.New(t)
	srvTLS, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ids := loadIdentities(t, "identities:\n  - name: gw\n    certificates: [client]\n    classes: [default]\n    max_leases: 1\n")
	addr, stop := startMesh(t, twoClassMesh, server.Options{TLS: srvTLS, Identities: ids, Registry: metricsOn(t, admin)})
	defer stop()
	metrics := "http://" + admin.Addr().String() + "/metrics"
	cliTLS, err := tlsfiles.Client(pki.CA, pki.ClientCert, pki.ClientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, tr := range []string{client.TransportFramed, client.TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			c := identityClient(t, addr, tr, client.Options{TLS: cliTLS})
			if _, err := admitClass(c, "premium"); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), `identity gw may not use class "premium"`) {
				t.Fatalf("premium for gw: %v, want a rejection naming the class", err)
			}
			l, err := admitClass(c, "") // the mesh's default class: default
			if err != nil {
				t.Fatalf("default class for gw: %v", err)
			}
			if _, err := admitClass(c, "default"); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "holds 1 leases, its limit") {
				t.Fatalf("a second lease for gw: %v, want a rejection for max_leases", err)
			}
			l.Release(scheduler.Done)
			// The lease's end frees the identity's count (the release
			// travels with the next message).
			deadline := time.Now().Add(5 * time.Second)
			for {
				l, err := admitClass(c, "default")
				if err == nil {
					l.Release(scheduler.Done)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("gw's lease count never came down: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			waitMetric(t, metrics, fmt.Sprintf(`llmesh_scheduler_service_refusals_total{identity="gw",reason="class"} %d`, i+1))
		})
	}
}

// Without client certificates, a bearer token names the identity on both
// transports; a client without one, or with an unknown one, is refused
// when the file has no default entry.
func TestIdentityByToken(t *testing.T) {
	pki := tlstest.New(t)
	srvTLS, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ids := loadIdentities(t, "identities:\n  - name: gw\n    token_files: [gw.token]\n    pools: [gpu]\n    max_sessions: 1\n")
	addr, stop := startMesh(t, twoClassMesh, server.Options{TLS: srvTLS, Identities: ids, Registry: metricsOn(t, admin)})
	defer stop()
	metrics := "http://" + admin.Addr().String() + "/metrics"
	cliTLS, err := tlsfiles.Client(pki.CA, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []string{client.TransportFramed, client.TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			c := identityClient(t, addr, tr, client.Options{TLS: cliTLS, Token: "gw-secret-token"})
			l, err := admitClass(c, "premium")
			if err != nil {
				t.Fatalf("with the token: %v", err)
			}
			// A second session of gw is over its max_sessions.
			second := identityClient(t, addr, tr, client.Options{TLS: cliTLS, Token: "gw-secret-token"})
			if _, err := admitClass(second, "default"); !refused(tr, err, "holds 1 sessions, its limit") {
				t.Errorf("a second session of gw: %v, want it refused", err)
			}
			l.Release(scheduler.Done)
			for name, tc := range map[string]struct{ tok, why string }{
				"no token":      {"", "matches no identity"},
				"unknown token": {"guessed-token", "belongs to no identity"},
			} {
				c := identityClient(t, addr, tr, client.Options{TLS: cliTLS, Token: tc.tok})
				if _, err := admitClass(c, "default"); !refused(tr, err, tc.why) {
					t.Errorf("%s: %v, want it refused", name, err)
				}
			}
		})
	}
	waitMetric(t, metrics, `llmesh_scheduler_service_refusals_total{identity="gw",reason="max_sessions"} 2`)
}

// A client's age_ns cannot make its request older than its session.
func TestAgeBoundedBySession(t *testing.T) {
	addr, stop := startMesh(t, twoClassMesh, server.Options{})
	defer stop()
	c := identityClient(t, addr, client.TransportFramed, client.Options{})
	// Warm the session up, then ask with an age of an hour.
	l, err := admitClass(c, "default")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err = c.Admit(ctx, scheduler.Request{Pool: "gpu", Class: "default", PromptTokens: 1, MaxTokens: 1, Arrival: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(scheduler.Done)
	if q := l.QueueTime(); q > time.Minute {
		t.Errorf("queue time %v: the hour-old age was taken as sent", q)
	}
}

// refused says whether err is a refused session that says why: the
// status carries it over gRPC, the closing frame over the framed
// transport.
func refused(_ string, err error, why string) bool {
	return errors.Is(err, scheduler.ErrRejected) && strings.Contains(err.Error(), why)
}

// An identity's max_queued bounds its requests waiting at once: with the
// pool full and one request of it waiting, the next is refused, and the
// waiting one is admitted once the slot frees.
func TestIdentityMaxQueued(t *testing.T) {
	ids := loadIdentities(t, "default:\n  max_queued: 1\n")
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startMesh(t, strings.Replace(twoClassMesh, "max_inflight: 4", "max_inflight: 1", 1), server.Options{Identities: ids, Registry: metricsOn(t, admin)})
	defer stop()
	metrics := "http://" + admin.Addr().String() + "/metrics"
	for _, tr := range []string{client.TransportFramed, client.TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			c := identityClient(t, addr, tr, client.Options{})
			held, err := admitClass(c, "default")
			if err != nil {
				t.Fatal(err)
			}
			waiting := make(chan error, 1)
			go func() {
				l, err := admitClass(c, "default")
				if err == nil {
					l.Release(scheduler.Done)
				}
				waiting <- err
			}()
			waitMetric(t, metrics, `llmesh_scheduler_queued{class="default",pool="gpu"} 1`)
			if _, err := admitClass(c, "default"); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "has 1 requests waiting, its limit") {
				t.Fatalf("a second request waiting: %v, want a rejection for max_queued", err)
			}
			held.Release(scheduler.Done)
			if err := <-waiting; err != nil {
				t.Fatalf("the waiting request: %v", err)
			}
		})
	}
}
