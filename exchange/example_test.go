package exchange_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/llmesh/llmesh/exchange"
)

// A host drives one Observer per request with its own timestamps.
func ExampleObserver() {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

	o := exchange.GetObserver(exchange.Options{})
	defer exchange.PutObserver(o)
	o.MarkReceived(ms(0))
	o.MarkAdmitted(ms(15))
	o.MarkUpstreamSent(ms(16))
	o.ResponseHeaders(ms(40), 200, exchange.MapHeaders{"content-type": "text/event-stream"})
	// Chunk boundaries fall wherever the network put them.
	for i, chunk := range []string{
		"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\nda",
		"ta: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\ndata: [DONE]\n\n",
	} {
		if err := o.Observe(ms(60+20*i), []byte(chunk)); err != nil {
			fmt.Println("observe:", err)
		}
	}
	o.Finish(ms(101), nil)

	obs := o.Observation()
	fmt.Println("queue", obs.QueueTime, "ttft", obs.TTFT, "upstream ttft", obs.UpstreamTTFT)
	fmt.Println("tokens", obs.OutputTokens, "decode steps", obs.DecodeSteps, "tpot", obs.TPOT, "ok", obs.OK())
	// Output:
	// queue 15ms ttft 60ms upstream ttft 44ms
	// tokens 3 decode steps 2 tpot 20.5ms ok true
}

func ExampleClassifier() {
	c, err := exchange.NewClassifier(exchange.ClassifierConfig{
		Classes: []exchange.Class{
			{Name: "interactive", Priority: 0, TTFT: 200 * time.Millisecond},
			{Name: "batch", Priority: 10, Preemptible: true},
		},
		DefaultClass:   "batch",
		Tenants:        map[string]string{"acme": "interactive"},
		TenantHeader:   "x-tenant-id",
		PriorityHeader: "x-llmesh-class",
		TrustedSources: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	})
	if err != nil {
		panic(err)
	}
	spoofed := c.Classify(exchange.RequestInfo{
		Peer:    netip.MustParseAddr("203.0.113.9"),
		Headers: exchange.MapHeaders{"x-llmesh-class": "interactive"},
	})
	fmt.Println(spoofed.Name, "-", spoofed.Reason)
	tenant := c.Classify(exchange.RequestInfo{Headers: exchange.MapHeaders{"x-tenant-id": "acme"}})
	fmt.Println(tenant.Name, tenant.TTFT, "-", tenant.Reason)
	// Output:
	// batch - default class; x-llmesh-class ignored from untrusted peer 203.0.113.9
	// interactive 200ms - tenant "acme"
}
