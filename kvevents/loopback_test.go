package kvevents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/kvevents"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// startPublishingSim starts a real sim on loopback whose KV-cache events
// go out on a real ZMQ PUB socket, and returns the sim and the socket's
// connectable address.
func startPublishingSim(t *testing.T) (*simtest.Sim, string) {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.Config{Endpoint: "tcp://*:0", Topic: "kv-events", MaxQueueSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() }) // after the sim stops (cleanups run last first)
	_, port, err := net.SplitHostPort(pub.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := simtest.Start(t, simtest.WithConfig(func(c *server.Config) { c.KVEvents = pub }))
	return s, "tcp://127.0.0.1:" + port
}

func complete(t *testing.T, s *simtest.Sim, prompt string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": s.Model, "prompt": prompt, "max_tokens": 2})
	resp, err := http.Post(s.HTTPURL+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %s", resp.Status)
	}
}

func words(seed, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s ", sim.Word(uint32(seed*1000+i)))
	}
	return b.String()
}

// Two real sims publish their KV-cache events over real ZMQ on loopback;
// subscribers feed a scheduler's precise index; the picker sends a prompt
// to the sim that computed it, although the other one is less loaded.
func TestPickerFollowsTheSimHoldingThePrefix(t *testing.T) {
	sched, err := scheduler.New(scheduler.Config{
		Classes: []scheduler.ClassConfig{{Name: "default"}},
		Pools: []scheduler.PoolConfig{{Name: "p", MaxInflight: 8, Policy: fifo.New(),
			Endpoints:     []scheduler.EndpointConfig{{Name: "e0", MaxInflight: 4}, {Name: "e1", MaxInflight: 4}},
			PrefixRouting: scheduler.PrefixRouting{Weight: 2, Precise: true}}},
	}, clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var sims []*simtest.Sim
	var subs []*kvevents.Subscriber
	for i, name := range []string{"e0", "e1"} {
		s, addr := startPublishingSim(t)
		sink, err := sched.EndpointBlocks("p", name)
		if err != nil {
			t.Fatal(err)
		}
		sub := &kvevents.Subscriber{Endpoint: addr, Topic: "kv-events", View: kvevents.NewView(sim.BlockSize, sink), Retry: 20 * time.Millisecond}
		wg.Add(1)
		go func() { defer wg.Done(); _ = sub.Run(ctx) }()
		// PUB drops what it sends before the subscription arrives: send
		// throwaway prompts until one batch got through.
		j := 0
		wait.Poll{Interval: time.Nanosecond}.Until(t, name+": a KV-event batch received", func() bool {
			if sub.Stats().Batches > 0 {
				return true
			}
			complete(t, s, words(100+10*i+j, 40))
			j++
			return false
		})
		sims, subs = append(sims, s), append(subs, sub)
	}

	prompt := words(7, 200)
	complete(t, sims[1], prompt)
	blocks := kvblock.Chain(nil, 0, sim.Tokenize(prompt), sim.BlockSize)
	req := scheduler.Request{Pool: "p", Class: "default", PromptTokens: 200, MaxTokens: 2, Blocks: blocks}
	// One request in flight on e1 makes e0 the less loaded: without a
	// match the picker would choose e0.
	hold, err := sched.Admit(ctx, scheduler.Request{Pool: "p", Class: "default", PromptTokens: 10, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release(scheduler.Done)
	if ep := scheduler.EndpointOf(hold); ep != "e0" {
		t.Fatalf("the first request went to %q, want e0", ep)
	}
	// The events of the step that computed the prompt may still be on
	// their way: ask until the picker chooses e1, with a deadline.
	wait.Poll{Interval: 5 * time.Millisecond}.UntilNil(t, "the picker to send the prompt to e1, which computed it", func() error {
		l, err := sched.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ep := scheduler.EndpointOf(l)
		l.Release(scheduler.Done)
		if ep != "e1" {
			return fmt.Errorf("picked %s (subscriber stats %+v)", ep, subs[1].Stats())
		}
		return nil
	})
	for i, s := range subs {
		if st := s.Stats(); st.Gaps != 0 || st.Malformed != 0 {
			t.Errorf("subscriber %d: %+v", i, st)
		}
	}
}
