package pools

import (
	"fmt"
	"sort"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/kvevents"
)

// kvSubscribers builds one KV-cache event subscriber per endpoint of every
// pool of c whose prefix routing is precise (prefix_routing.kv_events),
// each feeding that endpoint's side of the pool's current scheduler in s.
// Experiment arm pools share their pool's engines but keep approximate
// indexes of their own: they are not fed.
func kvSubscribers(c *config.Config, s *Set) ([]*kvevents.Subscriber, error) {
	var out []*kvevents.Subscriber
	for _, p := range c.Pools {
		src := p.PrefixKVEvents
		if src == nil {
			continue
		}
		addrs := make([]string, 0, len(src.Publishers))
		for a := range src.Publishers {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		for _, a := range addrs {
			sink, err := s.EndpointBlocks(p.Name, a)
			if err != nil {
				return nil, fmt.Errorf("pool %q: kv_events endpoint %q: %w", p.Name, a, err)
			}
			v := kvevents.NewView(kvblock.DefaultBlockSize, sink)
			// What the index held for this endpoint came from a subscriber
			// now stopped; events already applied there cannot be undone by
			// this view, so start from nothing.
			v.Reset()
			out = append(out, &kvevents.Subscriber{Endpoint: src.Publishers[a], Topic: src.Topic, View: v})
		}
	}
	return out, nil
}
