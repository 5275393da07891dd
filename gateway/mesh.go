package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
)

// ConfigFromMesh builds the gateway configuration of one listener of a
// mesh config ("" means the first listener). A pool with several endpoints
// sends each request to the endpoint its scheduler lease is bound to; the
// first endpoint is the upstream of requests without one (no scheduler).
func ConfigFromMesh(c *config.Config, listener string) (Config, error) {
	var l *config.Listener
	switch {
	case listener != "":
		l = c.Listener(listener)
		if l == nil {
			return Config{}, fmt.Errorf("listeners: no listener named %q", listener)
		}
	case len(c.Listeners) > 0:
		l = c.Listeners[0]
	default:
		return Config{}, errors.New("listeners: the mesh config has no listener for the gateway")
	}
	var cfg Config
	arms := map[*config.Pool][]config.ArmPool{}
	for _, ap := range c.ArmPools() {
		arms[ap.Experiment.Pool] = append(arms[ap.Experiment.Pool], ap)
	}
	for i, p := range c.Pools {
		if len(p.Endpoints) == 0 {
			return Config{}, fmt.Errorf("pools[%d].endpoints: pool %q has no endpoint", i, p.Name)
		}
		ep := p.Endpoints[0]
		proto := OpenAI
		if p.Protocol == "grpc" {
			proto = GRPC
		}
		up := "http://" + net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))
		var eps []string // one endpoint is the upstream itself
		for _, e := range p.Endpoints[1:] {
			if eps == nil {
				eps = []string{p.Endpoints[0].Address()}
			}
			eps = append(eps, e.Address())
		}
		cfg.Pools = append(cfg.Pools, Pool{Name: p.Name, Protocol: proto, Upstream: up, ClassPriority: p.ClassEnginePriority(),
			Endpoints: eps, AffinityHeader: p.AffinityHeader, PrefixRouting: p.PrefixWeight > 0, Resume: resumeOf(p),
			AcceptUpstreamPick: p.AcceptUpstreamPick})
		// Each arm is a pool of its own (config.ArmPools), as control
		// builds it for Envoy: same upstream and capacity, the arm's
		// scheduler.
		for _, ap := range arms[p] {
			e, a := ap.Experiment, ap.Arm
			if c.Pool(ap.Pool.Name) != nil {
				return Config{}, fmt.Errorf("experiments: %q arm %q needs pool name %q, which is already taken", e.Name, a.Name, ap.Pool.Name)
			}
			cfg.Pools = append(cfg.Pools, Pool{Name: ap.Pool.Name, Protocol: proto, Upstream: up, Experiment: e.Name, Arm: a.Name,
				ClassPriority: p.ClassEnginePriority(), Endpoints: eps, AffinityHeader: p.AffinityHeader, PrefixRouting: p.PrefixWeight > 0, Resume: resumeOf(p),
				AcceptUpstreamPick: p.AcceptUpstreamPick})
		}
	}
	for _, r := range l.Routes {
		route := Route{PathPrefix: r.PathPrefix, Headers: r.Headers, Pool: r.Pool.Name, GRPC: r.Pool.Protocol == "grpc",
			Experiment: r.Experiment, Generation: r.Generation}
		if r.Class != nil {
			route.Class = r.Class.Name
		}
		cfg.Routes = append(cfg.Routes, route)
	}
	lim := l.Limits
	cfg.Limits = Limits{BodyTimeout: lim.BodyTimeout, BodyBudget: lim.BodyBudgetBytes, ClientWriteTimeout: lim.WriteTimeout,
		ClientIdleTimeout: lim.IdleTimeout, MaxConnsPerClient: lim.MaxConnsPerClient, MaxStreamsPerConn: lim.MaxStreamsPerConn}
	cfg.ServerTiming = c.Telemetry.ServerTiming
	cfg.MaxHeaderBytes = relocationHeaderBytes(&c.Relocation)
	if h := c.Classification.TrustedMarkerHeader; h != "" {
		cfg.DropHeaders = append(cfg.DropHeaders, h)
	}
	cfg.DefaultClass = c.DefaultClass.Name
	cfg.PreemptibleClasses = map[string]bool{}
	for _, cl := range c.Classes {
		cfg.PreemptibleClasses[cl.Name] = cl.Preemptible
	}
	return cfg, nil
}

// resumeOf is a mesh pool's preemption.resume as a gateway Pool's Resume;
// the default (continue) stays empty, as a Pool written in code has it.
func resumeOf(p *config.Pool) Resume {
	if p.Resume == config.ResumeContinue {
		return ""
	}
	return Resume(p.Resume)
}

// relocationHeaderBytes is the client-facing header limit relocation
// needs: the largest rule max as base64 (a "-bin" key's wire form is 4/3 of
// its value) plus 64 KiB for the other headers; never below net/http's
// default 1 MiB. 0 (the default) without rules.
func relocationHeaderBytes(r *config.Relocation) int {
	if !r.Enabled() {
		return 0
	}
	n := (r.MaxValue()+2)/3*4 + 64<<10
	return max(n, http.DefaultMaxHeaderBytes)
}

// ApplyMesh swaps in the routes, pools (experiment arms included) and
// classification of a new mesh config (a reload). It does not touch the
// scheduler: the process (cmd/llmesh/gatewayproc) checks c with
// CheckMesh and applies the scheduler part first (pools.MeshSet), so that
// new arm pools exist before requests are routed to them. On error the
// running config stays.
func (g *Gateway) ApplyMesh(c *config.Config, listener string) error {
	cfg, err := ConfigFromMesh(c, listener)
	if err != nil {
		return err
	}
	cls, err := exchange.NewClassifierFromConfig(c)
	if err != nil {
		return err
	}
	old := g.cfg.Load().cfg
	cfg.MaxRequestBytes, cfg.StreamIdleTimeout = old.MaxRequestBytes, old.StreamIdleTimeout
	if err := g.Update(cfg); err != nil {
		return err
	}
	g.classifier.Store(cls)
	return nil
}
