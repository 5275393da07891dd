package server_test

import (
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
)

const benchMesh = `
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:1]
    capacity: {max_inflight: 100000}
    scheduler: {policy: fifo}
classes:
  - {name: default, priority: 0}
`

// BenchmarkAuthentication is what authentication costs the service's
// admissions: the same admit-and-release loop through the real service
// on loopback (framed transport, 8 proxies' worth of concurrency per
// processor) over plaintext, TLS, mTLS with the identity taken from the
// certificate, and a bearer token with its identity (plaintext and over
// TLS). It reports admissions per second and the p99 of one admission.
// With -count N the modes take turns, round after round.
func BenchmarkAuthentication(b *testing.B) {
	pki := tlstest.New(b)
	serverTLS := func(ca string) *tls.Config {
		c, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, ca)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	clientTLS := func(cert, key string) *tls.Config {
		c, err := tlsfiles.Client(pki.CA, cert, key, "")
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	byCert := "identities:\n  - name: gw\n    certificates: [client]\n    classes: [default]\n"
	byToken := "identities:\n  - name: gw\n    token_files: [gw.token]\n    classes: [default]\n"
	for _, m := range []struct {
		name string
		srv  func() server.Options
		cli  func() client.Options
	}{
		{"plaintext", func() server.Options { return server.Options{} }, func() client.Options { return client.Options{} }},
		{"tls", func() server.Options { return server.Options{TLS: serverTLS("")} },
			func() client.Options { return client.Options{TLS: clientTLS("", "")} }},
		{"mtls", func() server.Options {
			return server.Options{TLS: serverTLS(pki.CA), Identities: loadIdentities(b, byCert)}
		}, func() client.Options { return client.Options{TLS: clientTLS(pki.ClientCert, pki.ClientKey)} }},
		{"token", func() server.Options { return server.Options{Identities: loadIdentities(b, byToken)} },
			func() client.Options { return client.Options{Token: "gw-secret-token"} }},
		{"tls+token", func() server.Options {
			return server.Options{TLS: serverTLS(""), Identities: loadIdentities(b, byToken)}
		}, func() client.Options { return client.Options{TLS: clientTLS("", ""), Token: "gw-secret-token"} }},
	} {
		b.Run(m.name, func(b *testing.B) {
			addr, stop := startMesh(b, benchMesh, m.srv())
			defer stop()
			o := m.cli()
			o.Transport, o.Timeout = client.TransportFramed, 2*time.Second
			c, err := client.New(addr, o)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			req := scheduler.Request{Pool: "gpu", Class: "default", PromptTokens: 1, MaxTokens: 1}
			if l, err := c.Admit(ctx, req); err != nil { // connect outside the timing
				b.Fatal(err)
			} else {
				l.Release(scheduler.Done)
			}
			var (
				mu  sync.Mutex
				all []time.Duration
			)
			b.SetParallelism(8)
			b.ResetTimer()
			begin := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					t0 := time.Now()
					l, err := c.Admit(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t0))
					l.Release(scheduler.Done)
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
			elapsed := time.Since(begin)
			b.StopTimer()
			if len(all) > 0 {
				slices.Sort(all)
				b.ReportMetric(float64(len(all))/elapsed.Seconds(), "admits/s")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}
