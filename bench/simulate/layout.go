package simulate

import (
	"slices"

	"github.com/llmesh/llmesh/scheduler"
)

// Scheduler layouts of a fleet (Options.Schedulers): where the proxies'
// admission decisions are made.
const (
	// SchedulersShared: every proxy asks one scheduler machine, as
	// hosts that share the scheduler service do (scheduler/server).
	SchedulersShared = "shared"
	// SchedulersPerProxy: each proxy has its own machine holding its share
	// of every bound, as M hosts with in-process schedulers and no shared
	// service: proxy i of M gets share(limit, M, i, j) of endpoint j's
	// limit (and of the pool's bounds), learned limits included, so the
	// shares of every limit sum to it. A proxy admits only its own
	// requests into only its own share: one proxy may queue while another
	// has room on the same engine, and its preemptions find victims among
	// its own requests only.
	SchedulersPerProxy = "per-proxy"
)

// share is proxy i's part of n split among m proxies, for the bound of
// endpoint j: n/m each, and the remainder to the m proxies from j on (in
// rotation), so that over the endpoints no proxy gets every extra slot.
// A learned limit below m leaves some proxies none; the machine then
// keeps one slot (it clamps a limit to at least 1).
func share(n, m, i, j int) int {
	if m <= 1 {
		return n
	}
	s := n / m
	if ((i-j)%m+m)%m < n%m {
		s++
	}
	return s
}

// perProxyConfigs splits a fleet's shared scheduler configuration into
// one per proxy: every endpoint's limit and the pool's bounds (max
// in-flight, tokens, prefill tokens, urgent reserve) by share. A bound
// that is set stays set (at least 1); the reserve stays below the pool's
// limit.
func perProxyConfigs(cfg scheduler.Config, o Options) []scheduler.Config {
	m := o.Proxies
	out := make([]scheduler.Config, m)
	for i := range m {
		c := cfg
		c.Pools = slices.Clone(cfg.Pools)
		p := &c.Pools[0]
		p.Endpoints = slices.Clone(p.Endpoints)
		if len(p.Endpoints) > 0 {
			p.MaxInflight = 0
			for j := range p.Endpoints {
				p.Endpoints[j].MaxInflight = share(o.MaxInflight, m, i, j)
				p.MaxInflight += p.Endpoints[j].MaxInflight
			}
		} else {
			p.MaxInflight = share(p.MaxInflight, m, i, 0)
		}
		setShare := func(b *int) {
			if *b > 0 {
				*b = max(1, share(*b, m, i, 0))
			}
		}
		setShare(&p.MaxInflightTokens)
		setShare(&p.MaxPrefillTokens)
		p.ReserveUrgent = min(share(p.ReserveUrgent, m, i, 0), p.MaxInflight-1)
		out[i] = c
	}
	return out
}
