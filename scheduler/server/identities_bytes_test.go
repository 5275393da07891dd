package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

// An identity's max_bytes bounds the bytes of the Starts its leases hold
// at once (ids, affinity keys, block hashes): a Start past it is refused
// and counted, and the bytes come back when the lease ends.
func TestIdentityMaxBytes(t *testing.T) {
	ids := loadIdentities(t, "identities:\n  - name: gw\n    token_files: [gw.token]\n    max_bytes: 300\n")
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startMesh(t, twoClassMesh, server.Options{Identities: ids, Registry: metricsOn(t, admin)})
	defer stop()
	metricsURL := "http://" + admin.Addr().String() + "/metrics"
	admit := func(c *client.Client) (scheduler.Lease, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// 64 of overhead and a 150-byte affinity key: one fits in 300, two do not.
		return c.Admit(ctx, scheduler.Request{Pool: "gpu", Class: "default", PromptTokens: 1, MaxTokens: 1, Affinity: strings.Repeat("a", 150)})
	}
	refusals := 0
	for _, tr := range []string{client.TransportFramed, client.TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			c := identityClient(t, addr, tr, client.Options{Token: "gw-secret-token"})
			l, err := admit(c)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := admit(c); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "its limit of 300") {
				t.Fatalf("a second 214-byte Start: %v, want refused for max_bytes", err)
			}
			refusals++
			// Counted (the retries below may add to it).
			waitMetric(t, metricsURL, fmt.Sprintf(`llmesh_scheduler_service_refusals_total{identity="gw",reason="max_bytes"} %d`, refusals))
			l.Release(scheduler.Done)
			deadline := time.Now().Add(5 * time.Second)
			for {
				l, err := admit(c)
				if err == nil {
					l.Release(scheduler.Done)
					break
				}
				refusals++
				if time.Now().After(deadline) {
					t.Fatalf("gw's bytes never came back: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	if _, err := identity.Parse([]byte("identities:\n  - name: x\n    certificates: [x]\n    max_bytes: -1\n"), ""); err == nil ||
		!strings.Contains(err.Error(), "identities[0].max_bytes: -1 must not be negative") {
		t.Errorf("a negative max_bytes: %v", err)
	}
}
