package epp_test

import (
	"flag"

	"slices"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
)

var (
	latRate     = flag.Float64("epp.rate", 500, "TestDecisionLatency: requests per second")
	latDuration = flag.Duration("epp.duration", time.Second, "TestDecisionLatency: how long to send")
	latTarget   = flag.String("epp.target", "", "TestDecisionLatency: address of a running `llmesh epp --config epp/testdata/mesh-latency.yaml` to measure instead of an in-process picker")
)

// TestDecisionLatency measures the picker's decision latency through a real
// grpc-go ext_proc client on loopback, open loop at a steady rate: from
// the request headers' send to the pick's arrival (headers + full-duplex
// body → pick), then the response ends the request. It logs p50/p99/max;
// it fails only when a request gets no pick. docs/epp.md gives the command
// and the numbers.
func TestDecisionLatency(t *testing.T) {
	rate, dur := *latRate, *latDuration
	if testing.Short() {
		dur = 200 * time.Millisecond
	}
	var d *epptest.Driver
	if *latTarget != "" {
		conn, err := grpc.NewClient(*latTarget, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		d = &epptest.Driver{Client: extprocv3.NewExternalProcessorClient(conn), RequestMode: epptest.FullDuplex, ResponseMode: epptest.FullDuplex}
	} else {
		// No records: nothing reads them here.
		p := startPickerMesh(t, "testdata/mesh-latency.yaml", func(c *epp.Config) { c.OnDone = nil })
		d = p.driver(epptest.FullDuplex)
	}
	// Warm the connection and the pools.
	for i := 0; i < 50; i++ {
		c, _, err := d.Start(ctx(t), chat(nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Respond(epptest.Response{Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	n := int(rate * dur.Seconds())
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			c, pick, err := d.Start(ctx(t), chat(nil))
			lat[i] = time.Since(t0)
			if err == nil && pick.Header == "" {
				err = errNoPick
			}
			if err == nil {
				_, err = c.Respond(epptest.Response{Status: 200})
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	t.Logf("decision latency at %.0f req/s (achieved %.0f), %d requests, full duplex, loopback grpc-go: p50 %v p99 %v max %v",
		rate, float64(n)/elapsed.Seconds(), n, q(0.50), q(0.99), lat[len(lat)-1])
}

type pickError string

func (e pickError) Error() string { return string(e) }

const errNoPick = pickError("no pick")
