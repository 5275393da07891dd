package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/inferencepool"
	"github.com/llmesh/llmesh/scheduler/pools"
)

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// eppKube is `llmesh epp --inference-pool`: the watcher of the pool and the
// mesh pool it feeds.
type eppKube struct {
	w        *inferencepool.Watcher
	meshPool string
	mesh     *config.Config
	first    chan []string // each set the watcher reports
	quit     chan struct{} // closed when start's context ends: the watcher stops sending
	log      *slog.Logger
}

// newEPPKube connects to the cluster, checks the pool and the permissions,
// and chooses the mesh pool. Errors name the flag.
func newEPPKube(ctx context.Context, name, ns, kubeconfig string, mesh *config.Config, stderr io.Writer) (*eppKube, error) {
	meshPool := ""
	switch {
	case mesh.Pool(name) != nil:
		meshPool = name
	case len(mesh.Pools) == 1:
		meshPool = mesh.Pools[0].Name
	default:
		return nil, withExitCode(exitUsage, fmt.Errorf("--inference-pool: %q: the mesh config has %d pools and none of that name; name the mesh pool after the InferencePool", name, len(mesh.Pools)))
	}
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, withExitCode(exitUsage, fmt.Errorf("--kubeconfig: %w", err))
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		return nil, withExitCode(exitUsage, fmt.Errorf("--inference-pool: no in-cluster config (%v); outside a cluster give --kubeconfig", err))
	}
	if ns == "" {
		ns = "default"
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
			ns = strings.TrimSpace(string(b))
		}
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	pc, err := versioned.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	k := &eppKube{meshPool: meshPool, mesh: mesh, first: make(chan []string, 1), quit: make(chan struct{}),
		log: slog.New(slog.NewTextHandler(stderr, nil))}
	return k, k.watch(ctx, name, ns, kc, pc)
}

// watch builds and checks the watcher on the given clients.
func (k *eppKube) watch(ctx context.Context, name, ns string, kc kubernetes.Interface, pc versioned.Interface) error {
	w, err := inferencepool.New(inferencepool.Options{Namespace: ns, Name: name, Kube: kc, Pools: pc, Logger: k.log,
		OnChange: func(eps []string) {
			select {
			case k.first <- eps:
			case <-k.quit:
			}
		}})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Check(cctx); err != nil {
		code := 1
		if errors.Is(err, inferencepool.ErrNotFound) {
			code = exitUsage
		}
		return withExitCode(code, fmt.Errorf("--inference-pool %s (--namespace %s): %w", name, ns, err))
	}
	k.w = w
	return nil
}

// start runs the watcher: the first endpoint set is applied before it
// returns (so the picker serves the pool's pods, not the mesh file's),
// later ones as they come. stop ends the watcher.
func (k *eppKube) start(ctx context.Context, sched *pools.MeshSet, srv *epp.Server) (stop func(), err error) {
	m := &inferencepool.Mesh{Base: k.mesh, Pool: k.meshPool, Sched: sched, Picker: srv}
	if err := m.Check(); err != nil {
		return nil, err
	}
	ctx, stopCtx := context.WithCancel(ctx)
	cancel := func() { stopCtx(); close(k.quit) }
	done := make(chan error, 1)
	go func() { done <- k.w.Run(ctx) }()
	select {
	case eps := <-k.first:
		if err := m.Set(eps); err != nil {
			cancel()
			<-done
			return nil, fmt.Errorf("--inference-pool: %w", err)
		}
		k.log.Info("epp: endpoints from the InferencePool", "pool", k.meshPool, "endpoints", eps)
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("--inference-pool: %w", err)
	}
	go func() {
		for {
			select {
			case eps := <-k.first:
				if err := m.Set(eps); err != nil {
					k.log.Error("epp: endpoints not applied; the previous ones stay", "pool", k.meshPool, "err", err)
					continue
				}
				k.log.Info("epp: endpoints from the InferencePool", "pool", k.meshPool, "endpoints", eps)
			case <-k.quit:
				return
			}
		}
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			k.log.Error("epp: InferencePool watcher", "err", err)
		}
	}, nil
}
