package pools_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/kvevents"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/testkit/wait"
)

// A mesh whose pool names its engines' KV-cache event publishers gets
// subscribers from MeshSet.Start: blocks an engine reports over real ZMQ
// draw a request with that prefix to it, although the other engine is
// less loaded; and a reload starts them again on the new scheduler.
func TestMeshSubscribesToKVEvents(t *testing.T) {
	pubs := make([]*kvevents.Publisher, 2)
	urls := make([]string, 2)
	for i := range pubs {
		p, err := kvevents.NewPublisher(kvevents.Config{Endpoint: "tcp://*:0", Topic: "kv-events", MaxQueueSize: 1024})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_, port, err := net.SplitHostPort(p.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		pubs[i], urls[i] = p, "tcp://127.0.0.1:"+port
	}
	mesh := func(maxInflight string) *config.Config {
		c, err := config.Load([]byte(`
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:9001, 127.0.0.1:9002]
    capacity: {max_inflight: ` + maxInflight + `}
    prefix_routing:
      weight: 2
      kv_events:
        topic: kv-events
        endpoints:
          "127.0.0.1:9001": ` + urls[0] + `
          "127.0.0.1:9002": ` + urls[1] + `
classes:
  - {name: default}
`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ms, err := pools.NewMesh(mesh("8"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ms.Start(ctx); err != nil {
		t.Fatal(err)
	}

	toks := make([]uint32, 4*kvblock.DefaultBlockSize)
	for i := range toks {
		toks[i] = uint32(7000 + i)
	}
	blocks := kvblock.Chain(nil, 0, toks, kvblock.DefaultBlockSize)
	hashes := make([]uint64, len(blocks))
	for i := range hashes {
		hashes[i] = uint64(1000 + i) // the engine's own hashes are opaque
	}
	// Which endpoint a request with the prefix goes to while one request
	// holds 127.0.0.1:9001 (without a match the picker would choose :9002).
	pickWith := func() string {
		hold, err := ms.Admit(ctx, scheduler.Request{Pool: "gpu", Class: "default", PromptTokens: 10, MaxTokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Release(scheduler.Done)
		l, err := ms.Admit(ctx, scheduler.Request{Pool: "gpu", Class: "default", PromptTokens: len(toks) + 1, MaxTokens: 2, Blocks: blocks})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(scheduler.Done)
		if ep := scheduler.EndpointOf(hold); ep != "127.0.0.1:9001" {
			t.Fatalf("the holding request went to %s, want 127.0.0.1:9001", ep)
		}
		return scheduler.EndpointOf(l)
	}
	follows := func(what string) {
		t.Helper()
		wait.Poll{Interval: 50 * time.Millisecond}.Until(t, what+": the prefix to draw the request to its holder", func() bool {
			// PUB drops what it sends before the subscription arrives, so
			// publish again until the picker sees it.
			pubs[0].Publish(kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockStored, Hashes: hashes, Tokens: toks, BlockSize: kvblock.DefaultBlockSize}}})
			return pickWith() == "127.0.0.1:9001"
		})
	}
	follows("start")
	if _, err := ms.Apply(mesh("16")); err != nil { // rebuilds the pool's scheduler
		t.Fatal(err)
	}
	if got := pickWith(); got != "127.0.0.1:9002" {
		t.Fatalf("after the reload, before new events: picked %s, want the less loaded 127.0.0.1:9002", got)
	}
	follows("after the reload")
}
